"""CodeExecutorEnv (docs/guide.md#when2tool-environments): run a Python snippet and report its stdout.

Deliberate deviation from the original, which ``exec``s model code in the harness process: here
model-written code never runs in-process. Every call starts a fresh sandboxed interpreter
(:func:`sandbox.run_python`), and the :class:`~.sandbox.SandboxResult` is mapped onto the
original's three payloads (success / timeout / exception).

What matches the original (each found by a differential test against its code):

* ``__name__`` is ``'builtins'``: the snippet runs with fresh, empty globals (``exec(code, {})``), so
  ``if __name__ == '__main__':`` blocks do not run and ``globals()`` holds only ``__builtins__`` (a dict).
* Libraries: the original runs in the harness's interpreter, so whatever is installed imports. Here
  :data:`PRELOADABLE` (numpy, pandas, scipy, sympy, sqlite3) are imported by the sandbox before its audit
  hook is armed when the code names them (:func:`preload_for`; scipy subpackages when named too), so
  code that names none of them starts as fast as before. Their import time does not count against the
  5-second limit (in the original they stay imported between calls). A library that is not installed
  fails as in the original (``ModuleNotFoundError: No module named '...'``). ``ctypes`` stays refused
  to the code; what preloading gives up is in ``sandbox.py``'s docstring ("Preloaded libraries").
  Standard-library modules the hook refuses (ctypes, readline, ...) stay refused: guards.
* Failure payloads strip trailing newlines from the partial output before taking its first 500
  characters, like the success payload (``"0\n1\n2"``, not ``"0\n1\n2\n"``).
* An output flood past the sandbox's byte cap (a memory guard the original does not have; ``while True:
  print(1)``) is reported with the **timeout** payload: in the original the same code runs into the
  5-second alarm. A single print beyond the cap (1,000,000 bytes) is reported the same way, where the
  original would return it truncated: a known difference.

Decisions where the original has no answer (see :func:`payload_for`):

* ``SystemExit``: the original does not catch it (it would end the harness). ``sys.exit()``,
  ``sys.exit(0)``, ``sys.exit(None)`` and ``exit()`` are a normal end of the program and give the
  **success** payload with the output printed so far. Any other exit status is reported like an
  exception, in the original's ``"<ExcClass>: <msg>"`` form: ``"SystemExit: 3"``,
  ``"SystemExit: bye"``, with ``exit_code`` 1.
* Failures the in-process original could not have (forbidden operation, memory limit, a crashed
  interpreter) use the original's exception payload shape, with the sandbox's ``"<Class>: <msg>"``
  text (``PermissionError: [sandbox] ...``, ``MemoryError: ...``, ``ProcessCrashed: ...``): e.g. a
  600 MB allocation (the original succeeds) or ``subprocess.run`` (the original runs it) stay refused
  by the limits, as guards.
* The sandbox itself failing (no fork, disk full) is not the code's fault: it raises, so the
  runtime reports ``[TOOL_RUNTIME_ERROR] ...`` (as for any exception a tool raises).

The When2Tool harness raises Python's int-to-string limit to 10,000 digits and the original runs
inside it, so the snippet is run under that same limit (:func:`_wrap`).
"""
from __future__ import annotations

import re
from typing import ClassVar

from .base import ToolEnvironment
from .sandbox import SandboxLimits, SandboxResult, run_python

