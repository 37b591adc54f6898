"""Plain Python functions as tools, run in a worker process.

Spec::

    {"kind": "functions", "functions": ["pkg.mod:fn", ...]}     # these functions
    {"kind": "functions", "module": "pkg.mod"}                  # every public function defined in pkg.mod
    ... "path": "tools/"                                         # folder(s) put on the worker's sys.path

The schemas are ``transformers.utils.get_json_schema(fn)``, exactly as it returns them (``{"type": "function",
"function": {...}}``, its ``"return"`` entry included): the convention that chat templates and TRL use, so the
model is shown the same tool description in training and here. It reads the type hints and the Google-style
docstring (``Args:``), and refuses a function without them; that refusal is a spec error here, raised when the
source is built.

Why a worker process, never the caller's: the functions are the team's code, fed arguments written by a model. A
call that hangs must be stoppable (a thread cannot be killed), a call that crashes the interpreter (a segfault in
an extension, ``os._exit``) must not take the agent loop with it, and a function's module-level state must not
leak into the caller. The worker is started with the ``spawn`` method (a fresh interpreter: no inherited locks or
CUDA state, the same on every OS); it imports the functions, builds their schemas, and then answers one call at a
time over a pipe. A call that outruns ``CallLimits.timeout_s`` or kills the worker gets ``timeout``/``crash``; the
worker is killed if still alive and a new one is started for the next call. The timeout covers the call, not the
worker's start-up (imports), which has its own bound (``startup_timeout_s``).

Results: a returned string is the content as-is, anything else is ``json.dumps(value, ensure_ascii=False,
default=str)``; a raised exception is a ``tool_error`` whose content is ``"<Type>: <message>"``; arguments that do
not bind to the signature are ``bad_arguments`` (types are not checked: a function that needs an int and gets a
string says so by raising). What a function prints goes to stderr, so that it cannot corrupt a caller that speaks
a protocol on stdout; only the return value is the tool's output.

Two consequences of ``spawn`` that a caller should know: the worker re-imports the caller's main module (as
``__mp_main__``, the standard multiprocessing behaviour), so a script that builds this source must keep its work
under ``if __name__ == "__main__":``, and a heavy main module makes every worker start slower. And the worker is a
daemon process (it dies with the caller even without close()), so a tool cannot itself start multiprocessing
children.
"""
from __future__ import annotations

import copy
import inspect
import json
import multiprocessing
import os
import sys
import threading
from importlib import import_module
from pathlib import Path
from typing import Any

from .base import CallLimits, ToolResult, ToolSource, clip, failure


