"""ScheduleEnv: one find_free_slots or check_conflict call; the answer in the gold format.

"How many free N-minute/1-hour slots" is the number of maximal free gaps (len of ``result``),
"List all free slots" is ``str(result)``, "Do any of these meetings overlap?" is
``str(has_conflict)``.
"""
from __future__ import annotations

import ast
import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_TIME = r"(\d{1,2}:\d{2})"
_MEETINGS = r"(\[\[.*?\]\])"
_COUNT = re.compile(rf"Given these meetings: {_MEETINGS}\. How many free (\d+)-(minute|hour) slots are available "
                    rf"between {_TIME} and {_TIME}\?")
_LIST = re.compile(rf"Given these meetings: {_MEETINGS}\. List all free slots of at least (\d+) minutes "
                   rf"between {_TIME} and {_TIME}\.")
_OVERLAP = re.compile(rf"Do any of these meetings overlap\? {_MEETINGS}\.")


def _ok(out: dict, tool: str) -> dict:
    return out


def _free_slots(call: CallFn, meetings: str, start: str, end: str, minutes: int) -> list:
    args = {"busy": ast.literal_eval(meetings), "day_start": start, "day_end": end, "min_duration": minutes}
    return _ok(call("find_free_slots", args), "find_free_slots")["result"]


def solve(task: Task, call: CallFn) -> str:
    text = task.instruction
    if m := _COUNT.search(text):
        meetings, n, unit, start, end = m.groups()
        minutes = int(n) * (60 if unit == "hour" else 1)
        return str(len(_free_slots(call, meetings, start, end, minutes)))
    if m := _LIST.search(text):
        meetings, n, start, end = m.groups()
        return str(_free_slots(call, meetings, start, end, int(n)))
    if m := _OVERLAP.search(text):
        out = _ok(call("check_conflict", {"intervals": ast.literal_eval(m.group(1))}), "check_conflict")
        return str(out["result"]["has_conflict"])
    raise OracleParseError("not a When2Tool schedule question")


SOLVERS = {("ScheduleEnv", False): solve}
