"""A tool source defined outside toolwise, for the test that a spec can name one by dotted path."""
from __future__ import annotations

import json
import time

from data_builders.tool_sources import CallLimits, ToolResult, ToolSource
from data_builders.tool_sources.base import clip, failure, function_schema


class EchoSource(ToolSource):
    kind = "echo"

    def __init__(self, prefix: str = "", *, limits: CallLimits | None = None):
        self.prefix = prefix
        self.limits = limits or CallLimits()
        self.closed = False

    def tools(self) -> list[dict]:
        return [function_schema("echo", "Repeat the text.",
                                {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})]

    def call(self, name: str, arguments: dict) -> ToolResult:
        started = time.monotonic()
        if name != "echo":
            return failure("unknown_tool", f"unknown tool {name!r}", started=started)
        if not isinstance(arguments, dict) or not isinstance(arguments.get("text"), str):
            return failure("bad_arguments", f"echo needs a text, got {json.dumps(arguments, default=str)}",
                           started=started)
        return clip(self.prefix + arguments["text"], self.limits, started=started)

    def close(self) -> None:
        self.closed = True
