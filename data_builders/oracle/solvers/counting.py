"""CountingEnv: C(n,k) / "choose k items from n" -> combination, P(n,k) / "arrange k items from n"
-> permutation, "n!" -> factorial; one call, the integer as the answer."""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

# (pattern, tool, names of the captured groups in order)
_PATTERNS = (
    (re.compile(r"Compute C\((\d+),\s*(\d+)\)"), "combination", ("n", "k")),
    (re.compile(r"Compute P\((\d+),\s*(\d+)\)"), "permutation", ("n", "k")),
    (re.compile(r"How many ways can you choose (\d+) items? from (\d+)\?"), "combination", ("k", "n")),
    (re.compile(r"How many ways to arrange (\d+) items? from (\d+)\?"), "permutation", ("k", "n")),
    (re.compile(r"What is (\d+)!\?"), "factorial", ("n",)),
)


def parse(instruction: str) -> tuple[str, dict]:
    for pattern, tool, names in _PATTERNS:
        m = pattern.search(instruction)
        if m:
            return tool, {name: int(v) for name, v in zip(names, m.groups())}
    raise OracleParseError("no recognised counting question in the instruction")


def solve(task: Task, call: CallFn) -> str:
    tool, args = parse(task.instruction)
    out = call(tool, args)
    return str(out["result"])


SOLVERS = {("CountingEnv", False): solve}
