"""PrimeEnv: "Is N prime" -> is_prime (``True``/``False``), "the Nth prime" -> nth_prime,
"prime factorization of N" -> factorize, written ``p^e * q`` (exponent 1 omitted, the gold format)."""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_IS_PRIME = re.compile(r"Is (\d+) (?:a )?prime")
_NTH = re.compile(r"What is the (\d+)(?:st|nd|rd|th) prime number")
_FACTOR = re.compile(r"prime factorization of (\d+)")


def format_factorization(pairs: list) -> str:
    return " * ".join(str(p) if e == 1 else f"{p}^{e}" for p, e in pairs)


def _call(call: CallFn, tool: str, n: int):
    out = call(tool, {"n": n})
    return out["result"]


def solve(task: Task, call: CallFn) -> str:
    text = task.instruction
    if (m := _FACTOR.search(text)) is not None:
        return format_factorization(_call(call, "factorize", int(m.group(1))))
    if (m := _NTH.search(text)) is not None:
        return str(_call(call, "nth_prime", int(m.group(1))))
    if (m := _IS_PRIME.search(text)) is not None:
        return str(bool(_call(call, "is_prime", int(m.group(1)))))
    raise OracleParseError("no recognised prime question in the instruction")


SOLVERS = {("PrimeEnv", False): solve}
