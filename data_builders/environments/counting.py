"""CountingEnv (docs/guide.md#when2tool-environments): exact C(n,k), P(n,k) and n!.

Deviation from the original (a guard, not a behaviour change): the original computes the exact
result before measuring it, so ``factorial(10**15)`` (the runtime caps arguments at 10^15)
would run for hours and take terabytes. Here the result's size is first *estimated* with
``math.lgamma``; nothing is computed when the estimate shows more than
:data:`~.safe_arith.MAX_INT_DIGITS` digits. Observable output is unchanged:

* up to 5000 digits: the exact result;
* 5001..10,000 digits: ``"Result too large (<exact digit count> digits). Use smaller inputs."``
  (such results are cheap to compute, so the count is always exact);
* more than 10,000 digits: the original's ``str(result)`` hits the When2Tool harness's int->str
  limit (10,000 digits), a ``ValueError`` the runtime reports as a tool error. The same
  ``ValueError`` is raised here, without computing the number.
"""
from __future__ import annotations

import math

from .base import ToolEnvironment
from .safe_arith import MAX_INT_DIGITS, decimal_digits

MAX_RESULT_DIGITS = 5000
# |error| of the lgamma-based estimate, in decimal digits. lgamma(10**15) ~ 3.4e16 carries an
# absolute float error of a few units, i.e. at most a few digits after a difference of three
# lgammas; 50 digits leaves a wide margin, and computing a 10,050-digit result is still instant.
_ESTIMATE_SLACK_DIGITS = 50
_LN10 = math.log(10)
# CPython's message for str() of an int over the limit, with the harness's 10,000.
INT_STR_LIMIT_MESSAGE = (
    f"Exceeds the limit ({MAX_INT_DIGITS} digits) for integer string conversion; "
    "use sys.set_int_max_str_digits() to increase the limit"
)


def _log10_factorial(n: int) -> float:
    return math.lgamma(n + 1) / _LN10


def _sized(estimated_log10: float, compute) -> dict:
    """The original's payload for a result of about 10**estimated_log10, computing it only when it
    could be representable (at most MAX_INT_DIGITS digits)."""
    if estimated_log10 > MAX_INT_DIGITS + _ESTIMATE_SLACK_DIGITS:
        raise ValueError(INT_STR_LIMIT_MESSAGE)
    result = compute()
    digits = decimal_digits(result)  # counted arithmetically: no dependence on this process's limit
    if digits > MAX_INT_DIGITS:
        raise ValueError(INT_STR_LIMIT_MESSAGE)
    if digits > MAX_RESULT_DIGITS:
        return {"success": False, "message": f"Result too large ({digits} digits). Use smaller inputs."}
    return {"success": True, "result": result}


def _invalid_k(n: int, k: int) -> dict | None:
    if k < 0 or k > n:
        return {"success": False, "message": f"Invalid: k={k} must be between 0 and n={n}."}
    return None


class CountingEnv(ToolEnvironment):
    name = "CountingEnv"

    def combination(self, n: int, k: int) -> dict:
        # n < 0 always fails this check first (k >= 0 > n), as in the original.
        err = _invalid_k(n, k)
        if err:
            return err
        est = _log10_factorial(n) - _log10_factorial(k) - _log10_factorial(n - k)
        return _sized(est, lambda: math.comb(n, k))

    def permutation(self, n: int, k: int) -> dict:
        err = _invalid_k(n, k)
        if err:
            return err
        est = _log10_factorial(n) - _log10_factorial(n - k)
        return _sized(est, lambda: math.perm(n, k))

    def factorial(self, n: int) -> dict:
        if n < 0:
            return {"success": False, "message": "n must be non-negative."}
        return _sized(_log10_factorial(n), lambda: math.factorial(n))
