"""SPEC §3.12 CodeExecutorEnv: the payload mapping (no subprocess) and a few real sandboxed runs.

Every real run costs a fresh interpreter (~0.1 s), so the mapping is tested on fabricated
:class:`SandboxResult`\\ s and only the behaviours that need a real interpreter run for real.
"""
from __future__ import annotations

import time

import pytest

from data_builders.environments import code_executor, serialize
from data_builders.environments.code_executor import CodeExecutorEnv, payload_for
from data_builders.environments.sandbox import SandboxResult


def fake(stdout="", kind=None, error=None, exit_code=0, stderr=""):
    return SandboxResult(stdout=stdout, stderr=stderr, exit_code=exit_code, timed_out=kind == "timeout",
                         error_kind=kind, error=error, wall_s=0.01)


def ok(out):
    return {"success": True, "stdout": out, "stderr": "", "exit_code": 0, "result": out}


def fail(stdout, message, exit_code=1):
    return {"success": False, "stdout": stdout, "stderr": message, "exit_code": exit_code, "message": message}


def run(code):
    return CodeExecutorEnv().call("run_code", {"code": code})


# --------------------------------------------------------------------------- mapping (no subprocess)

def test_success_strips_only_trailing_newlines():
    assert payload_for(fake("42\n"), 5) == ok("42")
    assert payload_for(fake("a\n\nb\n\n\n"), 5) == ok("a\n\nb")
    assert payload_for(fake("  padded \t\n"), 5) == ok("  padded \t")  # other whitespace is kept
    assert payload_for(fake("\n\n"), 5) == ok("")
    assert payload_for(fake("", stderr="warning\n"), 5) == ok("")  # stderr is not captured on success
    assert list(payload_for(fake("x"), 5)) == ["success", "stdout", "stderr", "exit_code", "result"]


def test_success_truncates_after_5000_chars():
    assert payload_for(fake("a" * 5000 + "\n"), 5) == ok("a" * 5000)
    out = payload_for(fake("b" * 6000 + "\n\n"), 5)
    assert out == ok("b" * 5000 + "... [truncated, total 6000 chars]")


def test_timeout_payload_keeps_first_500_chars_of_partial_output():
    out = payload_for(fake("x" * 700, kind="timeout", error="TimeoutError: wall-clock", exit_code=-9), 5.0)
    assert out == fail("x" * 500, "Code execution timed out (5s limit)", exit_code=-1)
    assert list(out) == ["success", "stdout", "stderr", "exit_code", "message"]


@pytest.mark.parametrize("kind, error", [
    ("exception", "ValueError: bad"),
    ("exit", "SystemExit: 3"),
    ("forbidden", "PermissionError: [sandbox] os.system is not allowed"),
    ("memory", "MemoryError: "),
    ("output_limit", "OutputLimitError: output exceeded 1000000 bytes"),
    ("crash", "ProcessCrashed: killed by SIGSEGV"),
])
def test_failures_use_the_exception_payload(kind, error):
    out = payload_for(fake("partial\n" + "y" * 600, kind=kind, error=error, exit_code=7), 5)
    assert out == fail(("partial\n" + "y" * 600)[:500], error)


def test_sandbox_failure_becomes_a_tool_runtime_error(monkeypatch):
    monkeypatch.setattr(code_executor, "run_python",
                        lambda code, limits: fake(kind="sandbox_error", error="SandboxError: OSError: no fork",
                                                  exit_code=-1))
    assert run("print(1)") == {"success": False,
                               "message": "[TOOL_RUNTIME_ERROR] RuntimeError: SandboxError: OSError: no fork"}


def test_runtime_pipeline_errors_without_running_anything(monkeypatch):
    monkeypatch.setattr(code_executor, "run_python", lambda *a: pytest.fail("must not run"))
    env = CodeExecutorEnv()
    assert env.call("run_code", {}) == {"success": False, "message": "Missing required parameter code."}
    assert env.call("run_code", {"code": 5}) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] TypeError: code must be a string, not int"}
    assert env.call("run_code", {"code": "x" * 5001}) == {
        "success": False, "message": "Argument 'code' too long (5001 chars, max 5000)."}
    assert env.call("execute", {"code": "1"}) == {
        "success": False, "message": "Tool execute not available in this task."}


# --------------------------------------------------------------------------- real sandboxed runs

def test_real_run_success_and_serialisation():
    out = run("for i in range(3):\n    print(i, end=' ')\nprint()\nprint('done')\n\n")
    assert out == ok("0 1 2 \ndone")
    assert serialize(out) == ('{"success": true, "stdout": "0 1 2 \\ndone", "stderr": "", "exit_code": 0, '
                              '"result": "0 1 2 \\ndone"}')


def test_real_run_exception_keeps_partial_output():
    assert run("print('before')\nraise ValueError('bad value')") == fail("before\n", "ValueError: bad value")
    assert run("x = 1\nif x:\nprint(x)") == fail(
        "", "IndentationError: expected an indented block after 'if' statement on line 2 (<string>, line 3)")


def test_system_exit_is_a_normal_result():
    # exit status 0 / None: the program simply ended, so the success payload with its output.
    assert run("import sys\nprint('bye')\nsys.exit()\nprint('never')") == ok("bye")
    # any other status: reported like an exception, "<ExcClass>: <msg>"
    assert run("import sys\nprint('bye')\nsys.exit(3)") == fail("bye\n", "SystemExit: 3")


def test_fresh_interpreter_per_call_and_harness_int_limit():
    env = CodeExecutorEnv()
    assert env.call("run_code", {"code": "shared = 1\nprint(shared)"}) == ok("1")
    assert env.call("run_code", {"code": "print(shared)"}) == fail("", "NameError: name 'shared' is not defined")
    # The When2Tool harness prints ints up to 10,000 digits (CPython's own default is 4300).
    out = env.call("run_code", {"code": "print(len(str(10**6000)))\nprint(10**10000)"})
    assert out["stdout"] == "6001\n" and out["exit_code"] == 1
    assert out["stderr"].startswith("ValueError: Exceeds the limit (10000 digits)")


def test_forbidden_operation_is_reported_not_executed():
    assert run("import os\nos.system('true')") == fail("", "PermissionError: [sandbox] os.system is not allowed")


def test_timeout_with_short_limit(monkeypatch):
    monkeypatch.setattr(CodeExecutorEnv, "time_limit_s", 0.5)
    start = time.monotonic()
    out = run("print('started')\nwhile True:\n    pass")
    assert time.monotonic() - start < 3
    assert out == fail("started\n", "Code execution timed out (0.5s limit)", exit_code=-1)
