"""HashEnv: "What is the <ALGO> hash of '<text>'?" -> one compute_hash call, the hex digest."""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

# Greedy up to the last "'?" so a quote inside the hashed text cannot cut it short.
_HASH = re.compile(r"What is the (\S+) hash of (?:the empty string )?'(.*)'\?")


def solve(task: Task, call: CallFn) -> str:
    m = _HASH.search(task.instruction)
    if not m:
        raise OracleParseError("no \"What is the <ALGO> hash of '<text>'?\" in the instruction")
    algorithm, text = m.groups()
    out = call("compute_hash", {"input_string": text, "algorithm": algorithm.lower()})
    return out["hash"]


SOLVERS = {("HashEnv", False): solve}
