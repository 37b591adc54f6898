"""Tools served by an MCP server, over stdio (a process this source starts) or streamable HTTP (a URL).

Spec::

    {"kind": "mcp", "command": ["python", "server.py"], "env": {...}, "cwd": "..."}     # stdio
    {"kind": "mcp", "url": "http://127.0.0.1:8000/mcp", "headers": {...}}              # streamable HTTP

Everything MCP goes through the official SDK's ``mcp.Client`` (the handshake or discovery, paging, result
validation, the stdio process's shutdown sequence); this module adds what an agent loop needs around it:

- The agent loop is synchronous and the SDK is async. The source owns an anyio *blocking portal*, an event loop on
  a background thread, and runs every coroutine there. A portal rather than a bare ``asyncio`` loop thread because
  an MCP connection lives in anyio task groups and cancel scopes that must be entered and exited by the same task:
  ``BlockingPortal.start_task`` gives a connection one long-lived task for its whole life, and cancelling a portal
  future cancels the coroutine behind it.
- One connection at a time, held open by that task (``_hold``) until told to stop. A server that crashed
  (connection closed, process gone) or a call that timed out retires the connection: its task is told to stop and
  winds down in the background (the SDK closes stdin, then terminates the stdio server's process group), so the
  failing call returns at once, and the next call opens a fresh connection, which for stdio starts a fresh server.
  A call that timed out may still be running on the server; only a new connection is certain not to answer late.
- Per call: ``CallLimits.timeout_s`` bounds the call (the SDK's read timeout, with a backstop above it), and the
  output cap applies to the text the model will read. Connecting has its own bound (``connect_timeout_s``): a
  Python server's start-up (imports, handshake) should not eat the first call's budget.
- Arguments are checked against the tool's ``inputSchema`` before they are sent (``validate_arguments``, on by
  default), so a call that breaks the schema the model was shown is ``bad_arguments`` whatever a lenient server
  would have made of it (a pydantic server coerces ``"5"`` to ``5.0``), and an unknown name is ``unknown_tool``.
  With the check off, such calls reach the server and its refusal is a ``tool_error``.

The tool schemas come from ``tools/list``: ``inputSchema`` becomes the OpenAI ``parameters`` unchanged.

A stdio server runs in ``cwd`` (relative to the spec's folder, which is also the default), so a relative script
path in ``command`` means what it means in the task file. A ``command`` starting with ``python``/``python3`` runs
this interpreter (``sys.executable``): a bare ``python`` on PATH may be another one, without the packages this run
has. The SDK hands the server only a safe subset of the environment (HOME, PATH, USER, ...); what else it needs
(an API key, PYTHONPATH) goes in ``env``.
"""
from __future__ import annotations

import concurrent.futures
import copy
import json
import math
import os
import shlex
import sys
import threading
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .base import CallLimits, ToolResult, ToolSource, clip, failure, function_schema, object_arguments

# Slack above the per-call timeout before the caller gives up on the event loop itself (the SDK's own read timeout
# fires first; this only matters if the loop thread were stuck).
_BACKSTOP_S = 5.0
# How long close() waits for connections to wind down (the SDK's stdio shutdown is bounded at about 6 s).
_CLOSE_WAIT_S = 10.0
# A paginating server that never ends its listing cannot hang the connection.
_MAX_LIST_PAGES = 100
# Interpreter names that mean "the Python running this source": a bare ``python`` on PATH may be another
# interpreter, without the packages (the MCP SDK, the team's code) this run has.
_PYTHON_NAMES = {"python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"}


@dataclass
class _Connection:
    client: Any                      # mcp.Client, entered
    stop: Any                        # anyio.Event that ends the holding task
    done: concurrent.futures.Future  # the holding task; completes once the connection is closed
    schemas: dict[str, dict] = field(default_factory=dict)  # tool name -> inputSchema
    validators: dict[str, Any] = field(default_factory=dict)


