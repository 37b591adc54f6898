"""MatrixEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): determinant or trace of 2x2 (easy) / 3x3
(medium) integer matrices, determinant of 4x4 or 5x5 (hard).

The gold determinant uses the Leibniz permutation formula here (the environment expands cofactors),
so the oracle test cross-checks two implementations.
"""
from __future__ import annotations

import itertools
import random

from .common import Draw, EnvGenerator

TOOLS = ("matrix_determinant", "matrix_multiply", "matrix_trace")
_ANSWER = "Answer with only the number."


def leibniz_det(m: list[list[int]]) -> int:
    n, total = len(m), 0
    for perm in itertools.permutations(range(n)):
        inversions = sum(perm[i] > perm[j] for i in range(n) for j in range(i + 1, n))
        term = -1 if inversions % 2 else 1
        for i, j in enumerate(perm):
            term *= m[i][j]
        total += term
    return total


def _matrix(r: random.Random, n: int, lo: int, hi: int) -> list[list[int]]:
    return [[r.randint(lo, hi) for _ in range(n)] for _ in range(n)]


def make(difficulty: str, r: random.Random) -> Draw:
    if difficulty == "hard":
        # Two in three are 4x4 (half of them with small, half with large entries), one in three 5x5.
        shape = r.randrange(3)
        n, (lo, hi) = (5, (-10, 15)) if shape == 2 else (4, (-20, 30) if shape == 0 else (-50, 50))
        m = _matrix(r, n, lo, hi)
        return f"What is the determinant of the {n}x{n} matrix {m}? {_ANSWER}", str(leibniz_det(m)), {}
    n = 2 if difficulty == "easy" else 3
    wide = (1, 15) if difficulty == "easy" else (-20, 30)  # the "Compute the determinant" form
    narrow = (-5, 10) if difficulty == "easy" else (-10, 15)
    form = r.randrange(3)
    if form == 0:
        m = _matrix(r, n, *narrow)
        return f"What is the determinant of {m}? {_ANSWER}", str(leibniz_det(m)), {}
    if form == 1:
        m = _matrix(r, n, *narrow)
        return f"What is the trace of {m}? {_ANSWER}", str(sum(m[i][i] for i in range(n))), {}
    m = _matrix(r, n, *wide)
    of = "of the matrix" if difficulty == "easy" else "of"
    return f"Compute the determinant {of} {m}. {_ANSWER}", str(leibniz_det(m)), {}


GENERATOR = EnvGenerator("MatrixEnv", "matrix", tools=lambda difficulty: TOOLS, make=make)
