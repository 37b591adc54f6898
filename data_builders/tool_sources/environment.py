"""A task's own tool sources as the environment the agent loop talks to.

The agent loop asks an environment for two things: the tools to show the model (``tool_specs()``, OpenAI function
schemas) and the payload of a call (``call(name, arguments)``, a JSON object the model reads back). When2Tool's
environments answer with ``{"success": ..., ...}`` payloads; :class:`SourceEnvironment` gives a team's own
sources the same shape — ``{"success": true, "result": <the tool's text>}``, or ``{"success": false, "message":
<reason>, "error_kind": <timeout | crash | tool_error | ...>}`` — so trajectories, metrics and gates treat both
alike and a failed call is recorded with its reason rather than ending the run.

Sources are opened once per process and shared by the episodes that name the same spec (:func:`shared_source`):
an MCP server or a function worker takes a second to start, an episode a fraction of that; they are closed at
exit. A source with state across calls therefore keeps it across episodes, as it would serving an agent.
"""
from __future__ import annotations

import atexit
import json
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import source_from_spec
from .base import ToolSource

_lock = threading.Lock()
_open: dict[tuple[str, str], ToolSource] = {}


def _key(spec: Mapping[str, Any], base_dir: str | None) -> tuple[str, str]:
    return json.dumps(spec, sort_keys=True, default=str), str(base_dir or "")


def shared_source(spec: Mapping[str, Any], base_dir: str | None = None) -> ToolSource:
    """The process's open source for ``spec`` (opened on first use)."""
    key = _key(spec, base_dir)
    with _lock:
        source = _open.get(key)
        if source is None:
            source = _open[key] = source_from_spec(dict(spec), base_dir=base_dir)
        return source


@atexit.register
def close_shared_sources() -> None:
    """Close every shared source (MCP server processes, function workers)."""
    with _lock:
        sources = list(_open.values())
        _open.clear()
    for source in sources:
        try:
            source.close()
        except Exception:       # closing at exit must not hide the run's own outcome
            pass


def source_label(spec: Mapping[str, Any]) -> str:
    """A short name for a source in reports: its ``name`` field, else its kind."""
    return str(spec.get("name") or spec.get("kind"))


class SourceEnvironment:
    """The tools of one or more sources for one episode (the sources themselves are shared, see the module)."""

    def __init__(self, name: str, sources: Sequence[Mapping[str, Any]], tools: Sequence[str] = (),
                 base_dir: str | None = None):
        self.name = name
        self._route: dict[str, ToolSource] = {}
        self._schemas: dict[str, dict] = {}
        for spec in sources:
            source = shared_source(spec, base_dir)
            for schema in source.tools():
                tool = schema["function"]["name"]
                if tool in self._route:
                    raise ValueError(f"tool {tool!r} is offered by two sources of {name!r} "
                                     f"({source_label(spec)} and another); rename one")
                self._route[tool], self._schemas[tool] = source, schema
        unknown = [t for t in tools if t not in self._schemas]
        if unknown:
            raise ValueError(f"{name}: tools {unknown} are not offered by its sources; offered: "
                             f"{sorted(self._schemas)}")
        self.tools = tuple(tools) if tools else tuple(sorted(self._schemas))
        self.call_counts: dict[str, int] = {t: 0 for t in self.tools}

    def tool_specs(self) -> list[dict]:
        return [self._schemas[t] for t in sorted(self.tools)]

    def call(self, name: Any, arguments: Any) -> dict:
        """The call's payload; never raises (the source turns every failure into a result)."""
        if not isinstance(name, str) or name not in self.tools:
            return {"success": False, "message": f"Tool {name} not available in this task."}
        if not isinstance(arguments, dict):
            return {"success": False, "message": f"Arguments of {name} must be a JSON object.",
                    "error_kind": "bad_arguments"}
        self.call_counts[name] += 1
        result = self._route[name].call(name, arguments)
        if result.ok:
            return {"success": True, "result": result.content}
        return {"success": False, "message": result.content or result.error or result.error_kind,
                "error_kind": result.error_kind}


def environment_for(spec: Any) -> SourceEnvironment:
    """A :class:`SourceEnvironment` for an ``EnvSpec`` whose ``sources`` are set."""
    base_dir = getattr(spec, "base_dir", None)
    return SourceEnvironment(spec.name, spec.sources, spec.tools,
                             str(Path(base_dir)) if base_dir else None)
