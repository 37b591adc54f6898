"""RegexMatchEnv: one regex_match call with the pattern and text quoted in the instruction.

The pattern is the raw literal ``r'...'`` and the text the double-quoted string, both taken
verbatim (texts may contain quotes, tabs and newlines, so the text runs to the *last* closing
phrase). The answer is ``str()`` of the findall list (tuples for multi-group patterns) or the
matched string for search/match (the gold formats).
"""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_FINDALL_EASY = re.compile(r"What does the regex pattern r'(.*?)' find in the text \"(.*)\" using findall\?", re.S)
_SEARCH = re.compile(r"What does the regex pattern r'(.*?)' match \((search|match)\) in \"(.*)\"\?", re.S)
_FINDALL = re.compile(r"What does re\.findall\(r'(.*?)', \"(.*)\"\) return\?", re.S)


def parse(instruction: str) -> tuple[str, str, str]:
    """(pattern, text, operation) of a When2Tool regex question."""
    if m := _FINDALL_EASY.match(instruction):
        return m.group(1), m.group(2), "findall"
    if m := _SEARCH.match(instruction):
        return m.group(1), m.group(3), m.group(2)
    if m := _FINDALL.match(instruction):
        return m.group(1), m.group(2), "findall"
    raise OracleParseError("not a When2Tool regex question")


def solve(task: Task, call: CallFn) -> str:
    pattern, text, operation = parse(task.instruction)
    out = call("regex_match", {"pattern": pattern, "text": text, "operation": operation})
    if operation != "findall" and out["result"] is None:
        raise OracleParseError("the pattern does not match")
    return str(out["result"])


SOLVERS = {("RegexMatchEnv", False): solve}