class FunctionSource(ToolSource):
    kind = "functions"

    def __init__(self, functions: list[str] | None = None, module: str | None = None,
                 path: str | list[str] | None = None, *, startup_timeout_s: float = 60.0,
                 base_dir: str | Path | None = None, limits: CallLimits | None = None):
        if functions is None and module is None:
            raise ValueError("functions source: one of the fields 'functions' (a list of 'package.module:function') "
                             "or 'module' (a module name) is required")
        refs: list[tuple[str, str]] = []     # (field, reference)
        if functions is not None:
            if not isinstance(functions, list) or not functions:
                raise ValueError(f"functions source: field 'functions' must be a non-empty list, got {functions!r}")
            for i, ref in enumerate(functions):
                mod, sep, attr = ref.partition(":") if isinstance(ref, str) else ("", "", "")
                if not (sep and mod and attr):
                    raise ValueError(f"functions source: field 'functions[{i}]' must look like "
                                     f"'package.module:function', got {ref!r}")
                refs.append((f"functions[{i}]", ref))
        if module is not None:
            if not (isinstance(module, str) and module and ":" not in module):
                raise ValueError(f"functions source: field 'module' must be a module name, got {module!r}")
            refs.append(("module", module))
        base = Path(base_dir) if base_dir is not None else Path.cwd()
        paths = [path] if isinstance(path, str) else path or []
        if not (isinstance(paths, list) and all(isinstance(p, str) for p in paths)):
            raise ValueError(f"functions source: field 'path' must be a folder or a list of folders, got {path!r}")
        self._paths = [str((base / p).resolve()) for p in paths]
        for p in self._paths:
            if not os.path.isdir(p):
                raise ValueError(f"functions source: field 'path' names no folder: {p}")
        if not (isinstance(startup_timeout_s, (int, float)) and startup_timeout_s > 0):
            raise ValueError(f"functions source: field 'startup_timeout_s' must be a positive number, "
                             f"got {startup_timeout_s!r}")
        self._refs = refs
        self._limits = limits or CallLimits()
        self._startup_timeout_s = float(startup_timeout_s)
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.RLock()
        self._proc = None
        self._conn = None
        self._closed = False
        self.workers_started = 0
        try:
            self._schemas = self._start_worker(with_schemas=True)
        except _SetupError as exc:
            self._stop_worker(kill=True)
            raise ValueError(f"functions source: field '{exc.field}': {exc.message}") from None
        except RuntimeError as exc:
            self._stop_worker(kill=True)
            raise RuntimeError(f"functions source: {exc}") from None

    # -- the interface ------------------------------------------------------------------------------------------

    def tools(self) -> list[dict]:
        return [copy.deepcopy(s) for s in self._schemas.values()]

    def _after_crash(self) -> None:
        self._stop_worker(kill=True)   # a worker in an unknown state is not reused

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._stop_worker()

    @property
    def worker_pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    # -- calls --------------------------------------------------------------------------------------------------

    def _call(self, name: str, arguments: Any, started: float) -> ToolResult:
        if self._closed:
            return failure("crash", "the functions source is closed", started=started)
        if not isinstance(name, str) or name not in self._schemas:
            return failure("unknown_tool", f"unknown tool {name!r}; available: {', '.join(self._schemas)}",
                           started=started)
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            return failure("bad_arguments", f"arguments must be a JSON object, got {type(arguments).__name__}",
                           started=started)
        if self._proc is None or not self._proc.is_alive():
            try:
                self._stop_worker()
                self._start_worker()
            except (_SetupError, RuntimeError) as exc:
                # Killed, not kept: a worker still loading would answer the next call with its start-up message.
                self._stop_worker(kill=True)
                return failure("crash", f"the function worker did not start: {exc}", started=started)
        try:
            self._conn.send((name, arguments))
        except (OSError, EOFError) as exc:       # the worker died between calls
            self._stop_worker()
            return failure("crash", f"the function worker is gone ({exc}); the next call restarts it",
                           started=started)
        except Exception as exc:                 # arguments that do not pickle
            return failure("bad_arguments", f"arguments cannot be sent: {type(exc).__name__}: {exc}",
                           started=started)
        timeout = self._limits.timeout_s
        if not self._conn.poll(timeout):
            self._stop_worker(kill=True)
            return failure("timeout", f"{name} did not return within {timeout:g}s; the worker was killed",
                           started=started)
        try:
            reply = self._conn.recv()
        except (OSError, EOFError):
            code = self._stop_worker(kill=True)
            return failure("crash", f"{name} crashed the worker (exit code {code}); the next call restarts it",
                           started=started)
        status, text, total = reply
        if status == "ok":
            return clip(text, self._limits, started=started, total_chars=total)
        if status == "tool_error":
            return clip(text, self._limits, started=started, total_chars=total, ok=False,
                        error_kind="tool_error", error=text[:500])
        return failure(status, text, started=started)   # "bad_arguments"

    # -- the worker ---------------------------------------------------------------------------------------------

    def _start_worker(self, with_schemas: bool = False) -> dict[str, dict] | None:
        """Start a worker; with ``with_schemas``, return its tool schemas by name (a restart skips them: they are
        known, and transformers is the slowest import). Raises _SetupError for a spec the worker cannot load,
        RuntimeError for a worker that does not start."""
        parent, child = self._ctx.Pipe()
        # daemon: a worker must never outlive the caller, even one that forgets close().
        proc = self._ctx.Process(target=_worker_main, name="toolwise-functions",
                                 args=(child, self._refs, self._paths, self._limits.max_output_chars, with_schemas),
                                 daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.workers_started += 1
        if not parent.poll(self._startup_timeout_s):
            raise RuntimeError(f"the worker did not load the functions within {self._startup_timeout_s:g}s")
        try:
            reply = parent.recv()
        except (OSError, EOFError):
            proc.join(1)
            raise RuntimeError(f"the worker died while loading the functions (exit code {proc.exitcode})") from None
        if reply[0] == "setup_error":
            raise _SetupError(reply[1], reply[2])
        return None if reply[1] is None else {s["function"]["name"]: s for s in reply[1]}

    def _stop_worker(self, kill: bool = False) -> int | None:
        """Stop the worker (politely unless ``kill``); its exit code, if it has one."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return None
        if not kill and proc.is_alive():
            try:
                conn.send(None)      # the worker's loop ends on None
                proc.join(2)
            except (OSError, EOFError):
                pass
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        conn.close()
        code = proc.exitcode
        if code is not None:     # Process.close() refuses a process that is somehow still running
            proc.close()
        return code


class _SetupError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


# -- worker side (runs in the spawned process) ------------------------------------------------------------------

def _load(refs: list[tuple[str, str]]) -> dict[str, Any]:
    """The functions the spec names, by tool name; raises _SetupError naming the spec field."""
    found: dict[str, tuple[str, Any]] = {}
    for field, ref in refs:
        mod_name, _, attr = ref.partition(":")
        try:
            mod = import_module(mod_name)
        except Exception as exc:
            raise _SetupError(field, f"cannot import {mod_name!r}: {type(exc).__name__}: {exc}") from None
        if attr:
            fn = mod
            for part in attr.split("."):
                fn = getattr(fn, part, None)
            if not callable(fn):
                raise _SetupError(field, f"{ref!r} is not a function")
            fns = [fn]
        else:
            # Only functions defined in the module: what it imports (helpers, typing) is not its tools.
            fns = [f for n, f in inspect.getmembers(mod, inspect.isfunction)
                   if f.__module__ == mod.__name__ and not n.startswith("_")]
            if not fns:
                raise _SetupError(field, f"module {mod_name!r} defines no public function")
        for fn in fns:
            if fn.__name__ in found and found[fn.__name__][1] is not fn:
                raise _SetupError(field, f"two tools named {fn.__name__!r} ({found[fn.__name__][0]} and {field})")
            found[fn.__name__] = (field, fn)
    return found


def _worker_main(conn, refs: list[tuple[str, str]], paths: list[str], max_chars: int, with_schemas: bool) -> None:
    # stdout belongs to the caller (it may speak a protocol there): what a tool prints goes to stderr.
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.path[:0] = paths
    try:
        found = _load(refs)
        schemas = None
        if with_schemas:
            from transformers.utils import get_json_schema

            schemas = []
            for name, (field, fn) in found.items():
                try:
                    schemas.append(get_json_schema(fn))
                except Exception as exc:
                    raise _SetupError(field, f"no tool schema for {name!r}: {type(exc).__name__}: {exc}") from None
    except _SetupError as exc:
        conn.send(("setup_error", exc.field, exc.message))
        return
    conn.send(("ready", schemas))
    fns = {name: fn for name, (_, fn) in found.items()}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        name, arguments = msg
        fn = fns[name]
        try:
            inspect.signature(fn).bind(**arguments)
        except TypeError as exc:
            conn.send(("bad_arguments", f"{name}: {exc}", None))
            continue
        try:
            value = fn(**arguments)
            status, text = "ok", value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                                   default=str)
        except Exception as exc:
            status, text = "tool_error", f"{type(exc).__name__}: {exc}"
        # Only the head crosses the pipe: the caller shows at most max_chars, and a flood should not cost a copy.
        conn.send((status, text[:max_chars], len(text)))
