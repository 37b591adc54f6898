"""DecodingEnv: map each When2Tool phrasing to one encode/decode call."""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

# (pattern, tool, encoding_type); named groups: text, and key where the cipher needs one.
_TEMPLATES = (
    (re.compile(r"Decode this Morse code: '(?P<text>[^']*)'\."), "decode", "morse"),
    (re.compile(r"Encode '(?P<text>[^']*)' in Morse code\."), "encode", "morse"),
    (re.compile(r"Apply Caesar cipher with shift (?P<key>-?\d+) to '(?P<text>[^']*)'\."), "encode", "caesar"),
    (re.compile(r"Encode '(?P<text>[^']*)' using Caesar cipher with shift (?P<key>-?\d+)\."), "encode", "caesar"),
    (re.compile(r"Decode '(?P<text>[^']*)' using Caesar cipher with shift (?P<key>-?\d+)\."), "decode", "caesar"),
    (re.compile(r"Encode '(?P<text>[^']*)' using the custom cipher called '(?P<key>\w+)'"), "encode", "custom"),
    (re.compile(r"Decode '(?P<text>[^']*)' using the custom cipher called '(?P<key>\w+)'"), "decode", "custom"),
)


def parse(instruction: str) -> tuple[str, dict]:
    """The tool and its arguments for one instruction."""
    for pattern, tool, encoding in _TEMPLATES:
        m = pattern.search(instruction)
        if m:
            args = {"encoded_message" if tool == "decode" else "message": m["text"], "encoding_type": encoding}
            if "key" in pattern.groupindex:
                args["key"] = m["key"]  # the schema types key as a string
            return tool, args
    raise OracleParseError("instruction matches no Morse/Caesar/custom-cipher template")


def solve(task: Task, call: CallFn) -> str:
    tool, args = parse(task.instruction)
    out = call(tool, args)
    return out["decoded" if tool == "decode" else "encoded"]


SOLVERS = {("DecodingEnv", False): solve}
