"""Adversarial tests for the out-of-process Python sandbox.

Every attack case checks three things: the reported outcome (error_kind and
error payload), that it finished within its limit plus slack, and that nothing
outside the sandbox changed: a canary directory the code aims at is snapshotted
before and after (contents, modes, times and inode flags such as immutable), a
unique /tmp path the code tries to create must not exist afterwards, and the
test process's CPU affinity is unchanged. ``{harness}`` in a case is the test
process's PID, standing for the harness.

Every test runs twice: inside the OS boundary (namespaces via bubblewrap, the
default) and without it (``isolation=False``, what a machine without user
namespaces gets), so the inner layers are shown to hold on their own.
tests/data_builders/environments/test_sandbox_native.py attacks the boundary
itself with native code, as root and as a non-root uid.
"""

from __future__ import annotations

import array
import fcntl
import hashlib
import os
import re
import tempfile
import uuid
from dataclasses import dataclass, replace

import pytest

from data_builders.environments import isolation, sandbox
from data_builders.environments.sandbox import SandboxLimits, SandboxResult, run_python

# Small limits keep the suite fast on 2 cores; the attacks don't need more.
LIMITS = SandboxLimits(wall_s=2.0, cpu_s=1.0, memory_mb=256, max_output_bytes=100_000, max_file_bytes=1_000_000)
QUOTA = replace(LIMITS, max_total_bytes=5_000_000)


def on_disk(body: str) -> str:
    """``body``, then (also when it raises) how many files the sandbox directory holds and their bytes."""
    return ("import os\ntry:\n" + "".join(f"    {line}\n" for line in body.splitlines()) +
            "finally:\n    files = [e for e in os.scandir() if e.is_file()]\n"
            "    print(f'{len(files)} files, {sum(e.stat().st_size for e in files)} bytes')\n")
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
    # (kind, error regex) inside the OS boundary where it differs: a target outside the read-only view does not
    # exist there, so the attack fails before the audit hook is asked.
    isolated: tuple[str | None, str | None] | None = None


NOT_IN_VIEW = ("exception", r"^FileNotFoundError: ")


# linux/fs.h: _IOR/_IOW('f', 1/2, long); the kernel reads and writes an int.
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20


def _inode_flags(path: str) -> int | None:
    """The file's inode flags (``lsattr``), or None where the filesystem has none."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        buf = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf)
        return buf[0]
    except OSError:
        return None
    finally:
        os.close(fd)


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
            state[os.path.relpath(path, directory)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest,
                                                       _inode_flags(path))
    st = os.stat(directory)
    state["."] = (st.st_mode, st.st_mtime_ns, _inode_flags(directory))
    return state


def _clear_inode_flags(directory: str) -> None:
    # A failing case may leave an immutable file that pytest could not delete.
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in [".", *dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            flags = _inode_flags(path)
            if flags is not None and flags & (FS_IMMUTABLE_FL | FS_APPEND_FL):
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                try:
                    fcntl.ioctl(fd, FS_IOC_SETFLAGS, array.array("i", [flags & ~(FS_IMMUTABLE_FL | FS_APPEND_FL)]))
                finally:
                    os.close(fd)


@pytest.fixture(params=[True, False], ids=["isolated", "inner_layers"])
def isolation_on(request):
    return request.param


@pytest.fixture
def canary(tmp_path):
    directory = tmp_path / "canary"
    directory.mkdir()
    (directory / "keep.txt").write_text("precious\n")
    (directory / "sub").mkdir()
    (directory / "sub" / "inner.txt").write_text("inner\n")
    yield str(directory)
    _clear_inode_flags(str(directory))


@pytest.fixture
def affinity():
    """The test process's CPU set, restored afterwards should a case have changed it."""
    before = os.sched_getaffinity(0)
    yield before
    os.sched_setaffinity(0, before)


@pytest.fixture
def stray():
    path = os.path.join(tempfile.gettempdir(), f"toolwise_sandbox_stray_{uuid.uuid4().hex}")
    yield path
    if os.path.lexists(path):  # only if a test failed; don't leave it behind
        os.remove(path)