class MCPSource(ToolSource):
    kind = "mcp"

    def __init__(self, command: list[str] | str | None = None, url: str | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None,
                 headers: dict[str, str] | None = None, *, connect_timeout_s: float = 60.0,
                 validate_arguments: bool = True, base_dir: str | Path | None = None, limits: CallLimits | None = None):
        if (command is None) == (url is None):
            raise ValueError("mcp source: exactly one of the fields 'command' (stdio) or 'url' (streamable HTTP) "
                             "is required")
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        self._limits = limits or CallLimits()
        if isinstance(connect_timeout_s, bool) or not (isinstance(connect_timeout_s, (int, float))
                                                      and connect_timeout_s > 0):
            raise ValueError(f"mcp source: field 'connect_timeout_s' must be a positive number, "
                             f"got {connect_timeout_s!r}")
        self._connect_timeout_s = float(connect_timeout_s)
        if not isinstance(validate_arguments, bool):
            raise ValueError(f"mcp source: field 'validate_arguments' must be true or false, "
                             f"got {validate_arguments!r}")
        self._validate = validate_arguments
        self._command: list[str] | None = None
        self._url: str | None = None
        if command is not None:
            try:
                argv = shlex.split(command) if isinstance(command, str) else command
            except ValueError as exc:
                raise ValueError(f"mcp source: field 'command' does not parse as a command line: {exc}") from None
            if not (isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv)):
                raise ValueError(f"mcp source: field 'command' must be a non-empty list of strings, got {command!r}")
            if headers is not None:
                raise ValueError("mcp source: field 'headers' applies to 'url' servers only")
            self._command = [sys.executable if argv[0] in _PYTHON_NAMES else argv[0], *argv[1:]]
            # The server runs in cwd, by default the spec's folder, so that a relative script path in the command
            # means the same as it does in the task file.
            if cwd is not None and not isinstance(cwd, str):
                raise ValueError(f"mcp source: field 'cwd' must be a folder, got {cwd!r}")
            self._cwd = str(base / cwd) if cwd is not None else str(base)
            if not os.path.isdir(self._cwd):
                raise ValueError(f"mcp source: field 'cwd' is not a directory: {self._cwd}")
            self._env = _str_map(env, "env")
            self._target = shlex.join(argv)
        else:
            if env is not None or cwd is not None:
                raise ValueError("mcp source: fields 'env' and 'cwd' apply to 'command' servers only")
            if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
                raise ValueError(f"mcp source: field 'url' must be an http(s) URL, got {url!r}")
            self._url = url
            self._headers = _str_map(headers, "headers")
            self._target = url
        self._lock = threading.RLock()   # one call at a time; close() waits for the call in flight
        self._portal_cm = None
        self._portal = None
        self._conn: _Connection | None = None
        self._retired: list[_Connection] = []
        self._tools: list[dict] | None = None
        self._closed = False
        self.connects = 0                # how many connections were opened (1 + reconnects)

    # -- the interface ------------------------------------------------------------------------------------------

    def tools(self) -> list[dict]:
        """The server's tools as OpenAI function schemas. Connects if needed; a server that cannot be reached
        raises RuntimeError here (a misconfigured source should fail before the first episode, not during it)."""
        with self._lock:
            if self._tools is None:
                try:
                    self._connection()
                except Exception as exc:
                    raise RuntimeError(f"MCP server {self._target}: {_describe(exc)}") from exc
            return copy.deepcopy(self._tools)

    def _describe(self, exc: BaseException) -> str:
        return _describe(exc)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._conn is not None:
                self._retire(self._conn)
            if self._portal is None:
                return
            deadline = time.monotonic() + _CLOSE_WAIT_S
            for conn in self._retired:
                try:
                    conn.done.result(max(0.0, deadline - time.monotonic()))
                except Exception:
                    pass  # a connection that failed to wind down cleanly is still gone after the portal stops
            try:
                self._portal.call(self._portal.stop, True)   # cancels whatever still runs
            except RuntimeError:
                pass  # the portal already stopped
            self._portal_cm.__exit__(None, None, None)       # joins the loop thread
            self._portal = self._portal_cm = None
            self._retired.clear()

    # -- calls --------------------------------------------------------------------------------------------------

    def _call(self, name: str, arguments: Any, started: float) -> ToolResult:
        if self._closed:
            return failure("crash", "the MCP source is closed", started=started)
        arguments = object_arguments(arguments, started)
        if isinstance(arguments, ToolResult):
            return arguments
        try:
            conn = self._connection()
        except Exception as exc:
            kind = "timeout" if isinstance(_leaf(exc), TimeoutError) else "crash"
            return failure(kind, f"cannot connect to MCP server {self._target}: {_describe(exc)}", started=started)
        if not isinstance(name, str) or name not in conn.schemas:
            return failure("unknown_tool", f"unknown tool {name!r}; this server has: {', '.join(conn.schemas)}",
                           started=started)
        problem = _argument_problem(conn, name, arguments) if self._validate else None
        if problem is not None:
            return failure("bad_arguments", f"{name}: {problem}", started=started)

        timeout = self._limits.timeout_s
        future = self._portal.start_task_soon(_call_tool, conn.client, name, arguments, timeout)
        try:
            result = future.result(timeout + _BACKSTOP_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._retire(conn)
            return failure("timeout", f"{name} did not answer within {timeout:g}s", started=started)
        except Exception as exc:
            return self._failed_call(conn, name, exc, timeout, started)
        text = _content_text(result)
        if result.is_error:
            return clip(text, self._limits, started=started, ok=False, error_kind="tool_error",
                        error=f"{name} returned an error: {text[:500]}")
        return clip(text, self._limits, started=started)

    def _failed_call(self, conn: _Connection, name: str, exc: BaseException, timeout: float,
                     started: float) -> ToolResult:
        """Sort an exception from a call into an error kind; retire the connection when it is no longer usable."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, REQUEST_TIMEOUT

        leaf = _leaf(exc)
        code = leaf.code if isinstance(leaf, MCPError) else None
        if isinstance(leaf, TimeoutError) or code == REQUEST_TIMEOUT:
            self._retire(conn)
            return failure("timeout", f"{name} did not answer within {timeout:g}s", started=started)
        if code == INVALID_PARAMS:
            return failure("bad_arguments", f"{name}: the server rejected the arguments: {leaf.message}",
                           started=started)
        if code is not None and code != CONNECTION_CLOSED:
            # A JSON-RPC error answer: the server is alive and said no.
            return failure("tool_error", f"{name}: MCP error {code}: {leaf.message}", started=started)
        if code is None and isinstance(leaf, (RuntimeError, ValueError)):
            # The SDK's checks of an answer (a result that breaks the tool's output schema or the protocol's
            # result shape): the server is alive, its answer is unusable.
            return failure("tool_error", f"{name}: unusable answer: {_describe(leaf)}", started=started)
        self._retire(conn)
        return failure("crash", f"{name}: the MCP server connection failed ({_describe(exc)}); "
                                f"the next call reconnects", started=started)

    # -- connections --------------------------------------------------------------------------------------------

    def _connection(self) -> _Connection:
        if self._closed:
            raise RuntimeError("the MCP source is closed")
        if self._conn is not None and not self._conn.done.done():
            return self._conn
        if self._conn is not None:           # the holding task ended on its own: the connection dropped
            self._retire(self._conn)
        if self._portal is None:
            from anyio.from_thread import start_blocking_portal

            self._portal_cm = start_blocking_portal(name=f"mcp-source {self._target}"[:60])
            self._portal = self._portal_cm.__enter__()
        done, (client, listed, stop) = self._portal.start_task(self._hold, name=f"mcp connection {self._target}")
        self.connects += 1
        conn = _Connection(client=client, stop=stop, done=done,
                           schemas={t.name: dict(t.input_schema or {}) for t in listed})
        self._tools = [function_schema(t.name, t.description or t.title or "", dict(t.input_schema or {}))
                       for t in listed]
        self._conn = conn
        return conn

    def _retire(self, conn: _Connection) -> None:
        """Tell a connection's task to stop, without waiting: the SDK's shutdown (for stdio: close stdin, wait,
        terminate the process group) runs in the background while the agent loop moves on."""
        if self._conn is conn:
            self._conn = None
        if conn not in self._retired:
            self._retired.append(conn)
        if self._portal is not None and not conn.done.done():
            try:
                self._portal.start_task_soon(_set, conn.stop)
            except RuntimeError:
                pass  # the portal is gone, and the connection with it
        # Forget connections that finished winding down.
        self._retired = [c for c in self._retired if not c.done.done()]

    async def _hold(self, *, task_status) -> None:
        """One connection's whole life in one task: connect, list the tools, report them, wait for stop, close.

        Connecting has its own deadline (``connect_timeout_s``), lifted once the connection is up so that it
        cannot cut the close short."""
        import anyio
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        stop = anyio.Event()
        started = False
        with anyio.CancelScope(deadline=anyio.current_time() + self._connect_timeout_s) as scope:
            async with AsyncExitStack() as stack:
                if self._command is not None:
                    params = StdioServerParameters(command=self._command[0], args=self._command[1:],
                                                   env=self._env, cwd=self._cwd)
                    client = Client(stdio_client(params, errlog=_errlog()))
                elif self._headers:
                    # Headers go through an httpx client of our own, as the SDK's streamable_http_client asks.
                    import httpx2

                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=self._headers, timeout=httpx2.Timeout(30.0, read=300.0)))
                    client = Client(streamable_http_client(self._url, http_client=http))
                else:
                    client = Client(self._url)
                await stack.enter_async_context(client)
                listed, cursor = [], None
                for _ in range(_MAX_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listed.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                scope.deadline = math.inf
                started = True
                task_status.started((client, listed, stop))
                await stop.wait()
        if not started:
            raise TimeoutError(f"no MCP connection within connect_timeout_s={self._connect_timeout_s:g}s")


# -- helpers ----------------------------------------------------------------------------------------------------

async def _call_tool(client: Any, name: str, arguments: dict, timeout: float) -> Any:
    import anyio

    # The SDK's read timeout answers first (and tells the server the request is cancelled); the scope is a
    # backstop for time spent outside the read.
    with anyio.fail_after(timeout + 1.0):
        return await client.call_tool(name, arguments, read_timeout_seconds=timeout)


def _set(event: Any) -> None:
    event.set()


def _str_map(value: Any, field_name: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
        raise ValueError(f"mcp source: field '{field_name}' must map strings to strings, got {value!r}")
    return dict(value)


_DEVNULL = None


def _errlog():
    """Where the stdio server's stderr goes: ours, unless ours is not a real file (the subprocess needs a
    descriptor), then nowhere."""
    global _DEVNULL
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        if _DEVNULL is None:
            _DEVNULL = open(os.devnull, "w")  # noqa: SIM115 - shared by every server for the process's life
        return _DEVNULL


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups: anyio task groups wrap what their tasks raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    leaf = _leaf(exc)
    text = str(leaf) or repr(leaf)
    return f"{type(leaf).__name__}: {text}"


def _argument_problem(conn: _Connection, name: str, arguments: dict) -> str | None:
    """The first way ``arguments`` break the tool's inputSchema, or None. A schema jsonschema cannot use is not
    checked here (the server still validates)."""
    if name not in conn.validators:
        try:
            from jsonschema.validators import validator_for

            schema = conn.schemas[name]
            cls = validator_for(schema)
            cls.check_schema(schema)
            conn.validators[name] = cls(schema)
        except Exception:
            conn.validators[name] = None
    validator = conn.validators[name]
    if validator is None:
        return None
    from jsonschema.exceptions import best_match

    try:
        error = best_match(validator.iter_errors(arguments))
    except Exception:  # an unresolvable $ref and the like: leave it to the server
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def _content_text(result: Any) -> str:
    """The text the model reads: the text parts joined by newlines; other parts named in brackets.

    Structured content is used (as JSON) only when there are no content parts: the MCP spec asks a server that
    returns structured content to also return it serialized as text, so including both would show it twice."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else
                         f"[binary resource {block.resource.uri} ({block.resource.mime_type or 'unknown type'})]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.uri}]")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({block.mime_type}), {len(block.data)} base64 characters]")
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True),
                                    ensure_ascii=False))
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)
