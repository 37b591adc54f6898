"""CountingEnv: exact results, every error message, and the size guard."""
from __future__ import annotations

import math
import sys
import time

import pytest

from data_builders.environments.counting import CountingEnv

LIMIT_ERROR = ("[TOOL_RUNTIME_ERROR] ValueError: Exceeds the limit (10000 digits) for integer string "
               "conversion; use sys.set_int_max_str_digits() to increase the limit")


def call(tool, **arguments):
    return CountingEnv().call(tool, arguments)


def too_large(digits):
    return {"success": False, "message": f"Result too large ({digits} digits). Use smaller inputs."}


def original(value: int) -> dict:
    """The original tool's tail (``len(str(result)) > 5000``) under the harness's 10,000-digit limit."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(10_000)
    try:
        digits = len(str(value))
    except ValueError:
        return {"success": False, "message": LIMIT_ERROR}
    finally:
        sys.set_int_max_str_digits(old)
    return {"success": True, "result": value} if digits <= 5000 else too_large(digits)


def test_small_results():
    assert call("combination", n=5, k=2) == {"success": True, "result": 10}
    assert call("combination", n=5, k=0) == {"success": True, "result": 1}
    assert call("combination", n=5, k=5) == {"success": True, "result": 1}
    assert call("permutation", n=5, k=2) == {"success": True, "result": 20}
    assert call("permutation", n=5, k=0) == {"success": True, "result": 1}
    assert call("factorial", n=0) == {"success": True, "result": 1}
    assert call("factorial", n=20) == {"success": True, "result": 2432902008176640000}
    assert list(call("factorial", n=3)) == ["success", "result"]


def test_benchmark_sized_results_are_exact():
    assert call("combination", n=94, k=42)["result"] == 959509335087854414441273718
    assert call("permutation", n=60, k=8)["result"] == 103163592470400
    assert call("factorial", n=29)["result"] == 8841761993739701954543616000000


def test_errors():
    assert call("combination", n=5, k=6) == {"success": False, "message": "Invalid: k=6 must be between 0 and n=5."}
    assert call("combination", n=5, k=-1) == {"success": False, "message": "Invalid: k=-1 must be between 0 and n=5."}
    assert call("permutation", n=3, k=4) == {"success": False, "message": "Invalid: k=4 must be between 0 and n=3."}
    # A negative n always fails the k check first (k >= 0 > n): "n must be non-negative." is factorial's.
    assert call("combination", n=-1, k=0) == {"success": False, "message": "Invalid: k=0 must be between 0 and n=-1."}
    assert call("factorial", n=-1) == {"success": False, "message": "n must be non-negative."}


def test_pipeline_coercion_and_limits():
    assert call("factorial", n="5") == {"success": True, "result": 120}
    assert call("factorial", n=5.9) == {"success": True, "result": 120}  # int() truncates
    assert call("combination", n=True, k=True) == {"success": True, "result": 1}
    assert call("factorial", n="five") == {"success": False, "message": "Parameter n should have type integer."}
    assert call("combination", n=5) == {"success": False, "message": "Missing required parameter k."}
    assert call("factorial", n=10**15 + 1) == {"success": False,
                                              "message": "Argument 'n' too large (max 1000000000000000)."}


def test_result_size_boundaries_give_exact_digit_counts():
    assert call("factorial", n=1775) == original(math.factorial(1775))  # 4999 digits: returned
    assert call("factorial", n=1775)["success"] is True
    assert call("factorial", n=1776) == too_large(5002)
    assert call("combination", n=16616, k=8308) == original(math.comb(16616, 8308))  # exactly 5000 digits
    assert call("combination", n=16616, k=8308)["success"] is True
    assert call("combination", n=16617, k=8308) == too_large(5001)
    assert call("factorial", n=3248) == too_large(9998)  # largest factorial the harness can print
    assert call("factorial", n=3249) == {"success": False, "message": LIMIT_ERROR}  # 10,001 digits


@pytest.mark.parametrize("tool, args", [
    ("factorial", (2000,)), ("factorial", (3000,)), ("factorial", (3300,)),
    ("permutation", (10**15, 666)), ("permutation", (10**15, 667)), ("permutation", (3000, 2990)),
    ("combination", (33000, 16500)), ("combination", (33300, 16650)), ("combination", (10**15, 333)),
    ("combination", (10**15, 10**15 - 700)),
])
def test_matches_original_semantics_near_the_limits(tool, args):
    exact = {"factorial": math.factorial, "permutation": math.perm, "combination": math.comb}[tool](*args)
    names = ("n", "k")[: len(args)]
    assert call(tool, **dict(zip(names, args))) == original(exact)


def test_huge_arguments_are_refused_without_computing():
    # Guard (deviation): the original would compute 10^15! and never return.
    start = time.perf_counter()
    assert call("factorial", n=10**15) == {"success": False, "message": LIMIT_ERROR}
    assert call("permutation", n=10**15, k=10**15) == {"success": False, "message": LIMIT_ERROR}
    assert call("combination", n=10**15, k=5 * 10**14) == {"success": False, "message": LIMIT_ERROR}
    assert call("permutation", n=10**15, k=10**6) == {"success": False, "message": LIMIT_ERROR}
    assert time.perf_counter() - start < 0.5
    # ...while huge n with a small result is still exact.
    n = 10**15
    assert call("combination", n=n, k=3)["result"] == n * (n - 1) * (n - 2) // 6
    assert call("combination", n=n, k=n - 1)["result"] == n
    assert call("permutation", n=n, k=2)["result"] == n * (n - 1)
