"""Run untrusted, model-written Python code out of process, under layered limits.

Product rule: model output is untrusted, so model-written code never runs in the
harness process. :func:`run_python` starts a fresh interpreter for every call and
turns *everything* that can happen to it (normal exit, exception, SystemExit,
forbidden operation, time-out, memory exhaustion, output flood, segfault) into a
:class:`SandboxResult`; it never raises for any code string.

Defence layers, outermost first. Each one exists because the next one inward can
be defeated on its own:

1. **Separate process** (``sys.executable -I -X utf8 -u``). ``-I`` ignores
   ``PYTHON*`` variables, the user site directory and the current directory on
   ``sys.path``, so nothing in the environment or the sandbox directory can
   inject code into the bootstrap; ``-u`` makes stdout unbuffered so partial
   output survives a kill. The child gets a new session/process group (the
   whole group is SIGKILLed on time-out, output overflow and, to sweep
   stragglers, after every run), a minimal environment (``HOME``/``TMPDIR``
   point into the sandbox so ``tempfile`` works there), stdin from
   ``/dev/null``, no inherited descriptors except one private report pipe, and
   ``cwd`` = a fresh directory inside a ``TemporaryDirectory`` that is deleted
   afterwards. A crash of the child can therefore never take the harness down.
2. **The OS boundary** (:mod:`.isolation`; docs/sandbox.md has the threat
   model). bubblewrap puts the child in new user, mount, PID, network, IPC and
   UTS namespaces, root or not: PID 1 of its own PID namespace, uid 65534, no
   capabilities, ``no_new_privs``, loopback as its only interface, a read-only
   view of ``/usr`` and the interpreter (nothing of the harness's files), and
   its working directory as a tmpfs of ``max_total_bytes``. A seccomp filter,
   loaded by the child before the code runs, refuses ``execve``, ``fork``,
   ``memfd_create``, network sockets and the kernel interfaces escapes use.
   Unlike layers 4-5 these hold whatever the code imports: native modules
   under another name, libuv, Rust writers. Where the kernel refuses user
   namespaces or libseccomp is missing, :func:`layers` names the gap and
   ``require_isolation`` turns it into a refusal; ``run_python(...,
   isolation=False)`` leaves the namespaces out (the tests use it to show the
   inner layers hold on their own).
3. **Resource limits** set in the child before any user code: ``RLIMIT_AS``
   (memory: allocations fail with ``MemoryError``), ``RLIMIT_CPU`` (soft limit
   raises a catchable time-out via SIGXCPU; hard limit one second later is an
   uncatchable SIGKILL, which also covers long C-level operations such as
   ``9**9**9`` that never return to the interpreter loop), ``RLIMIT_FSIZE``
   (a single file cannot grow past ``max_file_bytes``: CPython ignores SIGXFSZ,
   so the write fails with ``EFBIG``; the directory's total is layer 4's disk
   quota), ``RLIMIT_NOFILE`` and ``RLIMIT_CORE=0``.
   The child may not raise them again (``resource.setrlimit``/``prlimit`` are
   blocked by the hook), which matters because a root child could otherwise
   lift its own hard limits. ``RLIMIT_NPROC`` is deliberately not relied on:
   it does not bind root, so process creation is blocked by the hook instead.
   A watchdog thread in the child also ends it shortly after the wall-clock
   limit, so a sandbox can't outlive a harness that died mid-run.
4. **An audit hook** (PEP 578), installed by the bootstrap before the user code
   is compiled. Audit hooks cannot be removed from Python code, so it
   holds for the life of the process. It raises ``PermissionError("[sandbox]
   ...")`` for:

   * process creation and signalling: ``os.system``, ``os.exec*``,
     ``os.spawn*``/``os.fork``/``os.forkpty``, ``os.posix_spawn*``,
     ``subprocess.Popen``, ``pty.spawn``, ``os.killpg`` and ``os.kill`` of
     any process but itself (so ``os.kill(os.getppid(), 9)`` cannot hit the
     harness), ``fcntl`` ``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG`` (SIGIO to
     any PID), ``F_SETLEASE`` and ``F_NOTIFY``;
   * networking: creating any socket except ``AF_UNIX`` (``asyncio`` needs a
     socketpair for its self-pipe), any ``connect``/``bind``/``sendto``, and
     name resolution;
   * native code that would run below the hook: importing ``ctypes``,
     ``cffi``, ``_posixshmem`` (files in ``/dev/shm``), ``_sqlite3`` (``ATTACH``
     creates files without an audit event; unless preloaded, see below),
     ``_dbm``/``_gdbm``, ``readline``, ``syslog``, ``psutil``,
     sub-interpreters and the ``_test*`` modules, and any ``ctypes.*`` event;
   * filesystem writes outside the sandbox directory: ``open``/``os.open``
     with a write, create, truncate or append flag, ``os.remove``/``unlink``,
     ``rename``/``replace``, ``mkdir``, ``rmdir``, ``shutil.rmtree``,
     ``chmod``, ``chown``, ``utime``, ``truncate``, ``setxattr``,
     ``removexattr``; ``os.symlink`` and ``os.link`` are refused everywhere,
     which keeps the sandbox directory free of links, so a lexical path check
     against the real sandbox path is exact. Also refused: every
     ``fcntl.ioctl`` (``FS_IOC_SETFLAGS`` sets ``chattr +i`` on an outside
     file through a read-only descriptor; ``TIOCSTI`` types into a terminal)
     and record locks (``flock``, ``lockf``, ``fcntl`` ``F_SETLK*``) on files
     outside the directory, which the harness could block on. ``os.chdir``/
     ``fchdir`` out of the directory is refused (otherwise a thread could move
     the working directory out between another thread's check of a relative
     path and its system call), and so is any path whose resolution applies
     ``..`` to a directory inside the sandbox (another thread could move that
     directory up in the meantime, and the same ``..`` would climb out);
   * a disk quota on the sandbox directory, ``max_total_bytes`` (the per-file
     limit alone let 40 files of just under it through). No ``write`` has an
     audit event, so the bound is taken where a file can start to grow: opening
     a file for writing, ``truncate`` by path, ``mkdir``. There the hook adds up
     every entry in the directory (at least one 4 KiB block each, so empty files
     and directories count too), the room ``RLIMIT_FSIZE`` leaves each regular
     file the process holds open for writing (read from the kernel's descriptor
     table, so deleted-but-open files count as well), and the new file's room;
     over the quota, the call fails with ``OSError(EDQUOT)``, as a file system
     quota would. A closed file cannot grow without passing the check again,
     and the bound keeps no state the code could reach and reset;
   * reading another process's ``/proc/<pid>/...`` (``environ`` holds the
     harness's API keys when there is no PID namespace; ``cmdline``, ``mem``,
     ``fd/``). The path is resolved as the kernel would (symlinks and /proc's
     magic links followed, ``..`` applied after them, relative paths against
     the working directory) and a procfs root is recognised by device and
     inode, so ``/proc/self/root/proc/N`` or ``/dev/fd/../../N`` are caught
     too. Reading other files is allowed (the standard library needs it),
     except that ``os.open`` of a *directory* outside the sandbox is refused,
     because ``os.open`` does not report ``dir_fd`` to the hook and an outside
     directory descriptor would make a relative path land outside; for the
     same reason an ``os.open`` through a relative path with a ``..``
     component is refused, and so are path objects other than ``str``,
     ``bytes``, ``os.DirEntry`` and the exact ``pathlib`` classes;
   * tampering with the sandbox itself: ``sys.addaudithook``,
     ``resource.setrlimit``/``prlimit``, ``gc.get_objects``/``get_referrers``/
     ``get_referents`` (the only generic way to reach objects the bootstrap
     has dropped), and re-importing any built-in module or
     ``_posixsubprocess`` (see layer 5).

   The hook has no global state: every helper and builtin it uses is bound
   through its positional defaults (an immutable tuple) when it is created, so
   user code that rebinds ``builtins.len``, ``os.path.*`` or ``posixpath`` can't
   change what it checks. Path objects other than ``str``/``bytes``/fds and the
   exact ``pathlib`` classes are refused for writes: a user ``__fspath__``
   could return one path to the check and another to the system call.
5. **Unaudited primitives removed.** A few functions have no audit event but
   could defeat the rules above: ``_posixsubprocess.fork_exec`` (process
   creation), ``os.mknod``/``os.mkfifo`` (device nodes and FIFOs), ``os.setsid``/
   ``setpgid``/``setpgrp`` (leave the process group that gets killed),
   ``os.chroot``, ``os.nice``/``setpriority``/``sched_setscheduler``/
   ``sched_setparam``/``sched_setaffinity`` (starve or pin the harness's
   CPUs) and ``signal.pidfd_send_signal`` (signal other processes). The
   bootstrap first imports every built-in module, then replaces those
   functions by ones that raise ``PermissionError`` and disables
   ``_imp.create_builtin``/``exec_builtin``, so a fresh, unmodified copy of
   ``posix`` or ``_signal`` cannot be created again.
6. **Parent-side enforcement**, which does not trust the child: stdout and
   stderr are read incrementally and the group is killed once together they
   exceed ``max_output_bytes``; the wall-clock limit kills the group; the exit
   status and the child's CPU time (``wait4`` rusage) classify deaths the child
   could not report (SIGKILL at the CPU hard limit, segfaults, ``os._exit``).

Result mapping. ``error_kind`` is ``None`` on success (including
``SystemExit(0)``/``exit()``), else one of ``"timeout"`` (wall-clock or CPU
limit), ``"memory"``, ``"output_limit"``, ``"forbidden"``, ``"exception"``,
``"exit"`` (``SystemExit`` with a non-zero code, or a non-zero exit without a
report, e.g. ``os._exit(7)``, reported as ``"SystemExit: 7"``), ``"crash"``
(killed by a signal such as SIGSEGV) or ``"sandbox_error"`` (the sandbox itself
could not run). ``error`` is ``f"{type(exc).__name__}: {exc}"`` of the exception
the code raised, exactly as an in-process ``exec`` wrapper would format it
(``SyntaxError`` included, reported against ``<string>``), or a message in the
same ``"<Class>: <msg>"`` shape for the other kinds. The kind survives user
code that rebinds builtins or breaks ``json``: the child's report is built
from functions bound before the code ran and builtins are restored before the
traceback is printed. ``stdout`` is exactly what
was written (partial output is kept on every failure), ``stderr`` holds the
traceback as CPython would print it.

Preloaded libraries (``run_python(..., preload=("numpy", ...))``, off by
default). numpy, pandas, scipy and sympy import ``ctypes`` and ``sqlite3``
imports ``_sqlite3``; with the hook armed those imports are refused, so such
libraries are imported by the bootstrap *before* the hook, as trusted code
(a module that is not installed is skipped: the code's own import then fails
with Python's ``ModuleNotFoundError``). Their set-up time does not count
against the code: preloading has its own CPU allowance (20 s) and wall-clock
allowance (30 s), the child lowers ``RLIMIT_CPU`` to what it used plus
``cpu_s`` afterwards, and a ``+ready <cpu seconds>`` line on the report pipe
(written before any user code runs, so the first one is the bootstrap's)
starts the code's wall-clock limit; runs without preloading do the same, so
interpreter start-up never counts either. Afterwards ``ctypes``/``_ctypes``
leave ``sys.modules``: ``import ctypes`` (also the lazy one behind
``numpy.ctypeslib``) is a fresh, audited import again and is refused, and
every audited ``ctypes.*`` operation (``CDLL``/``dlopen``, foreign calls,
``from_address``, ``string_at``) stays refused even through a library's own
reference (``pandas.errors.ctypes``). With ``sqlite3`` preloaded the hook
allows ``sqlite3.connect`` to ``:memory:``, ``""`` and files inside the
sandbox only, and ``sqlite3.connect`` hands out connections with an
authorizer that refuses ATTACH and ``VACUUM INTO`` of files and the
``temp_store_directory``/``data_store_directory`` PRAGMAs (SQLite opens those
files itself, without an audit event). What preloading gives up: these are
native libraries with raw-memory APIs that have no audit event (numpy's
``__array_interface__`` with an integer data address, ``as_strided``; the
already-loaded ctypes classes stay reachable through the libraries and
``object.__subclasses__``), and the SQLite authorizer is lifted by code that
calls ``set_authorizer(None)`` or builds a ``sqlite3.Connection`` itself. A
run that preloads therefore holds against accidents and casual misuse, but
against deliberate code only layers 1-3 (process, OS boundary, limits) hold.
Runs that preload nothing are unchanged.

Known gaps of the inner layers (3-5), which the OS boundary (layer 2) closes
where it is in force: the audit hook is not a security boundary by CPython's
own documentation: a native extension module that is not on the deny-list (or
one on it, loaded under another name), libuv, or a library writing files from
C or Rust makes system calls no hook sees; then the namespaces, the read-only
view and the seccomp filter are what hold. One narrow thread race remains in
the hook (a ``pathlib`` object whose cached string is changed between check
and use); the races through the working directory and through moved
directories are closed by keeping the working directory inside the sandbox
and refusing ``..`` there. Without the OS boundary, reads are limited only to
what the harness's user may read (other processes' ``/proc/<pid>`` excepted),
and metadata of other processes (``os.listdir('/proc')``, ``os.stat``/
``os.readlink`` under ``/proc/<pid>``) stays visible. The disk quota is checked
when a file is opened, not at each write: threads that open files at the same
instant can each pass the check before the others' files exist, exceeding the
quota by at most ``max_file_bytes`` per racing thread; inside the boundary the
tmpfs's size caps the total regardless. bwrap reports a child killed by signal
N as exit status 128 + N, so code that calls ``os._exit(137)`` itself is
classified as killed by SIGKILL.
"""

