"""StatisticsEnv: one ``compute_stat`` call (two for "range": max, then min), formatted as the gold is.

Formats: "Round to N decimal places" -> exactly N decimals; otherwise an integer when the value is
whole, else 1 decimal for a median (a half) and 2 decimals for anything else (the easy mean).
Python's float formatting rounds half-even on the binary value, as the gold does.
"""
from __future__ import annotations

import ast
import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_LIST = r"(\[[-\d., ]*\])"
_CORRELATION = re.compile(rf"Pearson correlation coefficient between X={_LIST} and Y={_LIST}")
_SINGLE = re.compile(
    rf"What is the (mean|median|sum|range \(max minus min\)|population standard deviation|population variance) "
    rf"of {_LIST}\?"
)
_ROUND = re.compile(r"Round to (\d+) decimal places")
_STAT = {"mean": "mean", "median": "median", "sum": "sum", "population standard deviation": "std",
         "population variance": "variance"}


def _stat(call: CallFn, data: list, stat_type: str, **extra) -> float:
    out = call("compute_stat", {"data": data, "stat_type": stat_type, **extra})
    return out["result"]


def format_stat(value: float, stat_type: str, decimals: int | None) -> str:
    if decimals is not None:
        return f"{value:.{decimals}f}"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.1f}" if stat_type == "median" else f"{value:.2f}"


def solve(task: Task, call: CallFn) -> str:
    text = task.instruction
    m = _ROUND.search(text)
    decimals = int(m.group(1)) if m else None
    if (m := _CORRELATION.search(text)) is not None:
        xs, ys = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2))
        return format_stat(_stat(call, xs, "correlation", data2=ys), "correlation", decimals)
    m = _SINGLE.search(text)
    if m is None:
        raise OracleParseError("no recognised statistic question in the instruction")
    what, data = m.group(1), ast.literal_eval(m.group(2))
    if what.startswith("range"):
        value = _stat(call, data, "max") - _stat(call, data, "min")
        return format_stat(value, "range", decimals)
    stat_type = _STAT[what]
    return format_stat(_stat(call, data, stat_type), stat_type, decimals)


SOLVERS = {("StatisticsEnv", False): solve}