MAX_STDOUT_CHARS = 5000
PARTIAL_STDOUT_CHARS = 500
INT_MAX_STR_DIGITS = 10_000
# Third-party/native libraries the original can import (it runs in the harness's own interpreter) that
# the sandbox's hook would refuse once armed; imported before it when the code names them.
PRELOADABLE = ("numpy", "pandas", "scipy", "sympy", "sqlite3")
# scipy's subpackages load lazily, and stats, signal and io import ctypes when they do.
SCIPY_SUBPACKAGES = ("cluster", "constants", "datasets", "differentiate", "fft", "fftpack", "integrate",
                     "interpolate", "io", "linalg", "ndimage", "odr", "optimize", "signal", "sparse",
                     "spatial", "special", "stats")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _wrap(code: str) -> str:
    """The program the sandbox runs: set the harness's int->str limit, then run ``code`` as its own
    module. ``compile(..., "<string>")`` keeps the snippet's line numbers and ``SyntaxError``
    messages exactly as if it ran unwrapped, and ``from __future__`` imports stay legal."""
    return (
        "import sys\n"
        f"sys.set_int_max_str_digits({INT_MAX_STR_DIGITS})\n"
        "del sys\n"
        f"exec(compile({code!r}, '<string>', 'exec'), {{}})\n"
    )


def preload_for(code: str) -> tuple[str, ...]:
    """The libraries the sandbox imports before arming its hook for ``code``: those of
    :data:`PRELOADABLE` the code names (with the scipy subpackages it names), so code that uses none
    of them starts as fast as before (module docstring)."""
    words = set(_WORD.findall(code))
    names = [name for name in PRELOADABLE if name in words]
    if "scipy" in names:
        names += [f"scipy.{sub}" for sub in SCIPY_SUBPACKAGES if sub in words]
    return tuple(names)


def _stdout_result(stdout: str) -> str:
    out = stdout.rstrip("\n")  # only newlines: trailing spaces/tabs are part of the answer
    if len(out) > MAX_STDOUT_CHARS:
        out = f"{out[:MAX_STDOUT_CHARS]}... [truncated, total {len(out)} chars]"
    return out


def _failure(stdout: str, stderr: str, exit_code: int) -> dict:
    # The original strips trailing newlines here too, before taking the first 500 characters.
    return {"success": False, "stdout": stdout.rstrip("\n")[:PARTIAL_STDOUT_CHARS], "stderr": stderr,
            "exit_code": exit_code, "message": stderr}


def payload_for(result: SandboxResult, time_limit_s: float) -> dict:
    """Map one sandbox run to the original's payloads (module docstring lists the decisions)."""
    kind = result.error_kind
    if kind is None:  # includes SystemExit(0) / exit()
        out = _stdout_result(result.stdout)
        return {"success": True, "stdout": out, "stderr": "", "exit_code": 0, "result": out}
    if kind in ("timeout", "output_limit"):  # an output flood is code that would run into the alarm
        return _failure(result.stdout, f"Code execution timed out ({time_limit_s:g}s limit)", -1)
    if kind == "sandbox_error":
        raise RuntimeError(result.error or "sandbox failed")
    # exception, exit (non-zero SystemExit), forbidden, memory, crash
    return _failure(result.stdout, result.error or f"ProcessCrashed: exit status {result.exit_code}", 1)


# CPython 3.11's exec() on anything that is not a str, bytes or code object (every non-string JSON value)
NON_STRING_CODE_ERROR = "TypeError: exec() arg 1 must be a string, bytes or code object"


class CodeExecutorEnv(ToolEnvironment):
    name = "CodeExecutorEnv"

    # The original's 5-second alarm. A class attribute so a test can use a shorter limit.
    time_limit_s: ClassVar[float] = 5.0
    memory_mb: ClassVar[int] = 512

    def run_code(self, code: str) -> dict:
        if not isinstance(code, str):
            # The schema type is "string" (passed through uncoerced). The original hands the value to exec()
            # inside its exception handler, so a JSON number/list/object/bool/null gets the exception payload
            # with Python's own TypeError text; nothing is run for it here.
            return _failure("", NON_STRING_CODE_ERROR, 1)
        limits = SandboxLimits(wall_s=self.time_limit_s, cpu_s=self.time_limit_s, memory_mb=self.memory_mb)
        return payload_for(run_python(_wrap(code), limits, preload=preload_for(code)), self.time_limit_s)
