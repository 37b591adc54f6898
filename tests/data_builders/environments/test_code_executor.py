"""CodeExecutorEnv: the payload mapping (no subprocess) and a few real sandboxed runs.

Every real run costs a fresh interpreter (~0.1 s), so the mapping is tested on fabricated
:class:`SandboxResult`\\ s and only the behaviours that need a real interpreter run for real.
"""
from __future__ import annotations

import os
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
    ("crash", "ProcessCrashed: killed by SIGSEGV"),
])
def test_failures_use_the_exception_payload(kind, error):
    out = payload_for(fake("partial\n" + "y" * 600, kind=kind, error=error, exit_code=7), 5)
    assert out == fail(("partial\n" + "y" * 600)[:500], error)


def test_output_flood_uses_the_timeout_payload():
    # The original has no output cap, so a flood runs into its 5-second alarm.
    out = payload_for(fake("y\n" * 600, kind="output_limit", error="OutputLimitError: output exceeded 1000000 bytes",
                           exit_code=-9), 5)
    assert out == fail(("y\n" * 600)[:500], "Code execution timed out (5s limit)", exit_code=-1)


def test_sandbox_failure_becomes_a_tool_runtime_error(monkeypatch):
    monkeypatch.setattr(code_executor, "run_python",
                        lambda code, limits, preload: fake(kind="sandbox_error", error="SandboxError: OSError: no fork",
                                                  exit_code=-1))
    assert run("print(1)") == {"success": False,
                               "message": "[TOOL_RUNTIME_ERROR] RuntimeError: SandboxError: OSError: no fork"}


def test_runtime_pipeline_errors_without_running_anything(monkeypatch):
    monkeypatch.setattr(code_executor, "run_python", lambda *a: pytest.fail("must not run"))
    env = CodeExecutorEnv()
    assert env.call("run_code", {}) == {"success": False, "message": "Missing required parameter code."}
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
    assert run("print('before')\nraise ValueError('bad value')") == fail("before", "ValueError: bad value")
    assert run("x = 1\nif x:\nprint(x)") == fail(
        "", "IndentationError: expected an indented block after 'if' statement on line 2 (<string>, line 3)")


def test_system_exit_is_a_normal_result():
    # exit status 0 / None: the program simply ended, so the success payload with its output.
    assert run("import sys\nprint('bye')\nsys.exit()\nprint('never')") == ok("bye")
    # any other status: reported like an exception, "<ExcClass>: <msg>"
    assert run("import sys\nprint('bye')\nsys.exit(3)") == fail("bye", "SystemExit: 3")


def test_fresh_interpreter_per_call_and_harness_int_limit():
    env = CodeExecutorEnv()
    assert env.call("run_code", {"code": "shared = 1\nprint(shared)"}) == ok("1")
    assert env.call("run_code", {"code": "print(shared)"}) == fail("", "NameError: name 'shared' is not defined")
    # The When2Tool harness prints ints up to 10,000 digits (CPython's own default is 4300).
    out = env.call("run_code", {"code": "print(len(str(10**6000)))\nprint(10**10000)"})
    assert out["stdout"] == "6001" and out["exit_code"] == 1
    assert out["stderr"].startswith("ValueError: Exceeds the limit (10000 digits)")


def test_forbidden_operation_is_reported_not_executed():
    assert run("import os\nos.system('true')") == fail("", "PermissionError: [sandbox] os.system is not allowed")


def test_timeout_with_short_limit(monkeypatch):
    monkeypatch.setattr(CodeExecutorEnv, "time_limit_s", 0.5)
    start = time.monotonic()
    out = run("print('started')\nwhile True:\n    pass")
    assert time.monotonic() - start < 3
    assert out == fail("started", "Code execution timed out (0.5s limit)", exit_code=-1)


# --------------------------------------------------------------------------- the original's outputs

STRAY = "/tmp/toolwise_code_executor_stray"


