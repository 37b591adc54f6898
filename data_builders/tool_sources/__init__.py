"""Tool sources: a team's own tools behind one interface (:class:`ToolSource`), built from a spec in a task file.

Built in: ``"mcp"`` (an MCP server over stdio or streamable HTTP), ``"functions"`` (Python functions, run in a
worker process), ``"trace"`` (results replayed from recorded conversations) and ``"bfcl"`` (the Berkeley Function
Calling Leaderboard's function docs: calls are recorded, never run). A source defined outside toolwise
needs no change here: name its class by dotted path in the spec, ``{"kind": "package.module:ClassName", ...}``,
and it is imported when the spec is read; or register it under a short name with ``@register_source("name")``
in a module that is imported before the spec is read.

:func:`source_from_spec` is the only place a spec is interpreted: the rest of the spec goes to the class's
constructor as keyword arguments, relative paths resolve against ``base_dir`` (the task file's folder, so that a
task file and its tools can move together), and a bad spec raises ValueError naming the field, before any episode
runs.
"""
from __future__ import annotations

import dataclasses
import inspect
from importlib import import_module
from pathlib import Path
from typing import Any, Callable, Mapping

from .base import CallLimits, ToolResult, ToolSource
from .bfcl import BFCLSource
from .functions import FunctionSource
from .mcp import MCPSource
from .trace import TraceSource

__all__ = ["SOURCES", "BFCLSource", "CallLimits", "FunctionSource", "MCPSource", "ToolResult", "ToolSource", "TraceSource",
           "register_source", "source_from_spec"]

SOURCES: dict[str, type[ToolSource]] = {}


def register_source(kind: str) -> Callable[[type[ToolSource]], type[ToolSource]]:
    """Class decorator: make ``cls`` the source of ``{"kind": kind}`` (and set ``cls.kind``)."""
    if not (isinstance(kind, str) and kind and ":" not in kind):
        raise ValueError(f"a source kind is a non-empty name without ':', got {kind!r}")

    def decorate(cls: type[ToolSource]) -> type[ToolSource]:
        if not (isinstance(cls, type) and issubclass(cls, ToolSource)):
            raise TypeError(f"register_source({kind!r}) decorates ToolSource subclasses, got {cls!r}")
        if SOURCES.get(kind, cls) is not cls:
            raise ValueError(f"source kind {kind!r} is already registered to {SOURCES[kind].__qualname__}")
        cls.kind = kind
        SOURCES[kind] = cls
        return cls

    return decorate


for _cls in (MCPSource, FunctionSource, TraceSource, BFCLSource):
    register_source(_cls.kind)(_cls)


def source_from_spec(spec: dict, *, base_dir: str | Path | None = None,
                     limits: CallLimits | None = None) -> ToolSource:
    """Build the source a spec describes. ``spec["limits"]`` (optional, ``{"timeout_s": ..., "max_output_chars":
    ...}``) overrides fields of ``limits`` for this source only: one slow server need not slow every tool."""
    if not isinstance(spec, Mapping):
        raise ValueError(f"a tool source spec must be a mapping, got {type(spec).__name__}")
    kwargs = dict(spec)
    kind = kwargs.pop("kind", None)
    kwargs.pop("name", None)      # a label (task files, reports), not the source's own setting
    cls = _resolve(kind)
    limits = _limits(kwargs.pop("limits", None), limits or CallLimits())
    params = dict(inspect.signature(cls).parameters)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [n for n, p in params.items()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    for name in kwargs:
        if name in _INJECTED or (name not in named and not takes_any):
            accepted = [n for n in named if n not in _INJECTED]
            raise ValueError(f"{kind} source spec: unknown field {name!r} (accepted: {', '.join(accepted) or 'none'})")
    # base_dir and limits go to the constructors that take them: a plugin without files or limits need not.
    injected = {"base_dir": Path(base_dir).resolve() if base_dir is not None else Path.cwd(), "limits": limits}
    kwargs.update({n: v for n, v in injected.items() if n in named or takes_any})
    for name in named:
        if params[name].default is inspect.Parameter.empty and name not in kwargs:
            raise ValueError(f"{kind} source spec: field {name!r} is required")
    return cls(**kwargs)


# Constructor arguments that come from the caller, never from the spec.
_INJECTED = ("base_dir", "limits")


def _resolve(kind: Any) -> type[ToolSource]:
    if kind is None:
        raise ValueError("tool source spec: field 'kind' is required (one of "
                         f"{', '.join(sorted(SOURCES))}, or 'package.module:ClassName')")
    if not isinstance(kind, str):
        raise ValueError(f"tool source spec: field 'kind' must be a string, got {kind!r}")
    if kind in SOURCES:
        return SOURCES[kind]
    mod_name, sep, attr = kind.partition(":")
    if not (sep and mod_name and attr):
        raise ValueError(f"tool source spec: field 'kind': unknown kind {kind!r} (registered: "
                         f"{', '.join(sorted(SOURCES))}; a source outside toolwise is 'package.module:ClassName')")
    try:
        obj: Any = import_module(mod_name)
    except Exception as exc:
        raise ValueError(f"tool source spec: field 'kind': cannot import {mod_name!r}: "
                         f"{type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, ToolSource)):
        raise ValueError(f"tool source spec: field 'kind': {kind!r} is not a ToolSource subclass")
    if inspect.isabstract(obj):
        raise ValueError(f"tool source spec: field 'kind': {kind!r} is abstract (it does not implement "
                         f"{', '.join(sorted(obj.__abstractmethods__))})")
    return obj


def _limits(override: Any, limits: CallLimits) -> CallLimits:
    if override is None:
        return limits
    if not isinstance(override, Mapping):
        raise ValueError(f"tool source spec: field 'limits' must be a mapping, got {override!r}")
    fields = {f.name: f.type for f in dataclasses.fields(CallLimits)}
    for name, value in override.items():
        if name not in fields:
            raise ValueError(f"tool source spec: unknown field 'limits.{name}' (accepted: {', '.join(fields)})")
        wanted = int if name == "max_output_chars" else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted) or value <= 0:
            raise ValueError(f"tool source spec: field 'limits.{name}' must be a positive number, got {value!r}")
    return dataclasses.replace(limits, **override)
