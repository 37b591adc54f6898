"""CalculatorEnv: the expression after the last ": " (single-hop); three chained calls (multi-hop)."""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_MULTIHOP = re.compile(r"First compute x = (.+?)\. Then compute y = (.+?)\. Finally compute z = (.+?)\. Return only z\.")


def _evaluate(call: CallFn, expression: str) -> str:
    out = call("evaluate_expression", {"expression": expression})
    return str(out["result"])


def solve(task: Task, call: CallFn) -> str:
    if ": " not in task.instruction:
        raise OracleParseError("no ': <expression>' in the instruction")
    return _evaluate(call, task.instruction.rsplit(": ", 1)[1].strip())


def solve_multihop(task: Task, call: CallFn) -> str:
    m = _MULTIHOP.search(task.instruction)
    if not m:
        raise OracleParseError("not a 'First compute x = …' chain")
    e1, e2, e3 = m.groups()
    # The tool has no variables: substitute the previous result as a number (parenthesised, so a
    # negative value keeps its meaning inside the next expression).
    x = _evaluate(call, e1)
    y = _evaluate(call, re.sub(r"\bx\b", f"({x})" if x.startswith("-") else x, e2))
    return _evaluate(call, re.sub(r"\by\b", f"({y})" if y.startswith("-") else y, e3))


SOLVERS = {("CalculatorEnv", False): solve, ("CalculatorEnv", True): solve_multihop}