def _run_attack(case: Case, canary: str, stray: str, affinity: set[int], isolation_on: bool) -> SandboxResult:
    code = case.code.replace("{canary}", canary).replace("{stray}", stray).replace("{harness}", str(os.getpid()))
    before = _snapshot(canary)
    result = run_python(code, case.limits, isolation=isolation_on)
    kind, error = case.isolated if isolation_on and case.isolated else (case.kind, case.error)
    assert result.wall_s <= case.limits.wall_s + SLACK_S, result
    assert result.error_kind == kind, result
    if error is not None:
        assert result.error is not None and re.search(error, result.error), result
    if case.stdout is not None:
        assert result.stdout == case.stdout, result
    assert result.timed_out == (kind == "timeout")
    assert _snapshot(canary) == before, "a file outside the sandbox changed"
    assert not os.path.lexists(stray), "a stray file appeared in /tmp"
    assert os.sched_getaffinity(0) == affinity, "the harness's CPU affinity changed"
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
         FORBIDDEN + "os.chdir outside"),
    # A thread moves the working directory out and back while the main thread
    # writes relative names: a check against the old directory would let a
    # write land outside.
    Case("chdir_race_write",
         "import os, threading\nhome = os.getcwd()\n"
         "def flip():\n    while True:\n        try:\n            os.chdir('{canary}')\n"
         "        except PermissionError:\n            pass\n        os.chdir(home)\n"
         "threading.Thread(target=flip, daemon=True).start()\n"
         "import time\nend = time.monotonic() + 1.5\ni = 0\nwhile time.monotonic() < end:\n    i += 1\n"
         "    try:\n        open('race%d.txt' % (i % 5), 'w').close()\n    except PermissionError:\n        pass\n"
         "print('done')",
         None, stdout="done\n", limits=replace(LIMITS, wall_s=4.0, cpu_s=3.0)),
    # Directories inside the sandbox can be moved by another thread between a
    # check and the system call, so '..' from them is refused outright.
    Case("dotdot_inside_sandbox", "import os\nos.mkdir('a')\nos.chdir('a')\nprint(open('../../code.py').read())",
         "forbidden", FORBIDDEN + "reading through '..' inside the sandbox", stdout=""),
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
         "forbidden", FORBIDDEN + "opening a directory outside",
         isolated=NOT_IN_VIEW),
    Case("proc_self_cwd", "import os\nos.chdir('{canary}')\nopen('/proc/self/cwd/x.txt', 'w')", "forbidden",
         FORBIDDEN + "os.chdir outside"),
    Case("proc_self_cwd_dotdot", "open('/proc/self/cwd/../x.txt', 'w')", "forbidden", FORBIDDEN + "writing outside"),
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
         "forbidden", FORBIDDEN + "os.chmod outside",
         isolated=NOT_IN_VIEW),
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
    # The bootstrap loads seccomp through ctypes, so the extension module _ctypes stays initialised and
    # importlib hands it out again without an import event; every ctypes operation is still refused.
    Case("ctypes_via_importlib",
         "import importlib\n_ctypes = importlib.import_module('_ctypes')\n_ctypes.dlopen(None)", "forbidden",
         FORBIDDEN + r"(import of _ctypes|ctypes\.dlopen)"),
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
    Case("patch_report_defaults_via_frame",
         "import sys\nsys._getframe(1).f_locals['report'].__defaults__ = (None,) * 3", "forbidden",
         FORBIDDEN + "replacing the sandbox's __defaults__"),
    Case("rebind_isinstance_then_write",
         "import builtins\nbuiltins.isinstance = None\nopen('{canary}/x.txt', 'w')",
         "forbidden", FORBIDDEN + "writing outside"),
    Case("rebind_permissionerror_then_nice",
         "import builtins, os\nbuiltins.PermissionError = ValueError\nos.nice(1)", "forbidden", FORBIDDEN + "os.nice"),
    Case("chroot", "import os\nos.chroot('.')", "forbidden", FORBIDDEN + "os.chroot"),
    Case("renice", "import os\nos.nice(-20)", "forbidden", FORBIDDEN + "os.nice"),
    # --- other processes and the harness's secrets ----------------------------
    Case("sched_setaffinity_harness", "import os\nos.sched_setaffinity({harness}, {0})", "forbidden",
         FORBIDDEN + "os.sched_setaffinity"),
    Case("sched_setaffinity_everything", "import os\nfor pid in range(1, 4096):\n"
         "    try:\n        os.sched_setaffinity(pid, {0})\n    except ProcessLookupError:\n        pass",
         "forbidden", FORBIDDEN + "os.sched_setaffinity"),
    Case("setpriority_harness", "import os\nos.setpriority(os.PRIO_PROCESS, {harness}, 19)", "forbidden",
         FORBIDDEN + "os.setpriority"),
    Case("sched_setscheduler_harness", "import os\nos.sched_setscheduler({harness}, os.SCHED_IDLE, os.sched_param(0))",
         "forbidden", FORBIDDEN + "os.sched_setscheduler"),
    Case("fcntl_setown_harness", "import fcntl, os\nr, w = os.pipe()\nfcntl.fcntl(r, fcntl.F_SETOWN, {harness})",
         "forbidden", FORBIDDEN + "fcntl.fcntl command"),
    Case("proc_environ", "print(open('/proc/{harness}/environ', 'rb').read())", "forbidden",
         FORBIDDEN + "reading another process's /proc", stdout=""),
    Case("proc_environ_via_root_link", "print(open('/proc/self/root/proc/{harness}/environ', 'rb').read())",
         "forbidden", FORBIDDEN + "reading another process's /proc", stdout=""),
    Case("proc_environ_via_dev_fd", "print(open('/dev/fd/../../{harness}/environ', 'rb').read())",
         "forbidden", FORBIDDEN + "reading another process's /proc", stdout=""),
    Case("proc_environ_after_chdir", "import os\nos.chdir('/proc')\nprint(open('{harness}/environ', 'rb').read())",
         "forbidden", FORBIDDEN + "os.chdir outside", stdout=""),
    Case("proc_environ_via_cwd_link", "print(open('/proc/self/cwd/../../../proc/{harness}/environ', 'rb').read())",
         "forbidden", FORBIDDEN + "reading through '..' inside the sandbox", stdout=""),
    Case("proc_cmdline_os_open", "import os\nprint(os.read(os.open('/proc/{harness}/cmdline', os.O_RDONLY), 4096))",
         "forbidden", FORBIDDEN + "reading another process's /proc", stdout=""),
    Case("proc_environ_os_open_dotdot",
         "import os\nfd = os.open('.', os.O_RDONLY)\n"
         "print(os.read(os.open('../' * 40 + 'proc/{harness}/environ', os.O_RDONLY, dir_fd=fd), 4096))",
         "forbidden", FORBIDDEN + "os.open through a relative path with '..'", stdout=""),
    Case("proc_environ_io_open_code", "import io\nprint(io.open_code('/proc/{harness}/environ').read())",
         "forbidden", FORBIDDEN + "reading another process's /proc", stdout=""),
    # --- inode flags and locks (no write check sees them) -----------------------
    Case("chattr_immutable",
         "import array, fcntl, os\nfd = os.open('{canary}/keep.txt', os.O_RDONLY)\n"
         "fcntl.ioctl(fd, 0x40086602, array.array('i', [0x10]))", "forbidden", FORBIDDEN + "fcntl.ioctl",
         isolated=NOT_IN_VIEW),
    Case("chattr_append_only_via_file_object",
         "import array, fcntl\n"
         "with open('{canary}/sub/inner.txt', 'rb') as f:\n    fcntl.ioctl(f, 0x40086602, array.array('i', [0x20]))",
         "forbidden", FORBIDDEN + "fcntl.ioctl",
         isolated=NOT_IN_VIEW),
    Case("flock_outside", "import fcntl\nf = open('{canary}/keep.txt')\nfcntl.flock(f, fcntl.LOCK_EX)",
         "forbidden", FORBIDDEN + "locking outside",
         isolated=NOT_IN_VIEW),
    Case("lockf_outside", "import fcntl\nf = open('{canary}/keep.txt')\nfcntl.lockf(f, fcntl.LOCK_SH)",
         "forbidden", FORBIDDEN + "locking outside",
         isolated=NOT_IN_VIEW),
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
    # --- disk quota (the per-file limit alone let 40 files of 0.99 MB through) -----------------------
    Case("many_files_under_the_file_limit", on_disk("for i in range(40):\n    with open(f'f{i}', 'wb') as f:\n"
         "        f.write(b'x' * 990_000)"), "exception", r"^OSError: \[Errno 122\] Disk quota exceeded: opening a new "
         r"file for writing would let the sandbox directory hold \d+ bytes, over its 5000000-byte quota: '.*/f5'$",
         stdout="5 files, 4950000 bytes\n", limits=QUOTA),
    Case("many_files_open_at_once", on_disk("fs = [open(f'f{i}', 'wb') for i in range(40)]"), "exception",
         r"^OSError: \[Errno 122\] Disk quota exceeded: .*'.*/f4'$", stdout="4 files, 0 bytes\n", limits=QUOTA),
    Case("unlinked_while_open", on_disk("keep = []\nfor i in range(40):\n    f = open(f'f{i}', 'wb')\n"
         "    os.unlink(f'f{i}')\n    f.write(b'x' * 990_000)\n    f.flush()\n    keep.append(f)"),
         "exception", r"^OSError: \[Errno 122\] Disk quota exceeded: .*'.*/f5'$", stdout="0 files, 0 bytes\n",
         limits=QUOTA),            # five deleted files of 0.99 MB still open: counted though in no directory
    Case("grown_by_truncate", on_disk("for i in range(6):\n    open(f'f{i}', 'wb').close()\n"
         "for i in range(6):\n    os.truncate(f'f{i}', 990_000)"), "exception",
         r"^OSError: \[Errno 122\] Disk quota exceeded: growing a file .*'.*/f5'$", stdout="6 files, 4950000 bytes\n",
         limits=QUOTA),
    Case("many_directories", on_disk("for i in range(1000):\n    os.mkdir(str(i))"), "exception",
         r"^OSError: \[Errno 122\] Disk quota exceeded: making a directory", stdout="0 files, 0 bytes\n",
         limits=replace(QUOTA, max_total_bytes=200_000)),
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