class TestOriginalFidelity:
    """The original's payloads, written out literally (from a differential test against its code)."""

    @pytest.mark.parametrize("code, stdout", [
        ("import numpy as np\nprint(np.array([1, 2, 3]).sum())", "6"),
        ("import pandas as pd\nprint(pd.DataFrame({'a': [1, 2]})['a'].sum())", "3"),
        ("from scipy import optimize, stats\nprint(round(optimize.brentq(lambda x: x * x - 2, 0, 2), 6), "
         "stats.norm.cdf(0))", "1.414214 0.5"),
        ("import sympy\nx = sympy.symbols('x')\nprint(sympy.factor(x**2 - 1))", "(x - 1)*(x + 1)"),
        ("import sqlite3\nc = sqlite3.connect(':memory:')\nc.execute('create table t(x)')\n"
         "c.execute('insert into t values (3)')\nprint(c.execute('select x from t').fetchall())", "[(3,)]"),
    ], ids=["numpy", "pandas", "scipy", "sympy", "sqlite3"])
    def test_item_06_libraries_import(self, code, stdout):
        assert run(code) == ok(stdout)

    def test_item_06_missing_library_fails_like_the_original(self):
        assert run("import toolwise_no_such_library") == fail(
            "", "ModuleNotFoundError: No module named 'toolwise_no_such_library'")

    def test_item_06_only_named_libraries_are_preloaded(self):
        assert code_executor.preload_for("print(1)") == ()
        assert code_executor.preload_for("import numpy as np\nimport sqlite3") == ("numpy", "sqlite3")
        assert code_executor.preload_for("from scipy import stats\nscipy.linalg") == (
            "scipy", "scipy.linalg", "scipy.stats")
        assert code_executor.preload_for("numpyish = 1") == ()

    @pytest.mark.parametrize("code, message", [
        ("import numpy\nimport ctypes", "PermissionError: [sandbox] import of ctypes is not allowed"),
        ("import numpy\nnumpy.ctypeslib.load_library('libc', '/lib')",
         "PermissionError: [sandbox] import of ctypes is not allowed"),
        ("import pandas.errors\npandas.errors.ctypes.CDLL(None)",
         "PermissionError: [sandbox] ctypes.dlopen is not allowed"),
        ("import sympy, numpy\nimport _ctypes", "PermissionError: [sandbox] import of _ctypes is not allowed"),
    ], ids=["import_ctypes", "numpy_ctypeslib", "ctypes_via_pandas", "import__ctypes"])
    def test_item_06_ctypes_stays_closed(self, code, message):
        assert run(code) == fail("", message)

    @pytest.mark.parametrize("code, message", [
        ("import numpy\nimport subprocess\nsubprocess.run(['true'])",
         "PermissionError: [sandbox] subprocess.Popen is not allowed"),
        (f"import pandas\nopen('{STRAY}', 'w')",
         f"PermissionError: [sandbox] writing outside the sandbox directory: {STRAY}"),
        (f"import numpy as np\nnp.save('{STRAY}.npy', np.zeros(1))",
         f"PermissionError: [sandbox] writing outside the sandbox directory: {STRAY}.npy"),
        ("import scipy, socket\nsocket.socket()",
         "PermissionError: [sandbox] creating a network socket is not allowed"),
        (f"import sqlite3\nsqlite3.connect('{STRAY}.db')",
         f"PermissionError: [sandbox] sqlite3.connect outside the sandbox directory: {STRAY}.db"),
        (f"import sqlite3\nsqlite3.connect(':memory:').execute(\"ATTACH '{STRAY}.db' AS x\")",
         "DatabaseError: not authorized"),
        (f"import sqlite3\nsqlite3.connect(':memory:').execute(\"VACUUM INTO '{STRAY}.db'\")",
         "DatabaseError: authorization denied"),
    ], ids=["subprocess", "open", "numpy_save", "socket", "sqlite_file", "sqlite_attach", "sqlite_vacuum_into"])
    def test_item_06_other_guards_hold_with_libraries_loaded(self, code, message):
        assert run(code) == fail("", message)
        assert not any(os.path.exists(STRAY + suffix) for suffix in ("", ".npy", ".db"))

    def test_item_07_name_is_builtins(self):
        code = ("print(__name__)\nif __name__ == '__main__':\n    print('main block')\n"
                "print(sorted(globals()), type(__builtins__).__name__)")
        assert run(code) == ok("builtins\n['__builtins__'] dict")

    def test_item_08_partial_stdout_is_stripped(self, monkeypatch):
        assert run("for i in range(3): print(i)\nraise KeyError('k')") == fail("0\n1\n2", "KeyError: 'k'")
        monkeypatch.setattr(CodeExecutorEnv, "time_limit_s", 0.5)
        assert run("for i in range(3): print(i)\nwhile True:\n    pass") == fail(
            "0\n1\n2", "Code execution timed out (0.5s limit)", exit_code=-1)

    def test_item_09_print_forever_gets_the_timeout_payload(self):
        assert run("while True: print(1)") == fail("1\n" * 250, "Code execution timed out (5s limit)", exit_code=-1)

    def test_item_09_limits_keep_the_exception_payload_shape(self):
        # Guards (the original allocates and spawns): the original's exception shape, the sandbox's text.
        assert run("x = bytearray(600 * 1024 * 1024)\nprint(len(x))") == fail("", "MemoryError: ")
        assert run("import subprocess\nsubprocess.run(['true'])") == fail(
            "", "PermissionError: [sandbox] subprocess.Popen is not allowed")


@pytest.mark.parametrize("code", [123, 1.5, True, None, [1], {"a": 1}])
def test_item_13_non_string_code_gets_the_originals_exec_error(monkeypatch, code):
    """The original passes the value to exec() inside its handler: the exception payload."""
    monkeypatch.setattr(code_executor, "run_python", lambda *a, **k: pytest.fail("must not run"))
    message = "TypeError: exec() arg 1 must be a string, bytes or code object"
    assert CodeExecutorEnv().call("run_code", {"code": code}) == {
        "success": False, "stdout": "", "stderr": message, "exit_code": 1, "message": message}
