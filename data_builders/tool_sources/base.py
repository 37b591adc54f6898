"""The one interface every tool source implements: a list of tool schemas and a call that never raises.

A team brings its own tools in whatever form it has them (an MCP server, a module of Python functions, a file of
recorded conversations). The agent loop only ever sees :class:`ToolSource`: OpenAI function-tool schemas from
:meth:`ToolSource.tools` and a :class:`ToolResult` from :meth:`ToolSource.call`. The arguments of a call come from
model output and are untrusted, so a failure of any kind (a bad argument, a crashed server, a hung function) is a
``ToolResult`` with ``ok=False`` and an ``error_kind`` the loop and the metrics can count, never an exception that
would end an episode.

The helpers here (:func:`clip`, :func:`failure`) are what the built-in sources use to apply :class:`CallLimits`
the same way; a plugin source may use them too.
"""
from __future__ import annotations

import abc
import contextlib
import time
from dataclasses import dataclass
from typing import Any, ClassVar

# The error kinds a ToolResult may carry. A closed set so that metrics can count them by name.
ERROR_KINDS = ("timeout", "crash", "tool_error", "output_limit", "unknown_tool", "bad_arguments", "trace_miss")


@dataclass(frozen=True)
class ToolResult:
    content: str                   # the text the model reads as the tool message
    ok: bool
    error_kind: str | None = None  # None or one of ERROR_KINDS
    error: str | None = None       # human-readable reason
    wall_s: float = 0.0


@dataclass(frozen=True)
class CallLimits:
    timeout_s: float = 30.0
    max_output_chars: int = 20_000


def truncation_marker(shown: int, total: int) -> str:
    """Appended to cut output, so that the model (and a reader of the trajectory) sees that text is missing."""
    return f"\n[output truncated: {shown} of {total} characters shown]"


def clip(content: str, limits: CallLimits, *, started: float, total_chars: int | None = None,
         ok: bool = True, error_kind: str | None = None, error: str | None = None) -> ToolResult:
    """A ToolResult for ``content`` under ``limits.max_output_chars``, timed from ``started`` (time.monotonic()).

    Output over the cap is cut and marked; a result that was otherwise fine becomes ``ok=False`` with
    ``error_kind="output_limit"`` so that a flood is counted rather than silently fed to the model. A result that
    already failed keeps its own error kind (the cause matters more than the length). ``total_chars`` is the
    length before any cut made upstream (a worker process that sent back only the head of a huge output).
    """
    total = len(content) if total_chars is None else max(total_chars, len(content))
    cap = limits.max_output_chars
    if total > cap:
        content = content[:cap] + truncation_marker(min(cap, len(content)), total)
        if ok:
            ok, error_kind = False, "output_limit"
            error = f"output of {total} characters exceeds max_output_chars={cap}"
    return ToolResult(content=content, ok=ok, error_kind=error_kind, error=error,
                      wall_s=time.monotonic() - started)


def failure(error_kind: str, error: str, *, started: float, content: str | None = None) -> ToolResult:
    """A failed ToolResult. The model reads ``content``: by default the reason itself, prefixed so that it cannot
    be mistaken for the tool's own output."""
    return ToolResult(content=f"Error ({error_kind}): {error}" if content is None else content, ok=False,
                      error_kind=error_kind, error=error, wall_s=time.monotonic() - started)


def object_arguments(arguments: Any, started: float) -> dict | ToolResult:
    """A call's arguments as a dict (None: no arguments), or the ``bad_arguments`` result for anything else."""
    if arguments is None:
        return {}
    if not isinstance(arguments, dict):
        return failure("bad_arguments", f"arguments must be a JSON object, got {type(arguments).__name__}",
                       started=started)
    return arguments


def function_schema(name: str, description: str, parameters: dict[str, Any] | None) -> dict:
    """An OpenAI function-tool schema; empty parameters become an empty object (the API rejects a missing one)."""
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": parameters or {"type": "object", "properties": {}}}}


class ToolSource(abc.ABC):
    """Tools of one origin behind one interface. Subclasses set ``kind`` (the spec's ``"kind"``) and implement
    :meth:`tools` and :meth:`_call` (or :meth:`call` whole); :meth:`close` releases processes, threads and
    connections (idempotent)."""

    kind: ClassVar[str]

    @abc.abstractmethod
    def tools(self) -> list[dict]:
        """OpenAI function-tool schemas: ``{"type": "function", "function": {"name", "description",
        "parameters"}}``."""

    #: serialises calls where a source holds one process or connection (a source sets its own lock)
    _lock: Any = contextlib.nullcontext()

    def call(self, name: str, arguments: dict) -> ToolResult:
        """Run one tool call. Never raises: every failure is a ToolResult with ``ok=False``.

        Sources implement :meth:`_call`, one call at a time under ``_lock``; an exception it lets out becomes a
        ``crash`` result here (after :meth:`_after_crash`), so the contract holds in one place. A source may
        instead override this method whole (it must keep the contract)."""
        started = time.monotonic()
        try:
            with self._lock:
                return self._call(name, arguments, started)
        except Exception as exc:  # the contract: call() never raises
            try:
                self._after_crash()
            except Exception:
                pass
            return failure("crash", f"{self.kind} source failed: {self._describe(exc)}", started=started)

    def _call(self, name: str, arguments: Any, started: float) -> ToolResult:
        raise NotImplementedError(f"{type(self).__name__} implements neither call() nor _call()")

    def _after_crash(self) -> None:
        """Called when :meth:`_call` raised: drop state that is now unknown (a worker, a connection)."""

    def _describe(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Release what the source holds. The default holds nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
