"""Tool results replayed from recorded conversations: the team's real tools, without running them.

Spec::

    {"kind": "trace", "path": "trace.jsonl"}          # or a list of files

Each line of a file is one OpenAI chat conversation: a list of messages, or ``{"messages": [...], "tools":
[...]}``. Every assistant ``tool_calls`` entry answered by a ``tool`` message (matched by ``tool_call_id``) becomes
a recorded result, keyed by the tool name and the *canonical* arguments: the arguments string parsed, then
``json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, so that the order of keys in the
model's JSON does not matter (values must match exactly: ``2`` and ``2.0`` are different calls). A call that was
never answered in the recording (a conversation cut short) records nothing.

Replay: a call whose key was recorded gets the recorded text (``ok=True``: an OpenAI tool message carries no
success flag, so a recorded error message is replayed as the tool's output, as the model saw it). A call the
recording lacks is ``error_kind="trace_miss"`` and counted in ``misses`` (by tool name): the coverage of the
recording is something to measure, not a crash. A name the recording does not know at all is ``unknown_tool``, as
in every other source. The same key recorded with different results keeps the first, and is counted in
``conflicts`` (a tool that is not a function of its arguments: time, randomness, state).

``tools()``: the ``tools`` recorded in the file(s) when there are any (the first schema of each name), plus, for
any tool that was called but not declared, a minimal schema inferred from the calls (the name and an empty object
of parameters; ``inferred_tools`` lists those names). A recording without ``tools`` is therefore replayable, but
the model sees bare names, which is rarely what a gate should be trained on.

A malformed file raises ValueError naming the file, the line and the field, when the source is built.
"""
from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

from .base import CallLimits, ToolResult, ToolSource, clip, failure, function_schema, object_arguments


