"""StatisticsEnv (docs/guide.md#when2tool-environments): descriptive statistics on a list of numbers, population
moments.

Float semantics are part of the observable output (results are rounded to 10 decimals, not
exact), so every quantity is computed exactly the way the original does: elements converted with
``float()``, sums accumulated left to right starting from the integer 0, squared deviations taken
with ``** 2`` (which raises ``OverflowError`` where the original does), ``math.sqrt`` for roots.
Input is at most 1000 elements (the runtime's argument limits), so every call is linear and fast.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from .base import ToolEnvironment

ROUND_DIGITS = 10


def _lsum(values: Iterable[float]) -> float:
    """Left-to-right float sum from the integer 0, as CPython 3.11's ``sum()`` computes it.

    Spelled out because CPython 3.12+ ``sum()`` uses compensated summation, which would change
    the last bits of results (and so, occasionally, their 10-decimal rounding)."""
    total: Any = 0
    for v in values:
        total = total + v
    return total


def _mean(xs: list[float]) -> float:
    return _lsum(xs) / len(xs)


def _variance(xs: list[float]) -> float:
    mean = _mean(xs)
    return _lsum((x - mean) ** 2 for x in xs) / len(xs)


def percentile(sorted_xs: list[float], p: float) -> float:
    """The benchmark's rule: k = p/100·(n−1); the element at k when k is whole, else linear interpolation.

    Out-of-range p is not rejected, as in the original: p < 0 indexes from the end (Python's
    negative indices) and p > 100 raises ``IndexError`` (a tool runtime error)."""
    k = (p / 100) * (len(sorted_xs) - 1)
    f, c = math.floor(k), math.ceil(k)
    if f == c:
        return sorted_xs[int(k)]
    return sorted_xs[f] + (k - f) * (sorted_xs[c] - sorted_xs[f])


def _correlation(xs: list[float], ys: list[float]) -> float | None:
    """Population Pearson r = cov/(σx·σy); ``None`` when a standard deviation is zero."""
    n = len(xs)
    mean_x, mean_y = _mean(xs), _mean(ys)
    cov = _lsum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / n
    std_x = math.sqrt(_lsum((x - mean_x) ** 2 for x in xs) / n)
    std_y = math.sqrt(_lsum((y - mean_y) ** 2 for y in ys) / n)
    if std_x == 0 or std_y == 0:
        return None
    return cov / (std_x * std_y)


def _fail(message: str) -> dict:
    return {"success": False, "message": message}


class StatisticsEnv(ToolEnvironment):
    name = "StatisticsEnv"

    def compute_stat(self, data: list, stat_type: str, data2: list | None = None,
                     percentile_value: float | None = None) -> dict:
        if not data:
            return _fail("Data list is empty.")
        xs = [float(x) for x in data]  # a non-numeric element raises: a tool runtime error
        n = len(xs)
        if stat_type == "mean":
            result = _mean(xs)
        elif stat_type == "median":
            s = sorted(xs)
            result = s[n // 2] if n % 2 == 1 else (s[n // 2 - 1] + s[n // 2]) / 2
        elif stat_type == "std":
            result = math.sqrt(_variance(xs))
        elif stat_type == "variance":
            result = _variance(xs)
        elif stat_type == "min":
            result = min(xs)
        elif stat_type == "max":
            result = max(xs)
        elif stat_type == "sum":
            result = _lsum(xs)
        elif stat_type == "percentile":
            if percentile_value is None:
                return _fail("percentile_value is required for stat_type=percentile.")
            result = percentile(sorted(xs), percentile_value)
        elif stat_type == "correlation":
            if data2 is None:
                return _fail("data2 is required for stat_type=correlation.")
            ys = [float(y) for y in data2]
            if len(ys) != n:
                return _fail("data and data2 must have the same length.")
            result = _correlation(xs, ys)
            if result is None:
                return _fail("Standard deviation is zero, correlation undefined.")
        else:
            return _fail(f"Unknown stat_type: {stat_type}")

        s = sorted(xs)
        total = _lsum(xs)
        return {
            "success": True,
            "result": round(result, ROUND_DIGITS),
            "stat_type": stat_type,
            "n": n,
            "input_summary": {"min": s[0], "max": s[-1], "sum": round(total, ROUND_DIGITS),
                              "mean": round(total / n, ROUND_DIGITS)},
        }

    def describe(self, data: list) -> dict:
        if not data:
            return _fail("Data list is empty.")
        xs = [float(x) for x in data]
        s = sorted(xs)
        return {
            "success": True,
            "result": {
                "count": len(xs),
                "mean": round(_mean(xs), ROUND_DIGITS),
                "std": round(math.sqrt(_variance(xs)), ROUND_DIGITS),
                "min": s[0],  # raw, unlike the rounded quartiles (as in the original)
                "25%": round(percentile(s, 25), ROUND_DIGITS),
                "50%": round(percentile(s, 50), ROUND_DIGITS),
                "75%": round(percentile(s, 75), ROUND_DIGITS),
                "max": s[-1],
            },
        }
