"""Built-in generators for Statistics, Counting, Matrix and Prime (group A): determinism, split
hygiene, When2Tool templates and tool lists, content ranges, and gold re-derived a third way."""
from __future__ import annotations

import ast
import collections
import json
import math
import re
import statistics
from fractions import Fraction
from functools import lru_cache

import numpy as np
import pytest

from data_builders.tasks.builtin import generate_builtin
from data_builders.tasks.generators.statistics import _fmt, _NearTie
from data_builders.tasks.schema import DIFFICULTIES
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"
ENVS = ("StatisticsEnv", "CountingEnv", "MatrixEnv", "PrimeEnv")
TAGS = {"StatisticsEnv": "statistics", "CountingEnv": "counting", "MatrixEnv": "matrix", "PrimeEnv": "prime"}
TOOLS = {
    "StatisticsEnv": ["compute_stat", "describe"],
    "CountingEnv": ["combination", "permutation", "factorial"],
    "MatrixEnv": ["matrix_determinant", "matrix_multiply", "matrix_trace"],
    "PrimeEnv": ["is_prime", "nth_prime", "factorize"],
}
N = 60


@lru_cache(maxsize=None)
def _generated(env: str, split: str, seed: int, n: int):
    return tuple(generate_builtin(split, n_per_cell=n, seed=seed, envs=[env]))


def cell(env: str, difficulty: str, split: str = "train", seed: int = 0, n: int = N):
    return tuple(t for t in _generated(env, split, seed, n) if t.difficulty == difficulty)


def template(instruction: str) -> str:
    """The instruction with its numbers and list literals abstracted (as used to compare with When2Tool)."""
    text = re.sub(r"\[[-\d,\[\] ]*\]", "L", instruction)
    return re.sub(r"\d+", "N", text)


@lru_cache(maxsize=None)
def when2tool_tasks() -> tuple[dict, ...]:
    path = DATA / "tasks_v1_train.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    return tuple(json.loads(path.read_text(encoding="utf-8")) + json.loads(
        (DATA / "tasks_v1_test.json").read_text(encoding="utf-8")))


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize("env", ENVS)
def test_deterministic_seed_sensitive_and_prefix(env):
    for d in DIFFICULTIES:
        a = [t.to_dict() for t in cell(env, d, "test", 3, 12)]
        assert a == [t.to_dict() for t in generate_builtin("test", n_per_cell=12, seed=3, envs=[env])
                     if t.difficulty == d]
        assert [t.instruction for t in cell(env, d, "test", 4, 12)] != [t["instruction"] for t in a]
        assert [t.to_dict() for t in cell(env, d, "test", 3, 5)] == a[:5]


@pytest.mark.parametrize("env", ENVS)
def test_schema_tags_and_tools(env):
    for split in ("train", "test"):
        for d in DIFFICULTIES:
            ts = cell(env, d, split)
            assert len(ts) == N and len({t.instruction for t in ts}) == N
            for t in ts:
                assert list(t.env.tools) == TOOLS[env]
                assert t.tags == (TAGS[env], "single_round") and t.category == "A"
                assert t.env.parameters == {} and t.multi_step is False and t.split == split


@pytest.mark.parametrize("env", ENVS)
def test_splits_disjoint_across_seeds(env):
    train = {t.instruction for s in (0, 1) for d in DIFFICULTIES for t in cell(env, d, "train", s)}
    test = {t.instruction for s in (0, 1) for d in DIFFICULTIES for t in cell(env, d, "test", s)}
    assert train and test and not train & test


@pytest.mark.parametrize("env", ENVS)
def test_tools_and_templates_match_when2tool(env):
    tasks = [r for r in when2tool_tasks() if r["environments"][0]["name"] == env]
    for d in DIFFICULTIES:
        real = [r for r in tasks if r["difficulty"] == d]
        assert {tuple(r["environments"][0]["tools"]) for r in real} == {tuple(TOOLS[env])}
        assert {template(r["instruction"]) for r in real} == {template(t.instruction) for t in cell(env, d)}