def canonical_arguments(arguments: Any) -> str:
    """The replay key's argument part. Raises TypeError/ValueError for values JSON cannot hold."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class TraceSource(ToolSource):
    kind = "trace"

    def __init__(self, path: str | list[str], *, base_dir: str | Path | None = None,
                 limits: CallLimits | None = None):
        paths = [path] if isinstance(path, str) else path
        if not (isinstance(paths, list) and paths and all(isinstance(p, str) and p for p in paths)):
            raise ValueError(f"trace source: field 'path' must be a file or a list of files, got {path!r}")
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        self._limits = limits or CallLimits()
        self._results: dict[tuple[str, str], str] = {}
        self._declared: dict[str, dict] = {}
        self._called: dict[str, None] = {}          # names in order of first call
        self.misses: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()
        for p in paths:
            file = base / p
            if not file.is_file():
                raise ValueError(f"trace source: field 'path' names no file: {file}")
            self._read(file)
        self.inferred_tools = [n for n in self._called if n not in self._declared]

    # -- the interface ------------------------------------------------------------------------------------------

    def tools(self) -> list[dict]:
        declared = [copy.deepcopy(s) for s in self._declared.values()]
        return declared + [function_schema(n, "", None) for n in self.inferred_tools]

    def _call(self, name: str, arguments: Any, started: float) -> ToolResult:
        if not isinstance(name, str) or (name not in self._declared and name not in self._called):
            return failure("unknown_tool", f"unknown tool {name!r}", started=started)
        arguments = object_arguments(arguments, started)
        if isinstance(arguments, ToolResult):
            return arguments
        try:
            key = canonical_arguments(arguments)
        except (TypeError, ValueError) as exc:
            return failure("bad_arguments", f"arguments are not JSON: {exc}", started=started)
        recorded = self._results.get((name, key))
        if recorded is None:
            self.misses[name] += 1
            return failure("trace_miss", f"the trace has no result for {name}({key[:300]})", started=started)
        self.hits[name] += 1
        return clip(recorded, self._limits, started=started)

    # -- reading ------------------------------------------------------------------------------------------------

    def _read(self, file: Path) -> None:
        with open(file, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue

                def bad(field: str, problem: str) -> ValueError:
                    return ValueError(f"{file}, line {lineno}, field '{field}': {problem}")

                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{file}, line {lineno}: not JSON: {exc}") from None
                if isinstance(record, list):
                    messages, tools = record, None     # fields are named as in the object form: messages[i]
                elif isinstance(record, dict) and "messages" in record:
                    messages, tools = record["messages"], record.get("tools")
                    if not isinstance(messages, list):
                        raise bad("messages", "must be a list of messages")
                else:
                    raise bad("messages", "a line must be a list of messages or an object with 'messages'")
                if tools is not None:
                    self._read_tools(tools, bad)
                self._read_messages(messages, bad)

    def _read_tools(self, tools: Any, bad) -> None:
        if not isinstance(tools, list):
            raise bad("tools", "must be a list of tool schemas")
        for k, tool in enumerate(tools):
            # The flat form {"name", "description", "parameters"} is accepted too and wrapped.
            fn = tool.get("function", tool) if isinstance(tool, dict) else None
            if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]):
                raise bad(f"tools[{k}].function.name", "a tool schema needs a name")
            if fn["name"] not in self._declared:
                self._declared[fn["name"]] = {"type": "function", "function": copy.deepcopy(fn)}

    def _read_messages(self, messages: list, bad) -> None:
        pending: dict[str, tuple[str, str]] = {}     # tool_call_id -> (name, canonical arguments)
        for i, msg in enumerate(messages):
            at = f"messages[{i}]"
            if not (isinstance(msg, dict) and isinstance(msg.get("role"), str)):
                raise bad(f"{at}.role", "a message must be an object with a role")
            if msg["role"] == "assistant" and msg.get("tool_calls"):
                calls = msg["tool_calls"]
                if not isinstance(calls, list):
                    raise bad(f"{at}.tool_calls", "must be a list")
                for j, tc in enumerate(calls):
                    self._read_call(tc, f"{at}.tool_calls[{j}]", pending, bad)
            elif msg["role"] == "tool":
                call_id = msg.get("tool_call_id")
                if not isinstance(call_id, str):
                    raise bad(f"{at}.tool_call_id", "a tool message needs the id of the call it answers")
                if call_id not in pending:
                    raise bad(f"{at}.tool_call_id", f"{call_id!r} answers no earlier tool call")
                self._record(*pending.pop(call_id), _text(msg.get("content"), f"{at}.content", bad))

    def _read_call(self, tc: Any, at: str, pending: dict, bad) -> None:
        if not isinstance(tc, dict):
            raise bad(at, "a tool call must be an object")
        call_id, fn = tc.get("id"), tc.get("function")
        if not isinstance(call_id, str):
            raise bad(f"{at}.id", "a tool call needs an id (the tool message names it)")
        if call_id in pending:
            raise bad(f"{at}.id", f"{call_id!r} is used twice")
        if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]):
            raise bad(f"{at}.function.name", "a tool call needs a function name")
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise bad(f"{at}.function.arguments", f"not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise bad(f"{at}.function.arguments", "must be a JSON object")
        self._called.setdefault(fn["name"], None)
        pending[call_id] = (fn["name"], canonical_arguments(args))

    def _record(self, name: str, key: str, content: str) -> None:
        first = self._results.setdefault((name, key), content)
        if first != content:
            self.conflicts[name] += 1


def _text(content: Any, at: str, bad) -> str:
    """A tool message's content as text: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise bad(f"{at}[{k}]", "a content part must be text")
        return "".join(parts)
    raise bad(at, "must be a string or a list of text parts")


def record_trace(path: str | Path, trajectories: Any, tools: list[dict] | None = None) -> int:
    """Write the executed, successful calls of agent trajectories as a trace this source replays: one
    conversation per trajectory (its instruction, then each call as an assistant ``tool_calls`` message answered
    by a ``tool`` message holding the result text the model read). ``tools``: the schemas to declare (e.g. an
    environment's ``tool_specs()``), so a replay shows the model the same tools. Failed calls are left out: an
    OpenAI tool message has no success flag, so a replayed failure would read as a success. Returns the number
    of calls written."""
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        for tr in trajectories:
            messages: list[dict] = [m for m in tr.messages if m.get("role") == "user"][:1]
            for i, call in enumerate(tr.calls):
                if call.status != "executed" or not call.ok or not isinstance((call.result or {}).get("result"),
                                                                            str):
                    continue
                call_id = f"call_{written}_{i}"
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": call.name, "arguments": json.dumps(call.args, ensure_ascii=False)}}]})
                messages.append({"role": "tool", "tool_call_id": call_id, "content": call.result["result"]})
                written += 1
            f.write(json.dumps({"messages": messages, **({"tools": tools} if tools else {})},
                               ensure_ascii=False) + "\n")
    return written