from __future__ import annotations

import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .isolation import IsolationUnavailable, boundary, bwrap_argv, layers, require
from .isolation import required as isolation_required

__all__ = ["IsolationUnavailable", "SandboxLimits", "SandboxResult", "layers", "run_python"]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``cpu_s`` is rounded up to whole seconds (RLIMIT_CPU)."""

    wall_s: float = 5.0
    cpu_s: float = 5.0
    memory_mb: int = 512
    max_output_bytes: int = 1_000_000
    max_file_bytes: int = 10_000_000
    # The whole sandbox directory (files, directories, the room of files open for writing): five files written
    # at once, or any number closed, before writes are refused with EDQUOT.
    max_total_bytes: int = 50_000_000


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    error_kind: str | None
    error: str | None
    wall_s: float


# Descriptors the child may have open at once; generous for normal programs,
# small enough that a descriptor leak can't exhaust the host's table.
_NOFILE = 256
# The report is a short JSON object; anything larger is the user writing to
# the report pipe and is ignored rather than buffered without bound.
_MAX_REPORT_BYTES = 65_536
_READ_CHUNK = 65_536
# Wall-clock seconds the child may take to import preloaded libraries before the code's own limit starts.
_PRELOAD_WALL_S = 30.0

# The child program is the module ``sandbox_child.py``; the child runs its source as
# ``python -I -X utf8 -u -c <source> <args>``. ``-c`` rather than the file's path keeps the child exactly as it
# was when the source lived in a string here: no ``__file__`` of the harness in ``__main__``, and the
# bootstrap's own frames (audit hook, SIGXCPU handler) in a user traceback show as ``<string>`` lines, not
# as source lines of a harness file.
_CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py").read_text(encoding="utf-8")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def run_python(code: str, limits: SandboxLimits = SandboxLimits(), *, isolation: bool = True,
               preload: tuple[str, ...] = (), require_isolation: bool | None = None) -> SandboxResult:
    """Run ``code`` in a fresh sandboxed interpreter; see the module docstring.

    ``isolation=False`` leaves out the OS boundary (layer 2) even where it is available: what a machine without
    user namespaces gets, which the tests use to show that the inner layers hold on their own. ``preload``
    names modules the child imports before the audit hook is armed ("Preloaded libraries" in the module
    docstring). ``require_isolation`` (default: the ``TOOLWISE_SANDBOX_REQUIRE_ISOLATION`` environment
    variable, which ``sandbox.require_isolation=true`` sets) raises :class:`IsolationUnavailable` instead of
    running without the whole OS boundary.
    """
    if not isinstance(code, str):
        raise TypeError(f"code must be str, not {type(code).__name__}")
    for name in preload:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"preload: not a module name: {name!r}")
    if require_isolation is None:
        require_isolation = isolation_required()
    if require_isolation:
        require(isolation)
    start = time.monotonic()
    try:
        return _run(code, limits, start, isolation, tuple(preload))
    except Exception as exc:  # the sandbox itself failed (no fork, disk full, ...)
        return SandboxResult(
            stdout="",
            stderr="",
            exit_code=-1,
            timed_out=False,
            error_kind="sandbox_error",
            error=f"SandboxError: {type(exc).__name__}: {exc}",
            wall_s=time.monotonic() - start,
        )


def _run(code: str, limits: SandboxLimits, start: float, isolation: bool, preload: tuple[str, ...]) -> SandboxResult:
    cpu_s = max(1, int(-(-limits.cpu_s // 1)))  # RLIMIT_CPU has whole seconds
    walls = boundary()
    with tempfile.TemporaryDirectory(prefix="toolwise-sandbox-", ignore_cleanup_errors=True) as base:
        base = os.path.realpath(base)
        # The code file sits next to, not inside, the writable directory so
        # the user code cannot rewrite it; reading it back is harmless.
        work = os.path.join(base, "work")
        os.mkdir(work, 0o700)
        code_path = os.path.join(base, "code.py")
        with open(code_path, "wb") as f:
            f.write(code.encode("utf-8", "surrogatepass"))
        read_only = [code_path]
        filter_path = ""
        if walls.seccomp is not None:
            filter_path = os.path.join(base, "seccomp.bpf")
            with open(filter_path, "wb") as f:
                f.write(walls.seccomp)
            read_only.append(filter_path)
        wrapper = []
        if isolation and walls.bwrap is not None:
            wrapper = bwrap_argv(walls.bwrap, work=work, read_only=tuple(read_only),
                                 work_bytes=limits.max_total_bytes)
        report_r, report_w = os.pipe()
        try:
            argv = [
                *wrapper,
                sys.executable, "-I", "-X", "utf8", "-u", "-c", _CHILD_SOURCE,
                work, code_path, str(report_w), str(limits.memory_mb * 1024 * 1024), str(cpu_s),
                str(limits.max_file_bytes), str(_NOFILE), repr(limits.wall_s + 2.0), ",".join(preload),
                str(limits.max_total_bytes), filter_path,
            ]
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work, "TMPDIR": work,
                   # One BLAS/OpenMP thread: a pool per core would not fit RLIMIT_AS on a many-core host.
                   "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            if wrapper:  # bwrap --clearenv: the child's environment is set inside, from these
                argv[len(wrapper) - 1:len(wrapper) - 1] = [a for k, v in env.items() for a in ("--setenv", k, v)]
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=work,
                    env=env,
                    pass_fds=(report_w,),
                    close_fds=True,
                    start_new_session=True,
                )
            finally:
                os.close(report_w)
            try:
                return _supervise(proc, report_r, limits, cpu_s, start, bool(preload), bool(wrapper))
            finally:
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
        finally:
            os.close(report_r)


def _supervise(proc: subprocess.Popen, report_r: int, limits: SandboxLimits, cpu_s: int,
               start: float, preloading: bool, wrapped: bool) -> SandboxResult:
    try:  # the bwrap wrapper (if any) is not under the child's own RLIMIT_CORE
        resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass
    # The code's wall-clock limit starts at the child's "+ready" line, once it is set up; until then
    # start-up (with preloading: its own allowance) counts.
    deadline = start + limits.wall_s + (_PRELOAD_WALL_S if preloading else 0.0)
    ready = False
    cpu_offset = 0
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: [], report_r: []}
    total_output = 0
    report_bytes = 0
    timed_out = output_limited = False

    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map() and not (timed_out or output_limited):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(remaining):
                fd = key.fd
                data = os.read(fd, _READ_CHUNK)
                if not data:
                    sel.unregister(fd)
                elif fd == report_r:
                    if report_bytes < _MAX_REPORT_BYTES:
                        chunks[fd].append(data)
                    report_bytes += len(data)
                    if not ready:
                        # The bootstrap writes this before any user code runs, so the first one is its own.
                        ready_at = _ready_offset(b"".join(chunks[fd]))
                        if ready_at is not None:
                            ready, cpu_offset = True, ready_at
                            deadline = time.monotonic() + limits.wall_s
                else:
                    room = limits.max_output_bytes - total_output
                    chunks[fd].append(data[:max(room, 0)])
                    total_output += len(data)
                    if total_output > limits.max_output_bytes:
                        output_limited = True
                        break

    # Pipes are closed; the child may still be running (it can close its own
    # stdout), so wait for it until the deadline.
    status = rusage = None
    delay = 0.001
    while not (timed_out or output_limited):
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        status = None
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    # Always kill the group before reaping: while the leader is unreaped its
    # process-group id cannot be reused, so this never hits a stranger.
    _kill_group(proc.pid)
    if status is None:
        _, status, rusage = os.wait4(proc.pid, 0)
    returncode = os.waitstatus_to_exitcode(status)
    proc.returncode = returncode  # we reaped it ourselves; keeps Popen quiet
    cpu_used = rusage.ru_utime + rusage.ru_stime

    stdout = b"".join(chunks[out_fd]).decode("utf-8", "replace")
    stderr = b"".join(chunks[err_fd]).decode("utf-8", "replace")
    report = _parse_report(b"".join(chunks[report_r]))

    def result(exit_code: int, kind: str | None, error: str | None) -> SandboxResult:
        return SandboxResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=exit_code,
            timed_out=kind == "timeout",
            error_kind=kind,
            error=error,
            wall_s=time.monotonic() - start,
        )

    if output_limited:
        return result(returncode, "output_limit",
                      f"OutputLimitError: output exceeded {limits.max_output_bytes} bytes")
    if timed_out:
        return result(returncode, "timeout", f"TimeoutError: wall-clock limit of {limits.wall_s:g}s exceeded")
    if report is not None:
        return result(report["exit_code"], report["kind"], report["error"])
    signum = -returncode if returncode < 0 else 0
    if wrapped and returncode > 128 and ready:
        # bwrap exits with 128 + N when the child it waits for was killed by signal N.
        signum = returncode - 128
    if signum:
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu_used >= cpu_offset + cpu_s - 0.05):
            return result(returncode, "timeout", f"TimeoutError: CPU time limit of {cpu_s}s exceeded")
        if signum == signal.SIGKILL:
            # Not us, not the CPU limit: the kernel's OOM killer.
            return result(returncode, "memory", "MemoryError: process killed by the kernel (out of memory)")
        return result(returncode, "crash", f"ProcessCrashed: killed by {_signal_name(signum)}")
    if returncode == 124:
        # Only the child's watchdog exits with 124 without a report, and it
        # fires after the wall-clock limit the parent enforces anyway.
        return result(returncode, "timeout", f"TimeoutError: wall-clock limit of {limits.wall_s:g}s exceeded")
    if returncode == 0:
        return result(0, None, None)
    if not ready:
        # The child never reached the code (its "+ready" line comes first): bwrap or the interpreter failed to
        # start, e.g. the host stopped allowing namespaces after the probe.
        return result(returncode, "sandbox_error", "SandboxError: " + (stderr.strip() or f"exit {returncode}"))
    return result(returncode, "exit", f"SystemExit: {returncode}")


def _ready_offset(raw: bytes) -> int | None:
    """The CPU seconds of set-up from the child's ``+ready <n>`` line, or None before it arrived."""
    at = raw.find(b"\n+ready ")
    end = raw.find(b"\n", at + 1)
    if at < 0 or end < 0:
        return None
    try:
        return max(0, int(raw[at + 8:end].decode("ascii"), 10))
    except (UnicodeDecodeError, ValueError):
        return None


_KINDS = {"timeout", "memory", "forbidden", "exception", "exit", "sandbox_error"}


def _parse_report(raw: bytes) -> dict | None:
    """Validate the child's report; a forged or garbled one counts as absent.

    The report is the last line ``<kind or -> <exit code> <UTF-8 error as hex or ->`` (ASCII): the child
    builds it without json, whose Python code user code can break by rebinding builtins.
    """
    fields = raw.rstrip(b"\n").rsplit(b"\n", 1)[-1].split(b" ")
    if len(fields) != 3:
        return None
    kind_raw, code_raw, error_raw = fields
    try:
        kind = None if kind_raw == b"-" else kind_raw.decode("ascii")
        exit_code = int(code_raw.decode("ascii"), 10)
        error = None if error_raw == b"-" else bytes.fromhex(error_raw.decode("ascii")).decode("utf-8")
    except (UnicodeDecodeError, ValueError):
        return None
    if kind is not None and kind not in _KINDS:
        return None
    return {"kind": kind, "error": error, "exit_code": exit_code}
