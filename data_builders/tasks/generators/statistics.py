"""StatisticsEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): mean/median/sum/range, population
std/variance, Pearson r.

Gold answers are computed exactly (``Fraction``, and ``Decimal`` square roots at 50 digits), not
with the environment's floats. The gold format rounds half-even, like Python's float formatting;
the two can only disagree when the exact value lies (almost) on a rounding boundary, so such
draws are redrawn (:func:`_fmt` raises :class:`_NearTie`): every gold is then independent of
float rounding details.
"""
from __future__ import annotations

import random
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

from .common import Draw, EnvGenerator

TOOLS = ("compute_stat", "describe")
_TIE_TOLERANCE = Decimal("1e-6")  # in units of the last kept decimal
_ANSWER = "Answer with only the number."


class _NearTie(ValueError):
    """The exact value is too close to a rounding boundary for an unambiguous gold."""


def _sqrt(x: Fraction) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 50
        return (Decimal(x.numerator) / Decimal(x.denominator)).sqrt()


def _fmt(value: Fraction | Decimal, decimals: int) -> str:
    """``value`` rounded half-even to ``decimals`` places, refusing near-ties."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = value if isinstance(value, Decimal) else Decimal(value.numerator) / Decimal(value.denominator)
        scaled = d.scaleb(decimals)
        if abs(abs(scaled - scaled.to_integral_value(rounding="ROUND_FLOOR")) - Decimal("0.5")) < _TIE_TOLERANCE:
            raise _NearTie(str(d))
        return str(d.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN))


def _whole_or(value: Fraction, decimals: int) -> str:
    """Integer when whole, else ``decimals`` places (the easy mean and every median)."""
    return str(value.numerator) if value.denominator == 1 else _fmt(value, decimals)


def _mean(xs: list[int]) -> Fraction:
    return Fraction(sum(xs), len(xs))


def _median(xs: list[int]) -> Fraction:
    s, n = sorted(xs), len(xs)
    return Fraction(s[n // 2]) if n % 2 else Fraction(s[n // 2 - 1] + s[n // 2], 2)


def _variance(xs: list[int]) -> Fraction:
    m = _mean(xs)
    return sum(((x - m) ** 2 for x in xs), Fraction(0)) / len(xs)


def _pearson(xs: list[int], ys: list[int]) -> Decimal:
    mx, my = _mean(xs), _mean(ys)
    cov = sum(((x - mx) * (y - my) for x, y in zip(xs, ys)), Fraction(0))
    sxx = sum(((x - mx) ** 2 for x in xs), Fraction(0))
    syy = sum(((y - my) ** 2 for y in ys), Fraction(0))
    r = _sqrt(cov * cov / (sxx * syy))  # the 1/n factors cancel
    return r if cov >= 0 else -r


def _ints(r: random.Random, n_lo: int, n_hi: int, lo: int, hi: int) -> list[int]:
    return [r.randint(lo, hi) for _ in range(r.randint(n_lo, n_hi))]


def _easy(r: random.Random) -> tuple[str, str]:
    xs = _ints(r, 3, 5, 1, 20)
    kind = r.choice(("mean", "median", "sum", "range"))
    if kind == "mean":
        return f"What is the mean of {xs}? {_ANSWER}", _whole_or(_mean(xs), 2)
    if kind == "median":
        return f"What is the median of {xs}? {_ANSWER}", _whole_or(_median(xs), 1)
    if kind == "sum":
        return f"What is the sum of {xs}? {_ANSWER}", str(sum(xs))
    return f"What is the range (max minus min) of {xs}? {_ANSWER}", str(max(xs) - min(xs))


def _round_question(what: str, xs: list[int], decimals: int = 2) -> str:
    return f"What is the {what} of {xs}? Round to {decimals} decimal places. {_ANSWER}"


def _medium(r: random.Random) -> tuple[str, str]:
    xs = _ints(r, 8, 15, 1, 100)
    kind = r.choice(("std", "mean", "variance", "median"))
    if kind == "std":
        return _round_question("population standard deviation", xs), _fmt(_sqrt(_variance(xs)), 2)
    if kind == "mean":
        return _round_question("mean", xs), _fmt(_mean(xs), 2)
    if kind == "variance":
        return _round_question("population variance", xs), _fmt(_variance(xs), 2)
    return f"What is the median of {xs}? {_ANSWER}", _whole_or(_median(xs), 1)


def _hard(r: random.Random) -> tuple[str, str]:
    kind = r.choice(("correlation", "std", "variance"))
    if kind == "correlation":
        # A noisy linear relation, so r is high but not 1 (as in When2Tool's hard tasks).
        n = r.randint(15, 25)
        slope, intercept, noise = r.randint(8, 30) / 10, r.randint(-10, 20), r.randint(3, 40)
        xs = [r.randint(1, 200) for _ in range(n)]
        ys = [round(slope * x) + intercept + r.randint(-noise, noise) for x in xs]
        if len(set(xs)) == 1 or len(set(ys)) == 1:
            raise _NearTie("constant data: correlation undefined")
        text = (f"What is the Pearson correlation coefficient between X={xs} and Y={ys}? "
                f"Round to 4 decimal places. {_ANSWER}")
        return text, _fmt(_pearson(xs, ys), 4)
    xs = _ints(r, 20, 30, 1, 500)
    if kind == "std":
        return _round_question("population standard deviation", xs), _fmt(_sqrt(_variance(xs)), 2)
    return _round_question("population variance", xs), _fmt(_variance(xs), 2)


_MAKERS = {"easy": _easy, "medium": _medium, "hard": _hard}


def make(difficulty: str, r: random.Random) -> Draw:
    while True:
        try:
            instruction, answer = _MAKERS[difficulty](r)
        except _NearTie:
            continue  # redraw: the gold would depend on float rounding
        return instruction, answer, {}


GENERATOR = EnvGenerator("StatisticsEnv", "statistics", tools=lambda difficulty: TOOLS, make=make)
