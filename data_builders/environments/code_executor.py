"""CodeExecutorEnv (SPEC §3.12): run a Python snippet and report its stdout.

Deliberate deviation from the original, which ``exec``s model code in the harness process: here
model-written code never runs in-process. Every call starts a fresh sandboxed interpreter
(:func:`sandbox.run_python`), and the :class:`~.sandbox.SandboxResult` is mapped onto the
original's three payloads (success / timeout / exception).

Decisions where the original has no answer (see :func:`payload_for`):

* ``SystemExit``: the original does not catch it (it would end the harness). ``sys.exit()``,
  ``sys.exit(0)``, ``sys.exit(None)`` and ``exit()`` are a normal end of the program and give the
  **success** payload with the output printed so far. Any other exit status is reported like an
  exception, in the original's ``"<ExcClass>: <msg>"`` form: ``"SystemExit: 3"``,
  ``"SystemExit: bye"``, with ``exit_code`` 1.
* Failures the in-process original could not have (forbidden operation, memory limit, output
  flood past the sandbox's byte cap, a crashed interpreter) also use the exception payload, with
  the sandbox's ``"<Class>: <msg>"`` text (``PermissionError: [sandbox] ...``, ``MemoryError``,
  ``OutputLimitError``, ``ProcessCrashed``).
* The sandbox itself failing (no fork, disk full) is not the code's fault: it raises, so the
  runtime reports ``[TOOL_RUNTIME_ERROR] ...`` (SPEC §2.2 step 6).

The When2Tool harness raises Python's int-to-string limit to 10,000 digits and the original runs
inside it, so the snippet is run under that same limit (:func:`_wrap`).
"""
from __future__ import annotations

from typing import ClassVar

from .base import ToolEnvironment
from .sandbox import SandboxLimits, SandboxResult, run_python

MAX_STDOUT_CHARS = 5000
PARTIAL_STDOUT_CHARS = 500
INT_MAX_STR_DIGITS = 10_000


def _wrap(code: str) -> str:
    """The program the sandbox runs: set the harness's int->str limit, then run ``code`` as its own
    module. ``compile(..., "<string>")`` keeps the snippet's line numbers and ``SyntaxError``
    messages exactly as if it ran unwrapped, and ``from __future__`` imports stay legal."""
    return (
        "import sys\n"
        f"sys.set_int_max_str_digits({INT_MAX_STR_DIGITS})\n"
        "del sys\n"
        f"exec(compile({code!r}, '<string>', 'exec'), {{'__name__': '__main__'}})\n"
    )


def _stdout_result(stdout: str) -> str:
    out = stdout.rstrip("\n")  # only newlines: trailing spaces/tabs are part of the answer
    if len(out) > MAX_STDOUT_CHARS:
        out = f"{out[:MAX_STDOUT_CHARS]}... [truncated, total {len(out)} chars]"
    return out


def _failure(stdout: str, stderr: str, exit_code: int) -> dict:
    return {"success": False, "stdout": stdout[:PARTIAL_STDOUT_CHARS], "stderr": stderr,
            "exit_code": exit_code, "message": stderr}


def payload_for(result: SandboxResult, time_limit_s: float) -> dict:
    """Map one sandbox run to the SPEC §3.12 payload (module docstring lists the decisions)."""
    kind = result.error_kind
    if kind is None:  # includes SystemExit(0) / exit()
        out = _stdout_result(result.stdout)
        return {"success": True, "stdout": out, "stderr": "", "exit_code": 0, "result": out}
    if kind == "timeout":
        return _failure(result.stdout, f"Code execution timed out ({time_limit_s:g}s limit)", -1)
    if kind == "sandbox_error":
        raise RuntimeError(result.error or "sandbox failed")
    # exception, exit (non-zero SystemExit), forbidden, memory, output_limit, crash
    return _failure(result.stdout, result.error or f"ProcessCrashed: exit status {result.exit_code}", 1)


class CodeExecutorEnv(ToolEnvironment):
    name = "CodeExecutorEnv"

    # The original's 5-second alarm. A class attribute so a test can use a shorter limit.
    time_limit_s: ClassVar[float] = 5.0
    memory_mb: ClassVar[int] = 512

    def run_code(self, code: str) -> dict:
        if not isinstance(code, str):
            # The schema type is "string" (passed through uncoerced); the original's exec would
            # raise TypeError for a non-string too.
            raise TypeError(f"code must be a string, not {type(code).__name__}")
        limits = SandboxLimits(wall_s=self.time_limit_s, cpu_s=self.time_limit_s, memory_mb=self.memory_mb)
        return payload_for(run_python(_wrap(code), limits), self.time_limit_s)
