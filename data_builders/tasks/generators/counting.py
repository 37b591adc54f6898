"""CountingEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): C(n,k), P(n,k) and n! in symbolic or word form.

Gold values come from plain product loops here (the environment uses ``math.comb``/``math.perm``),
so the oracle test cross-checks two implementations.
"""
from __future__ import annotations

import random

from .common import Draw, EnvGenerator

TOOLS = ("combination", "permutation", "factorial")
_ANSWER = "Answer with only the number."


def _falling(n: int, k: int) -> int:
    """n·(n−1)·…·(n−k+1) = P(n,k)."""
    out = 1
    for i in range(n - k + 1, n + 1):
        out *= i
    return out


def _choose(n: int, k: int) -> int:
    # Each partial product C(n-k+i, i) is an integer, so the floor division is exact at every step.
    out = 1
    for i in range(1, k + 1):
        out = out * (n - k + i) // i
    return out


# Per difficulty: (form, weight, n range, k range). k never exceeds n (redrawn below).
_FORMS = {
    "easy": (("C", 32, (4, 12), (1, 10)), ("choose", 22, (4, 12), (1, 11)),
             ("arrange", 10, (3, 8), (2, 4)), ("fact", 6, (3, 8), None)),
    "medium": (("C", 24, (15, 30), (3, 14)), ("P", 22, (10, 20), (3, 7)),
               ("choose", 17, (12, 25), (3, 10)), ("fact", 7, (10, 16), None)),
    "hard": (("choose", 22, (54, 118), (10, 50)), ("C", 18, (42, 97), (10, 35)),
             ("P", 18, (31, 76), (5, 12)), ("fact", 12, (18, 30), None)),
}


def make(difficulty: str, r: random.Random) -> Draw:
    forms = _FORMS[difficulty]
    form, _, (n_lo, n_hi), k_range = r.choices(forms, [f[1] for f in forms])[0]
    n = r.randint(n_lo, n_hi)
    if form == "fact":
        return f"What is {n}!? {_ANSWER}", str(_falling(n, n)), {}
    k = r.randint(k_range[0], min(k_range[1], n))
    if form == "C":
        return f"Compute C({n},{k}). {_ANSWER}", str(_choose(n, k)), {}
    if form == "P":
        return f"Compute P({n},{k}). {_ANSWER}", str(_falling(n, k)), {}
    if form == "choose":
        return f"How many ways can you choose {k} items from {n}? {_ANSWER}", str(_choose(n, k)), {}
    return f"How many ways to arrange {k} items from {n}? {_ANSWER}", str(_falling(n, k)), {}


GENERATOR = EnvGenerator("CountingEnv", "counting", tools=lambda difficulty: TOOLS, make=make)
