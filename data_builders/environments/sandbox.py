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
2. **Linux namespaces, when available** (``unshare --net --pid --ipc --uts
   --mount --mount-proc --fork --kill-child``; probed once, used only if it
   works, never required). A fresh network namespace has no interfaces besides
   a down loopback, a PID namespace hides (and makes unsignalable) every
   process outside it and kills all of its processes when the child exits, and
   the private ``/proc`` stops the child reading the harness's environment.
   This is defence in depth for the case where the audit hook (layer 4) is
   bypassed by a bug in CPython; the hook must and does stand on its own, and
   the test-suite runs representative attacks with the namespaces disabled.
3. **Resource limits** set in the child before any user code: ``RLIMIT_AS``
   (memory: allocations fail with ``MemoryError``), ``RLIMIT_CPU`` (soft limit
   raises a catchable time-out via SIGXCPU; hard limit one second later is an
   uncatchable SIGKILL, which also covers long C-level operations such as
   ``9**9**9`` that never return to the interpreter loop), ``RLIMIT_FSIZE``
   (a single file cannot grow past ``max_file_bytes``: CPython ignores SIGXFSZ,
   so the write fails with ``EFBIG``), ``RLIMIT_NOFILE`` and ``RLIMIT_CORE=0``.
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
     harness);
   * networking: creating any socket except ``AF_UNIX`` (``asyncio`` needs a
     socketpair for its self-pipe), any ``connect``/``bind``/``sendto``, and
     name resolution;
   * native code that would run below the hook: importing ``ctypes``,
     ``cffi``, ``_posixshmem`` (files in ``/dev/shm``), ``_sqlite3`` (``ATTACH``
     creates files without an audit event), ``_dbm``/``_gdbm``, ``readline``,
     ``syslog``, ``psutil``, sub-interpreters and the ``_test*`` modules, and
     any ``ctypes.*`` event;
   * filesystem writes outside the sandbox directory: ``open``/``os.open``
     with a write, create, truncate or append flag, ``os.remove``/``unlink``,
     ``rename``/``replace``, ``mkdir``, ``rmdir``, ``shutil.rmtree``,
     ``chmod``, ``chown``, ``utime``, ``truncate``, ``setxattr``,
     ``removexattr``; ``os.symlink`` and ``os.link`` are refused everywhere,
     which keeps the sandbox directory free of links, so a lexical path check
     against the real sandbox path is exact. Reading files is allowed (the
     standard library needs it), except that ``os.open`` of a *directory*
     outside the sandbox is refused, because ``os.open`` does not report
     ``dir_fd`` to the hook and an outside directory descriptor would make a
     relative path land outside; for the same reason an ``os.open`` write
     through a relative path with a ``..`` component is refused;
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
   ``os.chroot``, ``os.nice``/``setpriority``/``sched_set*`` (starve the
   harness) and ``signal.pidfd_send_signal`` (signal other processes). The
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
same ``"<Class>: <msg>"`` shape for the other kinds. ``stdout`` is exactly what
was written (partial output is kept on every failure), ``stderr`` holds the
traceback as CPython would print it.