@pytest.mark.slow
@pytest.mark.parametrize("case", ATTACKS, ids=[c.id for c in ATTACKS])
def test_attack(case, canary, stray, affinity, isolation_on):
    _run_attack(case, canary, stray, affinity, isolation_on)


def test_attack_ids_are_unique():
    assert len({c.id for c in ATTACKS}) == len(ATTACKS)


def test_the_os_boundary_is_in_force_here():
    # CI and development machines allow user namespaces and have libseccomp: a missing layer is a failure here,
    # not a skip (the attack cases would pass on the inner layers alone and prove nothing about the boundary).
    walls = isolation.boundary()
    assert walls.complete, walls.missing
    assert "namespaces" in sandbox.layers() and "seccomp" in sandbox.layers() and "missing" not in sandbox.layers()


def test_isolated_code_is_pid_1_with_loopback_only_and_an_unprivileged_uid():
    code = ("import os\nprint(os.getpid(), os.getuid(), os.getgid(), sorted(os.listdir('/proc'))[:0],"
            " [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]],"
            " [p for p in os.listdir('/proc') if p.isdigit()])")
    with_os = run_python(code, LIMITS)
    without = run_python(code, LIMITS, isolation=False)
    assert with_os.error_kind is None and with_os.stdout == "1 65534 65534 [] ['lo'] ['1']\n", with_os
    assert without.error_kind is None and not without.stdout.startswith("1 "), without


