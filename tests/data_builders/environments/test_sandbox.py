"""Adversarial tests for the out-of-process Python sandbox.

Every attack case checks three things: the reported outcome (error_kind and
error payload), that it finished within its limit plus slack, and that nothing
outside the sandbox changed: a canary directory the code aims at is snapshotted
before and after, and a unique /tmp path the code tries to create must not
exist afterwards.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, replace

import pytest

from data_builders.environments import sandbox
from data_builders.environments.sandbox import SandboxLimits, SandboxResult, run_python

# Small limits keep the suite fast on 2 cores; the attacks don't need more.
LIMITS = SandboxLimits(wall_s=2.0, cpu_s=1.0, memory_mb=256, max_output_bytes=100_000, max_file_bytes=1_000_000)
# Python start-up (plus namespace set-up) on a loaded 2-core machine.
SLACK_S = 1.5


@dataclass(frozen=True)
class Case:
    id: str
    code: str
    kind: str | None
    error: str | None = None  # regex searched in result.error
    stdout: str | None = None  # exact expected stdout
    limits: SandboxLimits = LIMITS


def _snapshot(directory: str) -> dict[str, tuple]:
    state = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            digest = None
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            state[os.path.relpath(path, directory)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = os.stat(directory)
    state["."] = (st.st_mode, st.st_mtime_ns)
    return state


@pytest.fixture
def canary(tmp_path):
    directory = tmp_path / "canary"
    directory.mkdir()
    (directory / "keep.txt").write_text("precious\n")
    (directory / "sub").mkdir()
    (directory / "sub" / "inner.txt").write_text("inner\n")
    return str(directory)


@pytest.fixture
def stray():
    path = os.path.join(tempfile.gettempdir(), f"toolwise_sandbox_stray_{uuid.uuid4().hex}")
    yield path
    if os.path.lexists(path):  # only if a test failed; don't leave it behind
        os.remove(path)


def _run_attack(case: Case, canary: str, stray: str) -> SandboxResult:
    code = case.code.replace("{canary}", canary).replace("{stray}", stray)
    before = _snapshot(canary)
    result = run_python(code, case.limits)
    assert result.wall_s <= case.limits.wall_s + SLACK_S, result
    assert result.error_kind == case.kind, result
    if case.error is not None:
        assert result.error is not None and re.search(case.error, result.error), result
    if case.stdout is not None:
        assert result.stdout == case.stdout, result
    assert result.timed_out == (case.kind == "timeout")
    assert _snapshot(canary) == before, "a file outside the sandbox changed"
    assert not os.path.lexists(stray), "a stray file appeared in /tmp"
    return result


FORBIDDEN = r"^PermissionError: \[sandbox\] "

ATTACKS = [
    # --- process creation -------------------------------------------------
    Case("os_system", "import os\nprint('before')\nos.system('touch {stray}')", "forbidden",
         FORBIDDEN + "os.system", stdout="before\n"),
    Case("subprocess_run", "import subprocess\nsubprocess.run(['touch', '{stray}'])", "forbidden",
         FORBIDDEN + "subprocess.Popen"),
    Case("posixsubprocess_fork_exec",
         "import _posixsubprocess, os\n"
         "_posixsubprocess.fork_exec([b'/usr/bin/touch', b'{stray}'], [b'/usr/bin/touch'], True, (), None,"
         " None, -1, -1, -1, -1, -1, -1, *os.pipe(), False, False, None, None, None, -1, None, False)",
         "forbidden", FORBIDDEN + "_posixsubprocess.fork_exec"),
    Case("reimport_posixsubprocess",
         "import sys\ndel sys.modules['_posixsubprocess']\nimport _posixsubprocess", "forbidden",
         FORBIDDEN + "import of _posixsubprocess"),
    Case("os_fork", "import os\npid = os.fork()\nif pid == 0:\n    open('{stray}', 'w')", "forbidden",
         FORBIDDEN + "os.fork"),
    Case("os_execv", "import os\nos.execv('/usr/bin/touch', ['touch', '{stray}'])", "forbidden",
         FORBIDDEN + "os.exec"),
    Case("os_posix_spawn", "import os\nos.posix_spawn('/usr/bin/touch', ['touch', '{stray}'], {})", "forbidden",
         FORBIDDEN + "os.posix_spawn"),
    Case("os_spawnv", "import os\nos.spawnv(os.P_WAIT, '/usr/bin/touch', ['touch', '{stray}'])", "forbidden",
         FORBIDDEN + "os.fork"),
    Case("pty_spawn", "import pty\npty.spawn(['touch', '{stray}'])", "forbidden", FORBIDDEN + "pty.spawn"),
    Case("multiprocessing_fork_bomb",
         "import multiprocessing as mp\n"
         "def bomb():\n    open('{stray}', 'w')\n"
         "for _ in range(100):\n    mp.Process(target=bomb).start()",
         "forbidden", FORBIDDEN + "os.fork"),
    # --- writes outside the sandbox ---------------------------------------
    Case("write_absolute", "open('{canary}/new.txt', 'w').write('x')", "forbidden", FORBIDDEN + "writing outside"),
    Case("append_existing", "open('{canary}/keep.txt', 'a').write('x')", "forbidden", FORBIDDEN + "writing outside"),
    Case("write_stray_tmp", "print('partial')\nopen('{stray}', 'x')", "forbidden", FORBIDDEN + "writing outside",
         stdout="partial\n"),
    Case("write_relative_parent", "open('../x', 'w')", "forbidden", FORBIDDEN + "writing outside"),
    Case("write_after_chdir", "import os\nos.chdir('{canary}')\nopen('rel.txt', 'w')", "forbidden",
         FORBIDDEN + "writing outside"),
    Case("builtins_open_write", "__import__('builtins').open('{canary}/b.txt', 'wb')", "forbidden",
         FORBIDDEN + "writing outside"),
    Case("io_open_write", "import io\nio.FileIO('{canary}/f.txt', 'w')", "forbidden", FORBIDDEN + "writing outside"),
    Case("os_open_creat", "import os\nos.open('{canary}/o.txt', os.O_WRONLY | os.O_CREAT)", "forbidden",
         FORBIDDEN + "writing outside"),
    Case("pathlib_write", "import pathlib\npathlib.Path('{canary}/p.txt').write_text('x')", "forbidden",
         FORBIDDEN + "writing outside"),
    Case("pathlike_toctou",
         "import os\n"
         "class P:\n    n = 0\n"
         "    def __fspath__(self):\n        P.n += 1\n        return '{canary}/t.txt' if P.n % 2 else 'ok.txt'\n"
         "os.close(os.open(P(), os.O_WRONLY | os.O_CREAT))",
         "forbidden", FORBIDDEN + "writing outside"),
    Case("dir_fd_escape",
         "import os\nfd = os.open('{canary}', os.O_RDONLY)\nos.open('evil.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd)",
         "forbidden", FORBIDDEN + "opening a directory outside"),
    Case("proc_self_cwd", "import os\nos.chdir('{canary}')\nopen('/proc/self/cwd/x.txt', 'w')", "forbidden",
         FORBIDDEN + "writing outside"),
    Case("os_remove", "import os\nos.remove('{canary}/keep.txt')", "forbidden", FORBIDDEN + "os.remove outside"),
    Case("os_rename_in", "import os\nos.rename('{canary}/keep.txt', 'stolen.txt')", "forbidden",
         FORBIDDEN + "os.rename outside"),
    Case("shutil_rmtree", "import shutil\nshutil.rmtree('{canary}')", "forbidden", FORBIDDEN + "shutil.rmtree outside"),
    Case("os_mkdir", "import os\nos.mkdir('{canary}/newdir')", "forbidden", FORBIDDEN + "os.mkdir outside"),
    Case("os_rmdir", "import os\nos.rmdir('{canary}/sub')", "forbidden", FORBIDDEN + "os.rmdir outside"),
    Case("os_symlink", "import os\nos.symlink('{canary}/keep.txt', 'link')\nopen('link', 'w')", "forbidden",
         FORBIDDEN + "os.symlink"),
    Case("os_link", "import os\nos.link('{canary}/keep.txt', 'hard')\nopen('hard', 'w')", "forbidden",
         FORBIDDEN + "os.link"),
    Case("os_chmod", "import os\nos.chmod('{canary}/keep.txt', 0o777)", "forbidden", FORBIDDEN + "os.chmod outside"),
    Case("os_fchmod_read_fd", "import os\nfd = os.open('{canary}/keep.txt', os.O_RDONLY)\nos.fchmod(fd, 0o777)",
         "forbidden", FORBIDDEN + "os.chmod outside"),
    Case("os_utime", "import os\nos.utime('{canary}/keep.txt', (0, 0))", "forbidden", FORBIDDEN + "os.utime outside"),
    Case("os_truncate", "import os\nos.truncate('{canary}/keep.txt', 0)", "forbidden",
         FORBIDDEN + "os.truncate outside"),
    Case("os_mkfifo", "import os\nos.mkfifo('{canary}/fifo')", "forbidden", FORBIDDEN + "os.mkfifo"),
    Case("os_mknod_device", "import os, stat\nos.mknod('dev', stat.S_IFCHR | 0o600, os.makedev(1, 3))", "forbidden",
         FORBIDDEN + "os.mknod"),
    Case("sqlite_attach", "import sqlite3\nsqlite3.connect(':memory:').execute(\"ATTACH '{stray}' AS x\")",
         "forbidden", FORBIDDEN + "import of _sqlite3"),
    # --- network ------------------------------------------------------------
    Case("socket_connect", "import socket\ns = socket.create_connection(('127.0.0.1', 9), timeout=1)", "forbidden",
         FORBIDDEN),
    Case("socket_create", "import socket\nsocket.socket(socket.AF_INET6, socket.SOCK_DGRAM)", "forbidden",
         FORBIDDEN + "creating a network socket"),
    Case("unix_socket_connect", "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/harness.sock')",
         "forbidden", FORBIDDEN + "socket.connect"),
    Case("urllib_urlopen", "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/', timeout=1)",
         "forbidden", r"^URLError: .*\[sandbox\]"),
    # --- native code --------------------------------------------------------
    Case("ctypes_system", "import ctypes\nctypes.CDLL(None).system(b'touch {stray}')", "forbidden",
         FORBIDDEN + "import of ctypes"),
    Case("ctypes_via_importlib", "import importlib\nimportlib.import_module('_ctypes')", "forbidden",
         FORBIDDEN + "import of _ctypes"),
    # --- signals, sessions, the harness -------------------------------------
    Case("kill_parent", "import os\nos.kill(os.getppid(), 9)", "forbidden", FORBIDDEN + "os.kill"),
    Case("kill_everything", "import os\nos.kill(-1, 9)", "forbidden", FORBIDDEN + "os.kill"),
    Case("killpg", "import os\nos.killpg(os.getpgid(0), 9)", "forbidden", FORBIDDEN + "os.killpg"),
    Case("setsid_escape", "import os\nos.setsid()", "forbidden", FORBIDDEN + "os.setsid"),
    Case("pidfd_send_signal", "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getpid()), 9)",
         "forbidden", FORBIDDEN + "signal.pidfd_send_signal"),
    Case("ignore_sigxcpu_busy_loop", "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass",
         "timeout", r"^TimeoutError: "),
    # --- tampering with the sandbox ------------------------------------------
    # CPython swallows a hook's refusal of sys.addaudithook: the new hook is
    # silently not added, so it never sees (or could veto) later events.
    Case("add_audit_hook",
         "import sys, os\nsys.addaudithook(lambda e, a: print('user hook saw', e) if e == 'os.system' else None)\n"
         "os.system('touch {stray}')",
         "forbidden", FORBIDDEN + "os.system", stdout=""),
    Case("raise_rlimit", "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))", "forbidden",
         FORBIDDEN + "resource.setrlimit"),
    Case("gc_find_objects", "import gc\ngc.get_objects()", "forbidden", FORBIDDEN + "gc.get_objects"),
    Case("reimport_posix", "import sys\ndel sys.modules['posix']\nimport posix", "forbidden",
         FORBIDDEN + "import of posix"),
    Case("reload_builtin", "import importlib, posix\nimportlib.reload(posix)", "forbidden",
         FORBIDDEN + "re-(creating|executing) a built-in module"),
    Case("reload_os_then_system", "import importlib, os\nos = importlib.reload(os)\nos.system('touch {stray}')",
         "forbidden", FORBIDDEN + "os.system"),
    Case("rebind_builtins_then_write",
         "import builtins, posixpath, os\n"
         "builtins.isinstance = lambda *a: False\nposixpath.normpath = lambda p: '/'\nos.getcwd = lambda: '/'\n"
         "open('{canary}/x.txt', 'w')",
         "forbidden", FORBIDDEN + "writing outside"),
    Case("patch_hook_defaults_via_traceback",
         "import os\n"
         "try:\n    os.system('x')\nexcept PermissionError as e:\n    tb = e.__traceback__\n"
         "while tb.tb_next:\n    tb = tb.tb_next\n"
         "f = tb.tb_frame.f_back.f_locals\n"
         "check = f['deny']\n"
         "check.__defaults__ = tuple(None for _ in check.__defaults__)",
         "forbidden", FORBIDDEN + "replacing the sandbox's __defaults__"),
    Case("chroot", "import os\nos.chroot('.')", "forbidden", FORBIDDEN + "os.chroot"),
    Case("renice", "import os\nos.nice(-20)", "forbidden", FORBIDDEN + "os.nice"),
    # --- time ------------------------------------------------------------------
    Case("busy_loop", "print('spin')\nwhile True: pass", "timeout", r"^TimeoutError: CPU time", stdout="spin\n"),
    Case("sleep", "import time\nprint('start')\ntime.sleep(100)", "timeout", r"^TimeoutError: wall-clock",
         stdout="start\n"),
    Case("big_power", "9**9**9", "timeout", r"^TimeoutError: ",
         limits=replace(LIMITS, memory_mb=1024)),
    Case("swallow_timeouts", "while True:\n    try:\n        while True: pass\n    except BaseException:\n        pass",
         "timeout", r"^TimeoutError: "),
    Case("thread_spins_and_main_joins",
         "import threading\ndef spin():\n    while True:\n        pass\nt = threading.Thread(target=spin)\nt.start()\nt.join()",
         "timeout", r"^TimeoutError: "),
    # --- memory ------------------------------------------------------------------
    Case("big_string", "print('a')\n'x' * 10**10", "memory", r"^MemoryError", stdout="a\n"),
    Case("big_list", "[0] * 10**10", "memory", r"^MemoryError"),
    Case("growing_list", "a = []\nwhile True:\n    a.append(' ' * 10**6)", "memory", r"^MemoryError"),
    Case("big_bytearray", "bytearray(10**10)", "memory", r"^MemoryError"),
    # --- output --------------------------------------------------------------------
    Case("print_10mb", "print('x' * 10_000_000)", "output_limit", r"^OutputLimitError: output exceeded 100000 bytes"),
    Case("print_forever", "while True:\n    print('flood')", "output_limit", r"^OutputLimitError: "),
    Case("stderr_forever", "import sys\nwhile True:\n    sys.stderr.write('e' * 1000)", "output_limit",
         r"^OutputLimitError: "),
    Case("huge_file_inside", "with open('big.bin', 'wb') as f:\n    f.write(b'x' * 2_000_000)", "exception",
         r"^OSError: \[Errno 27\] File too large"),
    # --- recursion and crashes --------------------------------------------------------
    Case("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", "exception",
         r"^RecursionError: maximum recursion depth exceeded$"),
    Case("c_stack_overflow",
         "import sys\nsys.setrecursionlimit(10**6)\nclass R:\n    def __repr__(self):\n        return repr(self)\n"
         "print('pre')\nrepr(R())",
         "crash", r"^ProcessCrashed: killed by SIGSEGV$", stdout="pre\n"),
    # glibc's abort() ends in SIGSEGV when SIGABRT is ignored, as it is for
    # PID 1 of a PID namespace; either way it must be a reported crash.
    Case("abort", "import os\nos.abort()", "crash", r"^ProcessCrashed: killed by SIG(ABRT|SEGV)$"),
    # --- exits -------------------------------------------------------------------------
    Case("system_exit_3", "print('bye')\nraise SystemExit(3)", "exit", r"^SystemExit: 3$", stdout="bye\n"),
    Case("exit_builtin", "print('done')\nexit()", None, stdout="done\n"),
    Case("os_exit_7", "import os\nos._exit(7)", "exit", r"^SystemExit: 7$"),
    Case("sys_exit_message", "import sys\nsys.exit('fatal')", "exit", r"^SystemExit: fatal$"),
    Case("keyboard_interrupt", "raise KeyboardInterrupt", "exception", r"^KeyboardInterrupt: $"),
    Case("thread_spins_main_returns",
         "import threading\ndef spin():\n    while True:\n        pass\nthreading.Thread(target=spin).start()\nprint('main done')",
         None, stdout="main done\n"),
]


@pytest.mark.parametrize("case", ATTACKS, ids=[c.id for c in ATTACKS])
def test_attack(case, canary, stray):
    _run_attack(case, canary, stray)


def test_attack_ids_are_unique():
    assert len({c.id for c in ATTACKS}) == len(ATTACKS)


# The audit hook must hold on its own: replay representative attacks with the
# namespace layer switched off.
WITHOUT_NAMESPACES = ["os_fork", "subprocess_run", "write_absolute", "dir_fd_escape", "socket_connect",
                      "kill_parent", "killpg", "setsid_escape", "busy_loop", "ignore_sigxcpu_busy_loop",
                      "c_stack_overflow", "os_exit_7"]


@pytest.mark.parametrize("case", [c for c in ATTACKS if c.id in WITHOUT_NAMESPACES], ids=WITHOUT_NAMESPACES)
def test_attack_without_namespaces(case, canary, stray, monkeypatch):
    monkeypatch.setattr(sandbox, "_namespace_prefix", lambda: [])
    _run_attack(case, canary, stray)


def test_normal_code_prints_exact_stdout():
    result = run_python("print('hello')\nprint(sum(range(10)))\nprint('  trailing spaces  ')\n\n", LIMITS)
    assert result == SandboxResult(stdout="hello\n45\n  trailing spaces  \n", stderr="", exit_code=0,
                                   timed_out=False, error_kind=None, error=None, wall_s=result.wall_s)


def test_unicode_output_round_trips():
    result = run_python("print('héllo ✓ 日本')", LIMITS)
    assert result.error_kind is None and result.stdout == "héllo ✓ 日本\n"


def test_exception_reports_class_message_and_partial_stdout():
    result = run_python("print('partial')\nraise ValueError('bad value')", LIMITS)
    assert result.error_kind == "exception"
    assert result.error == "ValueError: bad value"
    assert result.stdout == "partial\n"
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "ValueError: bad value" in result.stderr


def test_syntax_error_is_an_exception():
    result = run_python("def broken(:\n    pass", LIMITS)
    assert result.error_kind == "exception"
    assert result.error.startswith("SyntaxError: ") and "<string>, line 1" in result.error


def test_files_inside_the_sandbox_work_and_vanish():
    code = (
        "import os, pathlib, shutil, tempfile\n"
        "with open('a.txt', 'w') as f:\n    f.write('one')\n"
        "os.mkdir('d')\nos.rename('a.txt', 'd/b.txt')\n"
        "p = pathlib.Path('d') / 'c.txt'\np.write_text('two')\n"
        "fd = os.open('d', os.O_RDONLY)\nos.close(os.open('e.txt', os.O_WRONLY | os.O_CREAT, dir_fd=fd))\n"
        "with tempfile.NamedTemporaryFile(delete=False) as t:\n    t.write(b'3')\n"
        "print(open('d/b.txt').read(), p.read_text(), sorted(os.listdir('d')), open(t.name, 'rb').read())\n"
        "shutil.rmtree('d')\n"
        "print(os.getcwd())\n"
    )
    result = run_python(code, LIMITS)
    assert result.error_kind is None, result
    first, cwd = result.stdout.splitlines()
    assert first == "one two ['b.txt', 'c.txt', 'e.txt'] b'3'"
    assert not os.path.exists(cwd), "the sandbox directory must be removed afterwards"


def test_reading_outside_files_is_allowed():
    result = run_python("import json, csv, decimal\nprint(open('/etc/hostname').read() != '' or True)", LIMITS)
    assert result.error_kind is None and result.stdout == "True\n", result


def test_fresh_globals_and_no_state_between_runs():
    first = run_python("x = 41\nprint(__name__, sorted(k for k in globals() if not k.startswith('__')))", LIMITS)
    second = run_python("print('x' in globals())", LIMITS)
    assert first.stdout == "__main__ ['x']\n"
    assert second.stdout == "False\n"


def test_stdin_is_closed():
    result = run_python("input()", LIMITS)
    assert result.error_kind == "exception" and result.error.startswith("EOFError")


def test_asyncio_and_threads_still_work():
    code = (
        "import asyncio, concurrent.futures\n"
        "async def main():\n    await asyncio.sleep(0.01)\n    return 6 * 7\n"
        "print(asyncio.run(main()))\n"
        "with concurrent.futures.ThreadPoolExecutor(2) as ex:\n    print(sum(ex.map(abs, [-1, -2])))\n"
    )
    result = run_python(code, LIMITS)
    assert result.error_kind is None and result.stdout == "42\n3\n", result


def test_caught_forbidden_operation_lets_the_code_continue():
    result = run_python("import os\ntry:\n    os.system('true')\nexcept PermissionError as e:\n    print('blocked')", LIMITS)
    assert result.error_kind is None and result.stdout == "blocked\n"


def test_output_limit_keeps_the_first_bytes():
    result = run_python("print('x' * 10_000_000)", LIMITS)
    assert result.stdout == "x" * LIMITS.max_output_bytes


def test_forged_report_cannot_claim_other_kinds():
    # The report pipe is visible to the code; a forged report may only lie
    # about the code's own outcome and garbage is ignored.
    code = "import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{not json')\n    except OSError:\n        pass\nraise ValueError('real')"
    result = run_python(code, LIMITS)
    assert result.error_kind == "exception" and result.error == "ValueError: real"


def test_non_string_code_is_a_programming_error():
    with pytest.raises(TypeError):
        run_python(b"print(1)")  # type: ignore[arg-type]
