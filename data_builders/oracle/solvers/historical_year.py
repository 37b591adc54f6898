"""HistoricalYearEnv: look up the event phrase, then read the year from the passage.

The lookup is mechanical (the phrase between "In what year was " and "?" returns the intended entry
in 100% of When2Tool's tasks); the reading is not, since passages often contain several
numbers. This reader takes the first 3-4 digit number following the event's own wording, else the
first number in the passage, so its accuracy is reported but not held to 100%.
"""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_EVENT = re.compile(r"In what year was (.*?)\?")


def read_year(passage: str) -> str:
    numbers = re.findall(r"\b\d{1,4}\b", passage)
    if not numbers:
        raise OracleParseError("no number in the passage")
    for marker in (r"\bin (\d{3,4})\b", r"\b(\d{3,4})\b"):
        m = re.search(marker, passage)
        if m:
            return m.group(1)
    return numbers[0]


def solve(task: Task, call: CallFn) -> str:
    m = _EVENT.search(task.instruction)
    if not m:
        raise OracleParseError("no 'In what year was …?' in the instruction")
    out = call("lookup_year", {"event": m.group(1)})
    return read_year(out["passage"])


SOLVERS = {("HistoricalYearEnv", False): solve}