def test_harness_environment_stays_secret(isolation_on):
    # What the harness was started with is in its /proc/<pid>/environ (API keys live there).
    with open("/proc/self/environ", "rb") as f:
        secrets = [v for v in f.read().split(b"\0") if len(v) > 8]
    code = (f"import os\nfor p in ('/proc/{os.getpid()}/environ', '/proc/{os.getppid()}/environ'):\n"
            "    try:\n        print(open(p, 'rb').read())\n"
            "    except OSError as e:\n        print(type(e).__name__)\n")
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None, result
    assert result.stdout == "PermissionError\nPermissionError\n", result
    assert not any(v.decode("utf-8", "replace") in result.stdout for v in secrets)


def test_own_proc_entries_stay_readable(isolation_on):
    code = ("import os\nprint(len(open('/proc/self/status').read()) > 0,"
            " len(open('/proc/thread-self/comm').read()) > 0,"
            " len(open(f'/proc/{os.getpid()}/cmdline', 'rb').read()) > 0, open('/proc/mounts').read() != '')")
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None and result.stdout == "True True True True\n", result


@pytest.mark.parametrize("tamper", [
    "import builtins\nbuiltins.isinstance = None",
    "import builtins\nbuiltins.str = None",
    "import builtins\nbuiltins.len = builtins.any = builtins.type = None",
    "import json\njson._default_encoder = None",
], ids=["isinstance", "str", "len_any_type", "json_encoder"])
def test_tampering_then_forbidden_write_is_forbidden(tamper, stray, isolation_on):
    result = run_python(f"{tamper}\nopen('{stray}', 'w')", LIMITS, isolation=isolation_on)
    assert result.error_kind == "forbidden", result
    assert result.error == f"PermissionError: [sandbox] writing outside the sandbox directory: {stray}", result
    assert result.stderr.endswith(f"PermissionError: [sandbox] writing outside the sandbox directory: {stray}\n")
    assert not os.path.lexists(stray)


