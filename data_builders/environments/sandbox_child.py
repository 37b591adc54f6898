"""The sandbox's child program: ``sandbox.py`` runs this file's source as ``python -I -X utf8 -u -c <source> <args>``
in a fresh interpreter for every call (layers 3-5 of the module docstring of ``sandbox.py``; read it first).

The bootstrap is a single function so that nothing it binds is left in a module namespace the user code can
reach, except through frames (harmless: the hook does not depend on any of it); that is also why its imports
are inside it. No ``from __future__`` import here on purpose: ``compile`` hands this file's future flags on to
the user code, which must compile as plain Python. Importing this module (the environment registry imports
every module of the package) only defines the function.
"""


def _sandbox_bootstrap(argv):
    # why imports here: nothing the bootstrap binds may be left in a module namespace (module docstring)
    import sys, posix, resource, signal, _signal, _imp, traceback, threading, time, builtins, fcntl
    import pathlib, stat as _stat_mod, _posixsubprocess

    root, code_path = argv[1], argv[2]
    report_fd, mem_bytes, cpu_s, fsize, nofile = (int(a) for a in argv[3:8])
    watchdog_s = float(argv[8])
    preload = [name for name in argv[9].split(",") if name]
    disk_quota = int(argv[10])
    seccomp_path = argv[11]
    _write, _exit, _out, _err = posix.write, posix._exit, sys.stdout, sys.stderr

    def report(kind, error, code, BaseException=BaseException, encode=str.encode, hexlify=bytes.hex):
        # Whatever the user code broke (stdout, json, builtins), the process
        # must end here: the exit status is the fallback report. The report is
        # built from C methods bound here, not with json: json's Python code
        # looks up isinstance/str/... in builtins, which the user may have
        # replaced, and a lost report would turn "forbidden" into "exit".
        try:
            _out.flush()
            _err.flush()
        except BaseException:
            pass
        try:
            # Own line, so anything the user wrote to this pipe before is
            # ignored: "<kind or -> <exit code> <error as UTF-8 hex or ->".
            hex_error = "-" if error is None else hexlify(encode(error, "utf-8", "replace"))
            data = encode("\n%s %d %s\n" % (kind or "-", code, hex_error), "ascii")
            while data:
                data = data[_write(report_fd, data):]
        except BaseException:
            pass
        _exit(code)

    # Layer 3: resource limits. Fail closed: a limit that can't be set aborts.
    try:
        R = resource
        R.setrlimit(R.RLIMIT_AS, (mem_bytes, mem_bytes))
        # Preloading gets its own CPU allowance; the code's cpu_s is set after it (below).
        cpu_first = cpu_s + (20 if preload else 0)  # pandas alone takes ~1 s
        R.setrlimit(R.RLIMIT_CPU, (cpu_first, cpu_first + 1))
        R.setrlimit(R.RLIMIT_FSIZE, (fsize, fsize))
        R.setrlimit(R.RLIMIT_NOFILE, (nofile, nofile))
        R.setrlimit(R.RLIMIT_CORE, (0, 0))
        with open(code_path, "rb") as f:
            source = f.read().decode("utf-8", "surrogatepass")
    except BaseException as exc:
        report("sandbox_error", "SandboxError: %s: %s" % (type(exc).__name__, exc), 70)

    # Preloaded libraries (``run_python(preload=...)``): trusted library code, imported before the hook
    # is armed because numpy, pandas, scipy and sympy import ctypes and sqlite3 imports _sqlite3, which the
    # hook refuses. A library that is not installed is skipped, so the user's own import fails with
    # Python's ModuleNotFoundError. ctypes then leaves sys.modules: a later ``import ctypes`` is a fresh,
    # audited import again and is refused (the already-loaded ctypes classes stay reachable through the
    # libraries; see "Preloaded libraries" in sandbox.py's docstring).
    for name in preload:
        try:
            __import__(name)
        except Exception:
            pass
    # The code's CPU budget starts now; the parent learns the offset (its SIGKILL classification) and
    # starts the code's wall-clock limit from this line.
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu_offset = int(usage.ru_utime + usage.ru_stime) + 1 if preload else 0
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_offset + cpu_s, cpu_offset + cpu_s + 1))
        ready = ("\n+ready %d\n" % cpu_offset).encode("ascii")
        while ready:
            ready = ready[_write(report_fd, ready):]
    except BaseException as exc:
        report("sandbox_error", "SandboxError: %s: %s" % (type(exc).__name__, exc), 70)

    # The seccomp filter (isolation.py), once the limits are final (it refuses raising them): from here on no
    # execve, fork, memfd or network socket, whatever the code loads. Loaded through ctypes, which is still
    # trusted here and leaves sys.modules just below; a filter that can't be loaded ends the run (fail
    # closed) rather than running the code without it.
    if seccomp_path:
        try:
            import ctypes

            with open(seccomp_path, "rb") as f:
                program = f.read()

            class SockFprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            libc = ctypes.CDLL(None, use_errno=True)
            buffer = ctypes.create_string_buffer(program, len(program))
            fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
            PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
            if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
                    libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
            del libc, buffer, fprog, SockFprog, program
        except BaseException as exc:
            report("sandbox_error", "SandboxError: seccomp: %s: %s" % (type(exc).__name__, exc), 70)
    for name in [name for name in sys.modules if name in ("ctypes", "_ctypes") or name.startswith("ctypes.")]:
        del sys.modules[name]

    # Layer 5: import every built-in module now, so that a later import of one
    # means someone removed it from sys.modules to get a pristine copy. Their
    # import-time warnings are not the code's output: Debian's python3 builds
    # deprecated modules in (spwd, crypt, ...), whose import warns on stderr.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sys.builtin_module_names:
            if name not in sys.modules:
                try:
                    __import__(name)
                except Exception:
                    pass

    def denied_function(what):
        # PermissionError bound here: user code may rebind builtins.PermissionError.
        def denied(*args, _PermissionError=PermissionError, **kwargs):
            raise _PermissionError("[sandbox] %s is not allowed" % what)
        return denied

    os_mod = sys.modules["os"]
    # sched_setaffinity has no audit event and, without a PID namespace, can
    # pin any process of the same user (or any process, as root) to one CPU.
    for name in ("mknod", "mkfifo", "setsid", "setpgid", "setpgrp", "chroot", "nice",
                 "setpriority", "sched_setscheduler", "sched_setparam", "sched_setaffinity",
                 "login_tty", "tcsetpgrp"):
        for mod in (posix, os_mod):
            if hasattr(mod, name):
                setattr(mod, name, denied_function("os." + name))
    for mod in (_signal, signal):
        if hasattr(mod, "pidfd_send_signal"):
            mod.pidfd_send_signal = denied_function("signal.pidfd_send_signal")
    _posixsubprocess.fork_exec = denied_function("_posixsubprocess.fork_exec")
    _imp.create_builtin = denied_function("re-creating a built-in module")
    _imp.exec_builtin = denied_function("re-executing a built-in module")

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
              str_slot=pathlib.PurePath._str, dir_entry=posix.DirEntry):
        # Exact str content, never user code: a user __fspath__ could answer one
        # path to this check and another to the real system call.
        if isinstance(path, str):
            return exact_s(path, full)
        if isinstance(path, bytes):
            return decode(exact_b(path, full), "utf-8", "surrogateescape")
        cls = type(path)
        if cls is dir_entry:
            # os.DirEntry can't be subclassed and its path is a C member: no user code runs.
            path = path.path
            if type(path) is str:
                return path
            return decode(path, "utf-8", "surrogateescape")
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

    try:
        _proc = posix.stat("/proc")
        proc_id = (_proc.st_dev, _proc.st_ino)
    except OSError:  # no procfs here: nothing to hide, and no (dev, ino) matches this
        proc_id = (-1, -1)

    def _resolve(path, what, deny=_deny, lstat=posix.lstat, readlink=posix.readlink, getpid=posix.getpid,
                 S_ISLNK=_stat_mod.S_ISLNK, OSError=OSError, proc_dev=proc_id[0], proc_ino=proc_id[1],
                 root=root, root_slash=root + "/"):
        # Checks the absolute, *unnormalised* path ``path`` the way the kernel
        # resolves it: symlinks, including /proc's magic links (/proc/self/root
        # -> /), are followed and '..' applies to the resolved directory, so no
        # route (/proc/self/root/proc/N, /dev/fd/../../N) hides where it goes.
        # Refused: (1) /proc/<pid>/... of another process (environ holds the
        # harness's secrets when there is no PID namespace; a procfs root is
        # recognised by device and inode, wherever mounted); (2) '..' applied
        # to a directory inside the sandbox: a directory reached through the
        # working directory or a descriptor can be moved by another thread
        # between this check and the system call, and then the same number of
        # '..' climbs elsewhere (outside). Nothing else needs '..' there.
        own = "%d" % getpid()
        pending = path.split("/")[::-1]
        resolved = ""
        in_proc_root = False
        hops = 0
        while pending:
            name = pending.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                if resolved == root or resolved.startswith(root_slash):
                    deny(what + " through '..' inside the sandbox directory: " + path)
                resolved = resolved[:resolved.rfind("/")]
                try:
                    st = lstat(resolved or "/")
                    in_proc_root = st.st_dev == proc_dev and st.st_ino == proc_ino
                except OSError:
                    in_proc_root = False
                continue
            if in_proc_root and name.isdigit() and name != own:
                deny(what + " another process's /proc entries: " + path)
            candidate = resolved + "/" + name
            try:
                st = lstat(candidate)
            except OSError:  # does not exist (yet): the rest is taken as written
                resolved, in_proc_root = candidate, False
                continue
            if S_ISLNK(st.st_mode):
                hops += 1
                if hops > 40:
                    deny(what + " through too many symbolic links: " + path)
                try:
                    target = readlink(candidate)
                except OSError:
                    target = ":"
                # Magic links to non-files read like "pipe:[12]" and are opened
                # as the object itself, not by path.
                if target.startswith("/"):
                    resolved, in_proc_root = "", False
                    pending.extend(target.split("/")[::-1])
                    continue
                if ":" not in target:
                    pending.extend(target.split("/")[::-1])
                    continue
            resolved = candidate
            in_proc_root = st.st_dev == proc_dev and st.st_ino == proc_ino

    def _absolute(path, dir_fd, what, deny=_deny, text_of=_text, fd_target=_fd_target,
                  getcwd=posix.getcwd, normpath=posix._path_normpath, OSError=OSError):
        # (normalised absolute path, the same before normalisation for _resolve)
        text = text_of(path, what)
        if text.startswith("/"):
            return normpath(text), text
        if dir_fd is None or dir_fd == -1 or dir_fd == -100:  # unset or AT_FDCWD
            try:
                base = getcwd()
            except OSError:
                deny(what + " relative to a deleted working directory")
        else:
            base = fd_target(dir_fd, what)
        return normpath(base + "/" + text), base + "/" + text

    def _check_write(path, dir_fd, what, deny=_deny, isinstance=isinstance, int=int,
                     fd_target=_fd_target, absolute=_absolute, resolve=_resolve, root=root, root_slash=root + "/"):
        raw = None
        if isinstance(path, int):
            target = fd_target(path, what)
        else:
            target, raw = absolute(path, dir_fd, what)
        if not (target == root or target.startswith(root_slash)):
            deny(what + " outside the sandbox directory: " + target)
        if raw is not None:
            resolve(raw, what)
        return target

    def _quota(target, adding, what, scandir=posix.scandir, listdir=posix.listdir, fstat=posix.fstat,
               lstat=posix.lstat, fcntl_fn=fcntl.fcntl, F_GETFL=fcntl.F_GETFL, O_ACCMODE=posix.O_ACCMODE,
               O_RDONLY=posix.O_RDONLY, S_ISREG=_stat_mod.S_ISREG, int=int, max=max, OSError=OSError,
               EDQUOT=122, root=root, quota=disk_quota, fsize=fsize, block=4096):
        # RLIMIT_FSIZE caps each file; this caps the directory. No write() is audited, so the bound is taken when
        # a file is opened for writing (or truncated, or a directory made): what every entry holds now (at least
        # a block each: empty files and directories cost an inode), plus, for each regular file this process
        # holds open for writing, the room RLIMIT_FSIZE leaves it, plus ``adding``. A closed file cannot grow
        # without passing here again. Stateless (the kernel's descriptor table, not a set the code could reach
        # through a frame and clear), so tampering has nothing to change.
        used, stack = adding, [root]
        while stack:
            with scandir(stack.pop()) as entries:
                for entry in entries:
                    st = entry.stat(follow_symlinks=False)
                    used += max(block, -(-st.st_size // block) * block)
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        for name in listdir("/proc/self/fd"):
            try:
                fd = int(name)
                writable = fcntl_fn(fd, F_GETFL) & O_ACCMODE != O_RDONLY
                st = fstat(fd)
            except OSError:       # the listing's own descriptor, closed by now
                continue
            if writable and S_ISREG(st.st_mode):
                # deleted but still open: its bytes are on disk and in no directory
                used += max(fsize - st.st_size, 0) + (st.st_size if st.st_nlink == 0 else 0)
        if used > quota:
            raise OSError(EDQUOT, "Disk quota exceeded: %s would let the sandbox directory hold %d bytes, over "
                                  "its %d-byte quota" % (what, used, quota), target)

    def _sqlite_authorizer(action, arg1, arg2, db_name, source, str=str, type=type, lower=str.lower,
                           exact_s=str.__getitem__, full=slice(None), in_memory=("", ":memory:"),
                           store_pragmas=("temp_store_directory", "data_store_directory")):
        # SQLite opens these files itself, with no audit event: ATTACH and VACUUM INTO (both reported as
        # SQLITE_ATTACH, 24) of a file, and the PRAGMAs (19) that move its temporary files elsewhere.
        if action == 24:
            return 0 if type(arg1) is str and exact_s(arg1, full) in in_memory else 1
        if action == 19 and type(arg1) is str and lower(exact_s(arg1, full)) in store_pragmas:
            return 1
        return 0

    def _hook(event, args,
              deny=_deny, text_of=_text, absolute=_absolute, resolve=_resolve, check_write=_check_write, quota=_quota,
              fsize=fsize, block=4096, max=max,
              isinstance=isinstance, type=type, str=str, int=int, OSError=OSError,
              exact_s=str.__getitem__, full=slice(None), root=root, root_slash=root + "/",
              pstat=posix.stat, getpid=posix.getpid,
              S_ISDIR=_stat_mod.S_ISDIR, S_ISREG=_stat_mod.S_ISREG,
              write_flags=posix.O_WRONLY | posix.O_RDWR | posix.O_CREAT | posix.O_TRUNC | posix.O_APPEND,
              always_denied=frozenset({
                  "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                  "subprocess.Popen", "pty.spawn", "os.killpg", "os.symlink", "os.link",
                  "sys.addaudithook", "resource.setrlimit", "resource.prlimit",
                  "gc.get_objects", "gc.get_referrers", "gc.get_referents",
                  "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
                  "socket.gethostbyaddr", "socket.getnameinfo", "socket.sethostname",
                  "sqlite3.enable_load_extension", "sqlite3.load_extension", "webbrowser.open",
                  # Any ioctl: FS_IOC_SETFLAGS makes outside files immutable
                  # (chattr +i) through a read-only descriptor, TIOCSTI types
                  # into a terminal; neither goes through a write check.
                  "fcntl.ioctl",
              }),
              # fcntl commands that reach other processes: SIGIO/SIGURG to any
              # PID (F_SETOWN*), leases that stall the harness's opens.
              fcntl_denied=frozenset({
                  fcntl.F_SETOWN, fcntl.F_SETSIG, fcntl.F_SETLEASE, fcntl.F_NOTIFY,
                  getattr(fcntl, "F_SETOWN_EX", 15),
              }),
              # Record locks: allowed only on files inside the sandbox, so the
              # code can't hold a lock the harness waits for.
              fcntl_locks=frozenset({
                  fcntl.F_SETLK, fcntl.F_SETLKW,
                  getattr(fcntl, "F_OFD_SETLK", 37), getattr(fcntl, "F_OFD_SETLKW", 38),
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
              # The hook's helpers and the reporting path: frames expose them, and
              # swapped defaults there would break the check or the report.
              own_functions=(_deny, _text, _fd_target, _resolve, _absolute, _check_write, _quota,
                             _sqlite_authorizer, report, chain, describe, classify),
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
                except OSError:          # a new file: all the room RLIMIT_FSIZE gives it
                    quota(target, fsize, "opening a new file for writing")
                    return
                if not (S_ISREG(st.st_mode) or S_ISDIR(st.st_mode)):
                    deny("writing to a file that is not a regular file: " + target)
                if S_ISREG(st.st_mode):
                    quota(target, max(fsize - st.st_size, 0), "opening a file for writing")
                return
            # Reading: anything but another process's /proc entries.
            text = text_of(path, "reading")
            if mode is None and not text.startswith("/") and ".." in text.split("/"):
                deny("os.open through a relative path with '..'")  # its dir_fd is hidden (see above)
            target, raw = absolute(path, None, "reading")
            resolve(raw, "reading")
            if mode is None:
                # A descriptor for an outside directory would be a dir_fd that
                # lets a later os.open(..., dir_fd=fd) write outside unseen.
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
                    target = check_write(args[path_index], None if fd_index < 0 else args[fd_index], event)
                if name == "os.mkdir":
                    quota(target, block, "making a directory")
                elif name == "os.truncate" and not isinstance(args[0], int):
                    # by path, a closed file may grow (up to RLIMIT_FSIZE); an open one's room is counted already
                    try:
                        size = pstat(target).st_size
                    except OSError:
                        size = 0
                    length = args[1] if isinstance(args[1], int) else fsize
                    quota(target, max(length - size, 0), "growing a file")
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
            # Only the sandbox's own functions are protected (traceback frames
            # expose them); namedtuple and others legitimately set __defaults__.
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
        if event == "os.chdir":
            # The working directory stays inside the sandbox: a thread that
            # moves it out between another thread's check of a relative path
            # and its system call would make that path land outside.
            check_write(args[0], None, "os.chdir")
            return
        if event == "os.kill":
            if type(args[0]) is not int or args[0] != getpid():
                deny("os.kill of another process is not allowed")
            return
        if event == "fcntl.fcntl":
            if args[1] in fcntl_denied:
                deny("fcntl.fcntl command %d is not allowed" % args[1])
            if args[1] in fcntl_locks:
                check_write(args[0], None, "locking")
            return
        if event == "fcntl.flock" or event == "fcntl.lockf":
            check_write(args[0], None, "locking")
            return
        if event == "sqlite3.connect":
            # Only with sqlite3 preloaded (_sqlite3 is refused otherwise): an in-memory database or a
            # file inside the sandbox. A "file:" URI can name any file, so only its in-memory form passes.
            text = text_of(args[0], "sqlite3.connect")
            if text == "" or text == ":memory:" or text.startswith("file::memory:"):
                return
            if text.startswith("file:"):
                deny("sqlite3.connect to a URI filename")
            check_write(args[0], None, "sqlite3.connect")
            return
        if event.startswith("ctypes."):
            deny(event + " is not allowed")

    # With sqlite3 preloaded, sqlite3.connect hands out connections that already carry the authorizer.
    # It can't be installed from the hook ("sqlite3.connect/handle" comes before the connection is
    # usable), so this is best effort: code that calls set_authorizer(None) or builds a Connection
    # itself lifts it (sandbox.py's docstring, "Preloaded libraries").
    if "sqlite3.dbapi2" in sys.modules:
        def sqlite_connect(*args, _connect=sys.modules["sqlite3.dbapi2"].connect,
                           _authorizer=_sqlite_authorizer, **kwargs):
            connection = _connect(*args, **kwargs)
            connection.set_authorizer(_authorizer)
            return connection
        sys.modules["sqlite3"].connect = sys.modules["sqlite3.dbapi2"].connect = sqlite_connect
        del sqlite_connect
    sys.addaudithook(_hook)
    del _hook, _deny, _text, _fd_target, _resolve, _absolute, _check_write, _quota, _sqlite_authorizer

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

    _isinstance, _int, _TimeoutError, _type, _BaseException = isinstance, int, TimeoutError, type, BaseException
    _compile, _exec, _print_exception = compile, exec, traceback.print_exception
    _int_and, _update = int.__and__, dict.update
    # User code may rebind builtins (isinstance, str, ...); the traceback module
    # and the rest of the error path look them up there, so they are put back
    # before any of it runs.
    _builtins, _pristine_builtins = builtins.__dict__, dict(builtins.__dict__)

    sys.argv = [""]
    try:
        _exec(_compile(source, "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        _update(_builtins, _pristine_builtins)
        code = exc.code
        if code is None or code == 0:
            report(None, None, 0)
        if _isinstance(code, _int):
            report("exit", "SystemExit: %d" % code, _int_and(code, 0xFF) or 1)
        try:
            _err.write("%s\n" % (code,))
        except _BaseException:
            pass
        report("exit", describe(exc), 1)
    except _BaseException as exc:
        _update(_builtins, _pristine_builtins)
        # Outcome first: printing the traceback runs user code (__str__, ...).
        if cpu_hit and _isinstance(exc, _TimeoutError):
            kind, error = "timeout", "TimeoutError: CPU time limit of %ds exceeded" % cpu_s
        else:
            try:
                kind = classify(exc)
            except _BaseException:
                kind = "exception"
            error = describe(exc)
        try:
            _print_exception(_type(exc), exc, exc.__traceback__.tb_next, file=_err)
        except _BaseException:
            pass
        report(kind, error, 1)
    report(None, None, 0)


if __name__ == "__main__":
    import sys

    _sandbox_bootstrap(sys.argv)
