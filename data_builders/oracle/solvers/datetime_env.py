"""DateTimeEnv: dates written "Month D, YYYY" become YYYY-MM-DD tool arguments.

Three phrasings: "How many days are between A and B, Y?" (A may carry its own year, else it
shares B's), "What date is N days after D?" and "What day of the week is D?".
"""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
_M = "(" + "|".join(MONTHS) + r") (\d{1,2})"
_DIFF = re.compile(rf"How many days are between {_M}(?:, (\d{{4}}))? and {_M}, (\d{{4}})\?", re.IGNORECASE)
_ADD = re.compile(rf"What date is (\d+) days? after {_M}, (\d{{4}})\?", re.IGNORECASE)
_DOW = re.compile(rf"What day of the week is {_M}, (\d{{4}})\?", re.IGNORECASE)


def iso(month: str, day: str, year: str) -> str:
    return f"{int(year):04d}-{MONTHS.index(month.lower()) + 1:02d}-{int(day):02d}"


def parse(instruction: str) -> tuple[str, dict]:
    if m := _DIFF.search(instruction):
        m1, d1, y1, m2, d2, y2 = m.groups()
        return "date_diff", {"date1": iso(m1, d1, y1 or y2), "date2": iso(m2, d2, y2)}
    if m := _ADD.search(instruction):
        n, mo, d, y = m.groups()
        return "date_add", {"date": iso(mo, d, y), "days": int(n)}
    if m := _DOW.search(instruction):
        return "day_of_week", {"date": iso(*m.groups())}
    raise OracleParseError("instruction matches no date_diff/date_add/day_of_week phrasing")


def solve(task: Task, call: CallFn) -> str:
    tool, args = parse(task.instruction)
    out = call(tool, args)
    return str(out["result"])


SOLVERS = {("DateTimeEnv", False): solve}