def test_normal_code_prints_exact_stdout(isolation_on):
    result = run_python("print('hello')\nprint(sum(range(10)))\nprint('  trailing spaces  ')\n\n", LIMITS,
                        isolation=isolation_on)
    assert result == SandboxResult(stdout="hello\n45\n  trailing spaces  \n", stderr="", exit_code=0,
                                   timed_out=False, error_kind=None, error=None, wall_s=result.wall_s)


def test_unicode_output_round_trips(isolation_on):
    result = run_python("print('héllo ✓ 日本')", LIMITS, isolation=isolation_on)
    assert result.error_kind is None and result.stdout == "héllo ✓ 日本\n"


def test_exception_reports_class_message_and_partial_stdout(isolation_on):
    result = run_python("print('partial')\nraise ValueError('bad value')", LIMITS, isolation=isolation_on)
    assert result.error_kind == "exception"
    assert result.error == "ValueError: bad value"
    assert result.stdout == "partial\n"
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.stderr and "ValueError: bad value" in result.stderr


def test_syntax_error_is_an_exception(isolation_on):
    result = run_python("def broken(:\n    pass", LIMITS, isolation=isolation_on)
    assert result.error_kind == "exception"
    assert result.error.startswith("SyntaxError: ") and "<string>, line 1" in result.error


def test_files_inside_the_sandbox_work_and_vanish(isolation_on):
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
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None, result
    first, cwd = result.stdout.splitlines()
    assert first == "one two ['b.txt', 'c.txt', 'e.txt'] b'3'"
    assert not os.path.exists(cwd), "the sandbox directory must be removed afterwards"


def test_reading_outside_files_is_allowed(isolation_on):
    result = run_python("import json, csv, decimal, os\nprint(open(os.__file__).read() != '')", LIMITS,
                        isolation=isolation_on)
    assert result.error_kind is None and result.stdout == "True\n", result


def test_the_harness_files_are_outside_the_view(tmp_path, isolation_on):
    # The inner layers let the code read what the harness's user can; the OS boundary shows it only /usr, the
    # interpreter and its own directory, so keys and data beside the harness are not there at all.
    secret = tmp_path / "api_key.txt"
    secret.write_text("sk-secret\n")
    code = f"try:\n    print(open({str(secret)!r}).read().strip())\nexcept OSError as e:\n    print(type(e).__name__)"
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None, result
    assert result.stdout == ("FileNotFoundError\n" if isolation_on else "sk-secret\n"), result


