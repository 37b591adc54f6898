"""StatisticsEnv: every stat_type, describe, every error message, float semantics."""
from __future__ import annotations

import math

import pytest

from data_builders.environments import make_environment, serialize
from data_builders.environments.statistics import StatisticsEnv, _lsum


def stat(data, stat_type, **extra):
    return StatisticsEnv().call("compute_stat", {"data": data, "stat_type": stat_type, **extra})


def ok(result, stat_type, n, mn, mx, total, mean):
    return {"success": True, "result": result, "stat_type": stat_type, "n": n,
            "input_summary": {"min": mn, "max": mx, "sum": total, "mean": mean}}


def fail(message):
    return {"success": False, "message": message}


DATA = [4, 1, 3, 2]  # sum 10, mean 2.5, population variance 1.25
SUMMARY = dict(n=4, mn=1.0, mx=4.0, total=10.0, mean=2.5)


@pytest.mark.parametrize("stat_type, result", [
    ("mean", 2.5),
    ("median", 2.5),            # even n: mean of the two middle values
    ("std", 1.1180339887),      # sqrt(1.25) = 1.118033988749895, rounded to 10 decimals
    ("variance", 1.25),         # population (÷n), not sample (÷(n-1) would be 1.666...)
    ("min", 1.0),
    ("max", 4.0),
    ("sum", 10.0),
])
def test_each_stat_type_whole_payload(stat_type, result):
    out = stat(DATA, stat_type)
    assert out == ok(result, stat_type, **SUMMARY)
    assert list(out) == ["success", "result", "stat_type", "n", "input_summary"]
    assert list(out["input_summary"]) == ["min", "max", "sum", "mean"]
    assert all(type(v) is float for v in out["input_summary"].values())


def test_median_odd_and_results_are_floats():
    out = stat([7, 1, 5], "median")
    assert out["result"] == 5.0 and type(out["result"]) is float
    assert serialize(out) == ('{"success": true, "result": 5.0, "stat_type": "median", "n": 3, '
                              '"input_summary": {"min": 1.0, "max": 7.0, "sum": 13.0, "mean": 4.3333333333}}')


def test_round_to_ten_decimals():
    assert stat([1, 2, 2], "mean")["result"] == 1.6666666667
    assert stat([1, 2, 2], "std")["result"] == round(math.sqrt(2 / 9), 10) == 0.4714045208


def test_percentile_spot_check():
    # The benchmark's spot check: compute_stat([1,2,3], percentile, 40) -> 1.8 (k = 0.4·2 = 0.8 -> 1 + 0.8·(2-1))
    assert stat([1, 2, 3], "percentile", percentile_value=40) == ok(1.8, "percentile", 3, 1.0, 3.0, 6.0, 2.0)


def test_percentile_rule():
    data = [30, 10, 20, 40]  # sorted 10 20 30 40, k = p/100·3
    assert stat(data, "percentile", percentile_value=0)["result"] == 10.0
    assert stat(data, "percentile", percentile_value=100)["result"] == 40.0
    assert stat(data, "percentile", percentile_value=50)["result"] == 25.0  # k=1.5
    assert stat(data, "percentile", percentile_value="25")["result"] == 17.5  # coerced to float; k=0.75


def test_percentile_out_of_range_follows_python_indexing():
    # Not validated, as in the original: a negative p gives a negative index (counted from the end),
    # p > 100 indexes past the end.
    assert stat([3, 1, 2], "percentile", percentile_value=-50)["result"] == 3.0  # k=-1 -> s[-1]
    assert stat([3, 1, 2], "percentile", percentile_value=150) == fail(
        "[TOOL_RUNTIME_ERROR] IndexError: list index out of range")


def test_correlation():
    # r = cov/(σx·σy): x dev (-1,0,1), y dev (-7/3,-1/3,8/3) -> 5/sqrt(2·114/9) = 0.99339926779878...
    out = stat([1, 2, 3], "correlation", data2=[2, 4, 7])
    assert out == ok(0.9933992678, "correlation", 3, 1.0, 3.0, 6.0, 2.0)
    assert stat([1, 2, 3], "correlation", data2=[3, 2, 1])["result"] == -1.0
    assert stat([1, 2, 3], "correlation", data2="[6, 4, 2]")["result"] == -1.0  # JSON-string array


