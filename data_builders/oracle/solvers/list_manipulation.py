"""ListManipulationEnv: 'Initial <list>. Apply op(args). Return final list.' -> one call, the list literal."""
from __future__ import annotations

import ast
import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_LIST = re.compile(r"Initial (\[.*\])\. Apply (\w+)\((.*)\)\. Return final (?:2D )?list\.")
_KWARG = re.compile(r"(\w+)=(\[[^\]]*\]|[^,]+)")


def parse(instruction: str) -> tuple[str, dict]:
    m = _LIST.search(instruction)
    if not m:
        raise OracleParseError("no 'Initial [...]. Apply op(...)' in the instruction")
    initial, op, raw = m.groups()
    args: dict = {"values": ast.literal_eval(initial)}
    if raw and "=" not in raw:
        args["value"] = ast.literal_eval(raw)  # remove(17), append(5)
    else:
        for key, value in _KWARG.findall(raw):
            args[key] = ast.literal_eval(value)
    return op, args


def solve(task: Task, call: CallFn) -> str:
    op, args = parse(task.instruction)
    out = call(op, args)
    return str(out["data"]["current_list"])


SOLVERS = {("ListManipulationEnv", False): solve}