# --------------------------------------------------------------------------- Statistics


def _floats(text):
    return [ast.literal_eval(x) for x in re.findall(r"\[[-\d, ]*\]", text)]


def test_statistics_gold_and_ranges():
    # Gold re-derived with the statistics module and float formatting (a third implementation).
    seen = collections.Counter()
    for d in DIFFICULTIES:
        for t in cell("StatisticsEnv", d) + cell("StatisticsEnv", d, "test"):
            lists, text, gold = _floats(t.instruction), t.instruction, t.answer
            xs = lists[0]
            if "Pearson" in text:
                kind = "r"
                ys = lists[1]
                assert d == "hard" and 15 <= len(xs) == len(ys) <= 25
                value = statistics.correlation(xs, ys)
            elif "standard deviation" in text:
                kind, value = "std", statistics.pstdev(xs)
            elif "variance" in text:
                kind, value = "var", statistics.pvariance(xs)
            elif "median" in text:
                kind, value = "median", statistics.median(xs)
            elif "mean" in text:
                kind, value = "mean", statistics.mean(xs)
            elif "sum" in text:
                kind, value = "sum", sum(xs)
            else:
                kind, value = "range", max(xs) - min(xs)
            seen[d, kind] += 1
            rounding = re.search(r"Round to (\d) decimal places", text)
            if rounding:
                assert gold == f"{value:.{rounding.group(1)}f}"
                assert re.fullmatch(r"-?\d+\.\d{%s}" % rounding.group(1), gold)
                assert rounding.group(1) == ("4" if kind == "r" else "2")
            elif float(value).is_integer():
                assert gold == str(int(value))
            else:  # When2Tool's gold: easy mean 2 decimals, median 1 decimal
                assert gold == (f"{value:.1f}" if kind == "median" else f"{value:.2f}")
            n_lo, n_hi, hi = {"easy": (3, 5, 20), "medium": (8, 15, 100), "hard": (15, 30, 500)}[d]
            assert n_lo <= len(xs) <= n_hi and all(1 <= x <= hi for x in xs)
            if d == "hard" and kind != "r":
                assert 20 <= len(xs) <= 30
    assert {k for (d, k) in seen if d == "easy"} == {"mean", "median", "sum", "range"}
    assert {k for (d, k) in seen if d == "medium"} == {"std", "mean", "var", "median"}
    assert {k for (d, k) in seen if d == "hard"} == {"r", "std", "var"}
    assert any(t.answer.endswith(".5") for t in cell("StatisticsEnv", "easy"))  # a half median
    assert any("." not in t.answer and "mean" in t.instruction for t in cell("StatisticsEnv", "easy", n=200))


def test_statistics_gold_refuses_near_ties():
    # A value on a rounding boundary would make the gold depend on float details: redrawn instead.
    assert _fmt(Fraction(1, 3), 2) == "0.33" and _fmt(Fraction(15, 2), 2) == "7.50"
    assert _fmt(Fraction(-2, 3), 4) == "-0.6667"
    for tie in (Fraction(1, 8), Fraction(23, 200), Fraction(5, 2)):
        with pytest.raises(_NearTie):
            _fmt(tie, 2 if tie != Fraction(5, 2) else 0)


# --------------------------------------------------------------------------- Counting

_COUNTING = [
    (re.compile(r"^Compute C\((\d+),(\d+)\)\. Answer with only the number\.$"), "C", ("n", "k")),
    (re.compile(r"^Compute P\((\d+),(\d+)\)\. Answer with only the number\.$"), "P", ("n", "k")),
    (re.compile(r"^How many ways can you choose (\d+) items from (\d+)\? Answer with only the number\.$"), "C",
     ("k", "n")),
    (re.compile(r"^How many ways to arrange (\d+) items from (\d+)\? Answer with only the number\.$"), "P",
     ("k", "n")),
    (re.compile(r"^What is (\d+)!\? Answer with only the number\.$"), "F", ("n",)),
]