Known gaps: the audit hook is not a security boundary by CPython's own
documentation: a memory-corruption bug in CPython or in a third-party
extension module (any native module that is not on the deny-list can make
unaudited system calls) defeats layers 4 and 5, and then only layers 1 to 3
remain. Two narrow thread races remain in the hook (a ``pathlib`` object
whose cached string is changed between check and use; renaming directories
inside the sandbox while another thread's ``..`` path is being resolved).
Reads are unrestricted: the child runs with the harness's user id and can read
whatever that user can (mitigated by the private ``/proc`` and by having no
network). Disk use inside the sandbox directory is bounded per file, not in
total.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

__all__ = ["SandboxLimits", "SandboxResult", "run_python"]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. ``cpu_s`` is rounded up to whole seconds (RLIMIT_CPU)."""

    wall_s: float = 5.0
    cpu_s: float = 5.0
    memory_mb: int = 512
    max_output_bytes: int = 1_000_000
    max_file_bytes: int = 10_000_000


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

# Runs in the child as ``python -I -X utf8 -u -c _BOOTSTRAP <args>``. It is a
# single function so that nothing it binds is left in a module namespace the
# user code can reach, except through frames (harmless: the hook does not
# depend on any of it).
_BOOTSTRAP = r'''
def _sandbox_bootstrap(argv):
    import sys, posix, resource, signal, _signal, _imp, builtins, json, traceback, threading, time
    import pathlib, stat as _stat_mod, _posixsubprocess

    root, code_path = argv[1], argv[2]
    report_fd, mem_bytes, cpu_s, fsize, nofile = (int(a) for a in argv[3:8])
    watchdog_s = float(argv[8])
    _write, _exit, _out, _err = posix.write, posix._exit, sys.stdout, sys.stderr

    _dumps = json.dumps

    def report(kind, error, code):
        # Whatever the user code broke (stdout, json, builtins), the process
        # must end here: the exit status is the fallback report.
        try:
            _out.flush()
            _err.flush()
        except BaseException:
            pass
        try:
            # Own line, so anything the user wrote to this pipe before is ignored.
            data = ("\n" + _dumps({"kind": kind, "error": error, "exit_code": code}) + "\n").encode("utf-8", "replace")
            while data:
                data = data[_write(report_fd, data):]
        except BaseException:
            pass
        _exit(code)

    # Layer 3: resource limits. Fail closed: a limit that can't be set aborts.
    try:
        R = resource
        R.setrlimit(R.RLIMIT_AS, (mem_bytes, mem_bytes))
        R.setrlimit(R.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        R.setrlimit(R.RLIMIT_FSIZE, (fsize, fsize))
        R.setrlimit(R.RLIMIT_NOFILE, (nofile, nofile))
        R.setrlimit(R.RLIMIT_CORE, (0, 0))
        with open(code_path, "rb") as f:
            source = f.read().decode("utf-8", "surrogatepass")
    except BaseException as exc:
        report("sandbox_error", "SandboxError: %s: %s" % (type(exc).__name__, exc), 70)

    # Layer 5: import every built-in module now, so that a later import of one
    # means someone removed it from sys.modules to get a pristine copy.
    for name in sys.builtin_module_names:
        if name not in sys.modules:
            try:
                __import__(name)
            except Exception:
                pass

    def denied_function(what):
        def denied(*args, **kwargs):
            raise PermissionError("[sandbox] %s is not allowed" % what)
        return denied

    os_mod = sys.modules["os"]
    for name in ("mknod", "mkfifo", "setsid", "setpgid", "setpgrp", "chroot", "nice",
                 "setpriority", "sched_setscheduler", "sched_setparam", "login_tty", "tcsetpgrp"):
        for mod in (posix, os_mod):
            if hasattr(mod, name):
                setattr(mod, name, denied_function("os." + name))
    for mod in (_signal, signal):
        if hasattr(mod, "pidfd_send_signal"):
            mod.pidfd_send_signal = denied_function("signal.pidfd_send_signal")
    _posixsubprocess.fork_exec = denied_function("_posixsubprocess.fork_exec")
    _imp.create_builtin = denied_function("re-creating a built-in module")
    _imp.exec_builtin = denied_function("re-executing a built-in module")

    # Layer 4: the audit hook. No helper below has a closure or reads a
    # global: everything arrives through positional defaults, which live in an
    # immutable tuple (reassigning __defaults__ is itself audited and refused).
    # Closures would not do: traceback frames expose the helper functions and
    # a closure cell can be rewritten without any audit event.
    def _deny(what, PermissionError=PermissionError):
        raise PermissionError("[sandbox] " + what)

    def _text(path, what, deny=_deny, isinstance=isinstance, type=type, str=str, bytes=bytes,
              exact_s=str.__getitem__, exact_b=bytes.__getitem__, decode=bytes.decode,
              full=slice(None), posix_path=pathlib.PosixPath, pure_posix_path=pathlib.PurePosixPath,
              fspath_fn=pathlib.PurePath.__fspath__, str_fn=pathlib.PurePath.__str__,
              str_slot=pathlib.PurePath._str):
        # Exact str content, never user code: a user __fspath__ could answer one
        # path to this check and another to the real system call.
        if isinstance(path, str):
            return exact_s(path, full)
        if isinstance(path, bytes):
            return decode(exact_b(path, full), "utf-8", "surrogateescape")
        cls = type(path)
        if (cls is posix_path or cls is pure_posix_path) and cls.__fspath__ is fspath_fn and cls.__str__ is str_fn:
            # Unmodified pathlib caches the string it handed to the system
            # call; read that cache instead of calling anything.
            try:
                text = str_slot.__get__(path, cls)
            except AttributeError:
                text = None
            if type(text) is str:
                return text
        deny(what + " through a path object of type " + cls.__name__)

    def _fd_target(fd, what, deny=_deny, readlink=posix.readlink, str=str, exact_i=int.__add__,
                   TypeError=TypeError, OSError=OSError):
        try:
            fd = exact_i(fd, 0)
            target = readlink("/proc/self/fd/" + str(fd))
        except (TypeError, OSError):
            deny(what + " through a descriptor that can't be resolved")
        if not target.startswith("/"):
            deny(what + " through a descriptor that is not a file (" + target + ")")
        return target

    def _absolute(path, dir_fd, what, deny=_deny, text_of=_text, fd_target=_fd_target,
                  getcwd=posix.getcwd, normpath=posix._path_normpath, OSError=OSError):
        text = text_of(path, what)
        if text.startswith("/"):
            return normpath(text)
        if dir_fd is None or dir_fd == -1 or dir_fd == -100:  # unset or AT_FDCWD
            try:
                base = getcwd()
            except OSError:
                deny(what + " relative to a deleted working directory")
        else:
            base = fd_target(dir_fd, what)
        return normpath(base + "/" + text)

    def _check_write(path, dir_fd, what, deny=_deny, isinstance=isinstance, int=int,
                     fd_target=_fd_target, absolute=_absolute, root=root, root_slash=root + "/"):
        if isinstance(path, int):
            target = fd_target(path, what)
        else:
            target = absolute(path, dir_fd, what)
        if not (target == root or target.startswith(root_slash)):
            deny(what + " outside the sandbox directory: " + target)
        return target

    def _hook(event, args,
              deny=_deny, text_of=_text, absolute=_absolute, check_write=_check_write,
              isinstance=isinstance, type=type, str=str, int=int, OSError=OSError,
              exact_s=str.__getitem__, full=slice(None), root=root, root_slash=root + "/",
              pstat=posix.stat, getpid=posix.getpid, S_ISDIR=_stat_mod.S_ISDIR, S_ISREG=_stat_mod.S_ISREG,
              write_flags=posix.O_WRONLY | posix.O_RDWR | posix.O_CREAT | posix.O_TRUNC | posix.O_APPEND,
              always_denied=frozenset({
                  "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                  "subprocess.Popen", "pty.spawn", "os.killpg", "os.symlink", "os.link",
                  "sys.addaudithook", "resource.setrlimit", "resource.prlimit",
                  "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                  "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
                  "socket.gethostbyaddr", "socket.getnameinfo", "socket.sethostname",
                  "sqlite3.enable_load_extension", "sqlite3.load_extension", "webbrowser.open",
              }),
              # event -> ((index of a path argument, index of its dir_fd or -1), ...)
              path_events=(
                  ("os.remove", ((0, 1),)), ("os.rmdir", ((0, 1),)), ("os.mkdir", ((0, 2),)),
                  ("os.chmod", ((0, 2),)), ("os.chown", ((0, 3),)), ("os.utime", ((0, 3),)),
                  ("os.truncate", ((0, -1),)), ("os.setxattr", ((0, -1),)),
                  ("os.removexattr", ((0, -1),)), ("shutil.rmtree", ((0, 1),)),
                  ("os.rename", ((0, 2), (1, 3))),
              ),
              denied_setattr=frozenset({"__code__", "__defaults__", "__kwdefaults__"}),
              own_functions=(_deny, _text, _fd_target, _absolute, _check_write),
              denied_imports=frozenset({
                  "ctypes", "_ctypes", "_ctypes_test", "cffi", "_cffi_backend", "_posixshmem",
                  "_sqlite3", "_dbm", "_gdbm", "readline", "syslog", "psutil", "_psutil_linux",
                  "_psutil_posix", "_xxsubinterpreters", "_xxinterpchannels", "_posixsubprocess",
              } | frozenset(sys.builtin_module_names))):
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                return  # wraps a descriptor that is already open
            writing = not isinstance(flags, int) or (flags & write_flags) != 0
            if isinstance(mode, str):
                mode = exact_s(mode, full)
                writing = writing or "w" in mode or "a" in mode or "x" in mode or "+" in mode
            elif mode is not None:
                writing = True
            if writing:
                target = check_write(path, None, "writing")
                # os.open hides its dir_fd from the hook: a relative '..' could
                # climb out of a directory descriptor the check can't see.
                if mode is None and not text_of(path, "writing").startswith("/") \
                        and ".." in text_of(path, "writing").split("/"):
                    deny("os.open for writing through a relative path with '..'")
                try:
                    st = pstat(target)
                except OSError:
                    return
                if not (S_ISREG(st.st_mode) or S_ISDIR(st.st_mode)):
                    deny("writing to a file that is not a regular file: " + target)
            elif mode is None:
                # A descriptor for an outside directory would be a dir_fd that
                # lets a later os.open(..., dir_fd=fd) write outside unseen.
                target = absolute(path, None, "os.open")
                if not (target == root or target.startswith(root_slash)):
                    try:
                        st = pstat(target)
                    except OSError:
                        return
                    if S_ISDIR(st.st_mode):
                        deny("opening a directory outside the sandbox: " + target)
            return
        for name, spec in path_events:
            if event == name:
                for path_index, fd_index in spec:
                    check_write(args[path_index], None if fd_index < 0 else args[fd_index], event)
                return
        if event in always_denied:
            deny(event + " is not allowed")
        if event == "import":
            name = args[0]
            if isinstance(name, str):
                top = exact_s(name, full).split(".")[0]
                if top in denied_imports or top.startswith("_test"):
                    deny("import of " + top + " is not allowed")
            return
        if event == "object.__setattr__":
            # Only the hook's helpers are protected (traceback frames expose
            # them); namedtuple and others legitimately set __defaults__.
            if isinstance(args[1], str) and exact_s(args[1], full) in denied_setattr:
                for function in own_functions:
                    if args[0] is function:
                        deny("replacing the sandbox's " + exact_s(args[1], full) + " is not allowed")
            return
        if event == "socket.__new__":
            if args[1] != 1:  # only AF_UNIX: asyncio's self-pipe is a socketpair
                deny("creating a network socket is not allowed")
            return
        if event == "socket.sendto" or event == "socket.sendmsg":
            if args[1] is not None:
                deny(event + " to an address is not allowed")
            return
        if event == "os.kill":
            if type(args[0]) is not int or args[0] != getpid():
                deny("os.kill of another process is not allowed")
            return
        if event.startswith("ctypes."):
            deny(event + " is not allowed")

    sys.addaudithook(_hook)
    del _hook, _deny, _text, _fd_target, _absolute, _check_write

    # The CPU soft limit becomes a catchable error with partial output; the
    # hard limit (one second later) still kills code that ignores or swallows it.
    cpu_hit = []

    def on_sigxcpu(signum, frame):
        cpu_hit.append(True)
        raise TimeoutError("CPU time limit exceeded")

    signal.signal(signal.SIGXCPU, on_sigxcpu)

    # A harness that dies mid-run can't enforce the wall-clock limit any more.
    def watchdog(sleep=time.sleep, exit=_exit):
        sleep(watchdog_s)
        exit(124)

    threading.Thread(target=watchdog, daemon=True, name="sandbox-watchdog").start()

    # Classification below must survive user code that rebinds builtins.
    def chain(exc, len=len, any=any):
        seen = []
        while exc is not None and len(seen) < 100 and not any(exc is s for s in seen):
            seen.append(exc)
            yield exc
            exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__

    def describe(exc, type=type, BaseException=BaseException):
        try:
            return "%s: %s" % (type(exc).__name__, exc)
        except BaseException:
            return "%s: <unprintable>" % type(exc).__name__

    def classify(exc, chain=chain, isinstance=isinstance, str=str, MemoryError=MemoryError,
                 PermissionError=PermissionError):
        for link in chain(exc):
            if isinstance(link, MemoryError):
                return "memory"
            if isinstance(link, PermissionError) and link.args and str(link.args[0]).startswith("[sandbox]"):
                return "forbidden"
        return "exception"

    _isinstance, _int, _TimeoutError, _type, _BaseException = isinstance, int, TimeoutError, type, BaseException
    _compile, _exec, _print_exception = compile, exec, traceback.print_exception

    sys.argv = [""]
    try:
        _exec(_compile(source, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            report(None, None, 0)
        if _isinstance(code, _int):
            report("exit", "SystemExit: %d" % code, code & 0xFF or 1)
        try:
            _err.write("%s\n" % (code,))
        except _BaseException:
            pass
        report("exit", describe(exc), 1)
    except _BaseException as exc:
        try:
            _print_exception(_type(exc), exc, exc.__traceback__.tb_next, file=_err)
        except _BaseException:
            pass
        if cpu_hit and _isinstance(exc, _TimeoutError):
            report("timeout", "TimeoutError: CPU time limit of %ds exceeded" % cpu_s, 1)
        try:
            kind = classify(exc)
        except _BaseException:
            kind = "exception"
        report(kind, describe(exc), 1)
    report(None, None, 0)


import sys
_sandbox_bootstrap(sys.argv)
'''


_namespace_lock = threading.Lock()
_namespace_cache: list[str] | None = None


def _probe_namespaces() -> list[str]:
    """Return the ``unshare`` prefix that works here, or ``[]`` (layer 2 is optional)."""
    exe = shutil.which("unshare")
    if exe is None or os.geteuid() != 0:
        return []
    check = "import os; raise SystemExit(0 if os.getpid() == 1 else 3)"
    candidates = (
        [exe, "--net", "--pid", "--ipc", "--uts", "--mount", "--mount-proc", "--fork", "--kill-child", "--"],
        [exe, "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--"],
    )
    for prefix in candidates:
        try:
            done = subprocess.run(
                [*prefix, sys.executable, "-I", "-S", "-c", check],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return []


def _namespace_prefix() -> list[str]:
    global _namespace_cache
    with _namespace_lock:
        if _namespace_cache is None:
            _namespace_cache = _probe_namespaces()
        return list(_namespace_cache)


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


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run ``code`` in a fresh sandboxed interpreter; see the module docstring."""
    if not isinstance(code, str):
        raise TypeError(f"code must be str, not {type(code).__name__}")
    start = time.monotonic()
    try:
        return _run(code, limits, start)
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


def _run(code: str, limits: SandboxLimits, start: float) -> SandboxResult:
    cpu_s = max(1, int(-(-limits.cpu_s // 1)))  # RLIMIT_CPU has whole seconds
    with tempfile.TemporaryDirectory(prefix="toolwise-sandbox-", ignore_cleanup_errors=True) as base:
        base = os.path.realpath(base)
        # The code file sits next to, not inside, the writable directory so
        # the user code cannot rewrite it; reading it back is harmless.
        work = os.path.join(base, "work")
        os.mkdir(work, 0o700)
        code_path = os.path.join(base, "code.py")
        with open(code_path, "wb") as f:
            f.write(code.encode("utf-8", "surrogatepass"))
        report_r, report_w = os.pipe()
        try:
            argv = [
                *_namespace_prefix(),
                sys.executable, "-I", "-X", "utf8", "-u", "-c", _BOOTSTRAP,
                work, code_path, str(report_w), str(limits.memory_mb * 1024 * 1024), str(cpu_s),
                str(limits.max_file_bytes), str(_NOFILE), repr(limits.wall_s + 2.0),
            ]
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work, "TMPDIR": work}
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
                return _supervise(proc, report_r, limits, cpu_s, start)
            finally:
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
        finally:
            os.close(report_r)


def _supervise(proc: subprocess.Popen, report_r: int, limits: SandboxLimits, cpu_s: int,
               start: float) -> SandboxResult:
    try:  # the unshare wrapper (if any) is not under the child's own RLIMIT_CORE
        resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass
    deadline = start + limits.wall_s
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
    if returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu_used >= cpu_s - 0.05):
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
    if stderr.startswith("unshare: "):
        # The namespace wrapper failed before Python started (the probe passed
        # earlier, so the host changed): the code never ran.
        return result(returncode, "sandbox_error", f"SandboxError: {stderr.strip()}")
    return result(returncode, "exit", f"SystemExit: {returncode}")


_KINDS = {None, "timeout", "memory", "forbidden", "exception", "exit", "sandbox_error"}


def _parse_report(raw: bytes) -> dict | None:
    """Validate the child's report; a forged or garbled one counts as absent."""
    lines = raw.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        report = json.loads(lines[-1].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("kind") not in _KINDS:
        return None
    error, exit_code = report.get("error"), report.get("exit_code")
    if not (error is None or isinstance(error, str)) or type(exit_code) is not int:
        return None
    return {"kind": report["kind"], "error": error, "exit_code": exit_code}