def test_errors():
    assert stat([], "mean") == fail("Data list is empty.")
    assert StatisticsEnv().call("describe", {"data": []}) == fail("Data list is empty.")
    assert stat([1, 2], "percentile") == fail("percentile_value is required for stat_type=percentile.")
    assert stat([1, 2], "correlation") == fail("data2 is required for stat_type=correlation.")
    assert stat([1, 2], "correlation", data2=[1]) == fail("data and data2 must have the same length.")
    assert stat([1, 2], "correlation", data2=[]) == fail("data and data2 must have the same length.")
    assert stat([1, 1], "correlation", data2=[1, 2]) == fail("Standard deviation is zero, correlation undefined.")
    assert stat([1, 2], "correlation", data2=[5, 5]) == fail("Standard deviation is zero, correlation undefined.")
    assert stat([1, 2], "Mean") == fail("Unknown stat_type: Mean")  # case-sensitive
    assert stat([1, 2], "range") == fail("Unknown stat_type: range")
    assert stat([], "nonsense") == fail("Data list is empty.")  # emptiness is checked first


def test_pipeline_errors_and_coercion():
    env = StatisticsEnv()
    assert env.call("compute_stat", {"data": [1]}) == fail("Missing required parameter stat_type.")
    assert env.call("compute_stat", {"data": {"a": 1}, "stat_type": "mean"}) == fail(
        "Parameter data should have type array.")
    assert env.call("compute_stat", {"data": "[1, 2, 6]", "stat_type": "mean"})["result"] == 3.0
    assert stat(["1.5", 2.5, True], "sum")["result"] == 5.0  # elements go through float()
    assert stat([1, "x"], "mean") == fail("[TOOL_RUNTIME_ERROR] ValueError: could not convert string to float: 'x'")
    assert stat([1, 2], "mean", data2=[9], percentile_value=1)["result"] == 1.5  # irrelevant extras ignored
    assert stat([1, 2], "mean", bogus=1)["result"] == 1.5


def test_sums_are_left_to_right():
    # CPython 3.12's sum() compensates rounding (it would give 1.0 here); the original's 3.11 sum()
    # adds left to right, so 1e16 + 1 is lost before -1e16 is added.
    assert _lsum([1e16, 1.0, -1e16]) == 0.0
    assert _lsum([0.1] * 10) == 0.9999999999999999
    assert stat([1e16, 1, -1e16], "sum")["result"] == 0.0


def test_float_overflow_is_a_runtime_error():
    # (x - mean) ** 2 overflows with ** (x*x would silently give inf): same as the original.
    assert stat([1e200, 1], "variance") == fail(
        "[TOOL_RUNTIME_ERROR] OverflowError: (34, 'Numerical result out of range')")


def test_describe():
    out = StatisticsEnv().call("describe", {"data": [4, 1, 3, 2]})
    assert out == {"success": True, "result": {"count": 4, "mean": 2.5, "std": 1.1180339887, "min": 1.0,
                                               "25%": 1.75, "50%": 2.5, "75%": 3.25, "max": 4.0}}
    assert list(out) == ["success", "result"]
    assert list(out["result"]) == ["count", "mean", "std", "min", "25%", "50%", "75%", "max"]


def test_describe_rounds_quartiles_but_not_min_max():
    data = [0.123456789012345, 0.2, 0.3]
    res = StatisticsEnv().call("describe", {"data": data})["result"]
    assert res["min"] == 0.123456789012345 and res["max"] == 0.3  # raw
    assert res["25%"] == 0.1617283945  # 0.1617283945061725 rounded to 10 decimals
    assert res["mean"] == round((0.123456789012345 + 0.2 + 0.3) / 3, 10) == 0.2078189297


def test_make_environment_and_tools():
    env = make_environment({"name": "StatisticsEnv", "tools": ["compute_stat", "describe"], "parameters": {}})
    assert [s["function"]["name"] for s in env.tool_specs()] == ["compute_stat", "describe"]
    assert env.call("plot", {}) == fail("Tool plot not available in this task.")


def test_large_input_is_fast():
    import time

    start = time.perf_counter()
    for stat_type in ("std", "median", "correlation"):
        stat(list(range(1000)), stat_type, data2=list(range(1000, 0, -1)))
    assert time.perf_counter() - start < 1.0
    assert stat(list(range(1001)), "mean") == fail("Argument 'data' too many elements (1001, max 1000).")