def test_counting_gold_and_ranges():
    n_max = {"easy": 12, "medium": 30, "hard": 118}
    for d in DIFFICULTIES:
        kinds = collections.Counter()
        for t in cell("CountingEnv", d) + cell("CountingEnv", d, "test"):
            for pattern, kind, names in _COUNTING:
                m = pattern.match(t.instruction)
                if m:
                    break
            else:
                pytest.fail(f"unexpected instruction {t.instruction!r}")
            a = {name: int(v) for name, v in zip(names, m.groups())}
            kinds[kind] += 1
            if kind == "F":
                expected = math.factorial(a["n"])
            else:
                assert 1 <= a["k"] <= a["n"] <= n_max[d]
                expected = math.comb(a["n"], a["k"]) if kind == "C" else math.perm(a["n"], a["k"])
            assert t.answer == str(expected)
        assert set(kinds) == {"C", "P", "F"}


# --------------------------------------------------------------------------- Matrix


def test_matrix_gold_and_ranges():
    for d in DIFFICULTIES:
        kinds = collections.Counter()
        for t in cell("MatrixEnv", d) + cell("MatrixEnv", d, "test"):
            m = ast.literal_eval(re.search(r"\[\[.*\]\]", t.instruction).group(0))
            n = len(m)
            assert all(len(row) == n for row in m)
            assert n == {"easy": 2, "medium": 3}.get(d, n) and n in (2, 3, 4, 5)
            assert all(-50 <= x <= 50 for row in m for x in row)
            if "trace" in t.instruction:
                kinds["trace"] += 1
                assert d != "hard" and t.answer == str(sum(m[i][i] for i in range(n)))
            else:
                kinds[n] += 1
                # numpy's LU determinant, rounded: a third implementation (entries are small)
                assert t.answer == str(round(float(np.linalg.det(np.array(m, dtype=float)))))
                if d == "hard":
                    assert f"the {n}x{n} matrix" in t.instruction
        assert ("trace" in kinds) == (d != "hard")
        if d == "hard":
            assert set(kinds) == {4, 5}


# --------------------------------------------------------------------------- Prime


def _sympy_free_factor(n):
    out = collections.Counter()
    p = 2
    while n > 1:
        while n % p == 0:
            out[p] += 1
            n //= p
        p += 1
    return out


PRIMES = [p for p in range(2, 4000) if all(p % q for q in range(2, math.isqrt(p) + 1))]


def test_prime_gold_and_ranges():
    for d in DIFFICULTIES:
        kinds = collections.Counter()
        for t in cell("PrimeEnv", d) + cell("PrimeEnv", d, "test"):
            text = t.instruction
            if m := re.fullmatch(r"Is (\d+) (prime|a prime number)\? Answer True or False\.", text):
                n = int(m.group(1))
                kinds[t.answer] += 1
                assert t.answer == str(all(n % k for k in range(2, math.isqrt(n) + 1)) and n >= 2)
                assert n <= {"easy": 99, "medium": 999, "hard": 999_999}[d]
            elif m := re.fullmatch(r"What is the (\d+)th prime number\? Answer with only the number\.", text):
                k = int(m.group(1))
                kinds["nth"] += 1
                assert t.answer == str(PRIMES[k - 1])
            else:
                m = re.fullmatch(r"What is the prime factorization of (\d+)\? Write as 'p1\^e1 \* p2\^e2' "
                                 r"\(use p\^1 as just p\)\. Answer with only the factorization\.", text)
                assert m, text
                kinds["factor"] += 1
                f = _sympy_free_factor(int(m.group(1)))
                assert sum(f.values()) >= 2  # composites only
                assert t.answer == " * ".join(f"{p}^{e}" if e > 1 else str(p) for p, e in sorted(f.items()))
        assert set(kinds) == {"True", "False", "nth", "factor"}