def test_fresh_globals_and_no_state_between_runs(isolation_on):
    first = run_python("x = 41\nprint(__name__, sorted(k for k in globals() if not k.startswith('__')))", LIMITS,
                       isolation=isolation_on)
    second = run_python("print('x' in globals())", LIMITS, isolation=isolation_on)
    assert first.stdout == "__main__ ['x']\n"
    assert second.stdout == "False\n"


def test_stdin_is_closed(isolation_on):
    result = run_python("input()", LIMITS, isolation=isolation_on)
    assert result.error_kind == "exception" and result.error.startswith("EOFError")


def test_asyncio_and_threads_still_work(isolation_on):
    code = (
        "import asyncio, concurrent.futures\n"
        "async def main():\n    await asyncio.sleep(0.01)\n    return 6 * 7\n"
        "print(asyncio.run(main()))\n"
        "with concurrent.futures.ThreadPoolExecutor(2) as ex:\n    print(sum(ex.map(abs, [-1, -2])))\n"
    )
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None and result.stdout == "42\n3\n", result


def test_caught_forbidden_operation_lets_the_code_continue(isolation_on):
    code = "import os\ntry:\n    os.system('true')\nexcept PermissionError as e:\n    print('blocked')"
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind is None and result.stdout == "blocked\n"


def test_output_limit_keeps_the_first_bytes(isolation_on):
    result = run_python("print('x' * 10_000_000)", LIMITS, isolation=isolation_on)
    assert result.stdout == "x" * LIMITS.max_output_bytes


def test_forged_report_cannot_claim_other_kinds(isolation_on):
    # The report pipe is visible to the code; a forged report may only lie
    # about the code's own outcome and garbage is ignored.
    code = "import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, b'{not json')\n    except OSError:\n        pass\nraise ValueError('real')"
    result = run_python(code, LIMITS, isolation=isolation_on)
    assert result.error_kind == "exception" and result.error == "ValueError: real"


def test_non_string_code_is_a_programming_error():
    with pytest.raises(TypeError):
        run_python(b"print(1)")  # type: ignore[arg-type]


# ------------------------------------------------------------- preloaded libraries (as the original imports them)

@pytest.mark.slow
def test_preloaded_library_import_does_not_count_against_the_limits(isolation_on):
    # numpy is imported before the hook; its import time is outside the code's CPU and wall-clock limits,
    # which still end a busy loop as a time-out (not as an OOM kill or a sandbox error).
    result = run_python("import numpy\nprint(numpy.int64(7))\nwhile True:\n    pass", LIMITS, isolation=isolation_on,
                        preload=("numpy",))
    assert result.error_kind == "timeout" and result.stdout == "7\n", result


def test_preload_closes_ctypes_again(stray, isolation_on):
    # pandas, scipy and sympy load ctypes; afterwards it is out of sys.modules, so importing it is refused.
    code = f"import sys\nprint('ctypes' in sys.modules)\nimport ctypes\nctypes.CDLL(None).system(b'touch {stray}')"
    result = run_python(code, LIMITS, isolation=isolation_on, preload=("sympy",))
    assert result.error_kind == "forbidden" and result.stdout == "False\n", result
    assert result.error == "PermissionError: [sandbox] import of ctypes is not allowed"
    assert not os.path.exists(stray)


def test_preload_of_a_missing_module_is_skipped(isolation_on):
    result = run_python("import toolwise_no_such_library", LIMITS, isolation=isolation_on,
                        preload=("toolwise_no_such_library",))
    assert result.error == "ModuleNotFoundError: No module named 'toolwise_no_such_library'", result


def test_preload_names_are_checked():
    with pytest.raises(ValueError, match="not a module name"):
        run_python("print(1)", preload=("numpy; import os",))
