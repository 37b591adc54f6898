"""The sandbox's OS boundary against code that reaches native code, as root and as a non-root uid.

The audit hook sees nothing a native library does, so each case here goes around it on purpose: an extension
module of the environment loaded under another name (``_cffi_backend``, ``_posixsubprocess``), libuv through
uvloop, files written by Rust (safetensors, tokenizers), memory the address-space limit does not count (memfd,
tmpfs), and what the host shows of itself (other processes in ``/proc``, the harness's descriptors, network
interfaces). What must hold: no shell runs, no file outside the sandbox's own directory changes, no
connection to a host port succeeds, no interface but loopback is visible, memory stays within the limits.

These cases run inside the OS boundary only: without it native code is not contained (docs/sandbox.md). When
the suite runs as root, ``test_the_native_attacks_hold_for_a_non_root_user`` runs this module again as uid 65534
(``setpriv``), the way people install and run a Python package.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from data_builders.environments import isolation
from data_builders.environments.sandbox import SandboxLimits, run_python

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=3.0, memory_mb=512, max_output_bytes=100_000, max_file_bytes=1_000_000,
                       max_total_bytes=5_000_000)
REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
CHILD_ENV = "TOOLWISE_TEST_SANDBOX_NATIVE_CHILD"


def _extension(name: str) -> str:
    path = getattr(importlib.import_module(name), "__file__", None)
    if not path:
        pytest.skip(f"{name} is built into this interpreter: nothing to load under another name")
    return path


def _load_as(alias: str, path: str) -> str:
    """Code that loads the extension module at ``path`` under the name ``alias`` (the hook sees only ``alias``)."""
    return (f"import importlib.machinery as _m, importlib.util as _u\n"
            f"_spec = _u.spec_from_file_location({alias!r}, {path!r}, "
            f"loader=_m.ExtensionFileLoader({alias!r}, {path!r}))\n"
            f"native = _u.module_from_spec(_spec)\n")


@pytest.fixture
def stray():
    path = os.path.join(tempfile.gettempdir(), f"toolwise_native_stray_{uuid.uuid4().hex}")
    yield path
    if os.path.lexists(path):
        os.remove(path)


@pytest.fixture(autouse=True)
def boundary_in_force():
    walls = isolation.boundary()
    assert walls.complete, f"the OS boundary is incomplete here: {walls.missing}"


def _ok(code: str, limits: SandboxLimits = LIMITS):
    result = run_python(code, limits)
    assert result.error_kind is None, result
    return result


def test_the_suite_runs_as_the_expected_user():
    # The non-root pass must really be non-root (and the root pass root): otherwise it proves nothing.
    expected = NOBODY if os.environ.get(CHILD_ENV) else os.geteuid()
    assert os.geteuid() == expected


def test_cffi_backend_under_another_name_cannot_run_a_shell(stray):
    code = _load_as("innocent._cffi_backend", _extension("_cffi_backend")) + (
        "char_p = native.new_pointer_type(native.new_primitive_type('char'))\n"
        "system = native.load_library(None).load_function("
        "native.new_function_type((char_p,), native.new_primitive_type('int'), False), 'system')\n"
        f"print('system', system(b'touch {stray}'))\n")
    result = _ok(code)
    # glibc's system() reports 127 when it could not start the shell (posix_spawn refused by seccomp).
    assert result.stdout == "system 32512\n", result
    assert not os.path.lexists(stray)


def test_posixsubprocess_under_another_name_cannot_fork_exec(stray):
    code = _load_as("innocent._posixsubprocess", _extension("_posixsubprocess")) + (
        "import os\n"
        f"args = [[b'/usr/bin/touch', b'{stray}'], [b'/usr/bin/touch'], True, (), None, None,"
        " -1, -1, -1, -1, -1, -1, *os.pipe(), False, False, -1, None, None, -1, -1, None]\n"
        "try:\n"
        "    try:\n"
        "        native.fork_exec(*args, False)   # CPython 3.11+: allow_vfork\n"
        "    except TypeError:\n"
        "        native.fork_exec(*args)\n"
        "    print('spawned')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__, e.errno)\n")
    result = _ok(code)
    assert result.stdout == "PermissionError 1\n", result
    assert not os.path.lexists(stray)


@pytest.fixture
def listener():
    """A TCP service on the host's loopback that records whether anything connected."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    seen = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            seen.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], seen
    stop.set()
    thread.join()
    server.close()


def test_uvloop_can_neither_spawn_nor_reach_a_host_port(stray, listener):
    pytest.importorskip("uvloop")
    port, seen = listener
    code = ("import asyncio, uvloop\n"
            "async def main():\n"
            "    try:\n"
            f"        p = await asyncio.create_subprocess_exec('/usr/bin/touch', {stray!r})\n"
            "        print('spawned', await p.wait())\n"
            "    except Exception as e:\n"
            "        print('spawn', type(e).__name__)\n"
            "    try:\n"
            f"        r, w = await asyncio.wait_for(asyncio.open_connection('127.0.0.1', {port}), 2)\n"
            "        w.write(b'hello from the sandbox')\n"
            "        await w.drain()\n"
            "        print('connected')\n"
            "    except Exception as e:\n"
            "        print('connect', type(e).__name__)\n"
            "uvloop.run(main())\n")
    result = _ok(code)
    assert result.stdout == "spawn PermissionError\nconnect PermissionError\n", result
    assert not os.path.lexists(stray)
    assert seen == []


@pytest.fixture
def outside(tmp_path):
    """Host places the code aims native writes at: a fresh directory of the harness, the interpreter's prefix."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep.txt").write_text("precious\n")
    name = f"toolwise_native_{uuid.uuid4().hex}"
    targets = [str(canary / "keep.txt"), str(canary / name), os.path.join(sys.prefix, name)]
    yield targets
    for path in targets[1:]:
        if os.path.lexists(path):
            os.remove(path)


def test_native_writes_through_installed_libraries_change_nothing_outside(outside):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    before = Path(outside[0]).read_bytes()
    code = ("import safetensors, tokenizers\n"
            "data = b'\\0' * 64\n"
            # CPython's bytes payload starts 32 bytes into the object: a raw pointer, as the API asks for.
            "spec = safetensors.TensorSpec(dtype='float32', shape=[1], data_ptr=id(data) + 32, data_len=4)\n"
            f"for path in {outside!r}:\n"
            "    for what, write in (('safetensors', lambda p: safetensors.serialize_file({'x': spec}, p)),\n"
            "                        ('tokenizers', lambda p: tokenizers.Tokenizer(tokenizers.models.BPE()).save(p))):\n"
            "        try:\n"
            "            write(path)\n"
            "            print(what, 'wrote', path)\n"
            "        except Exception as e:\n"
            "            print(what, 'refused')\n")
    result = _ok(code)
    assert "wrote" not in result.stdout and result.stdout.count("refused") == 6, result
    assert Path(outside[0]).read_bytes() == before
    assert not any(os.path.lexists(p) for p in outside[1:])


def test_memory_outside_the_address_space_limit_is_refused_or_bounded():
    # memfd and tmpfs pages are not in RLIMIT_AS: 700 MB under a 512 MB limit must not be held.
    code = ("import os, mmap\n"
            "try:\n    os.memfd_create('hold')\n    print('memfd created')\n"
            "except OSError as e:\n    print('memfd', type(e).__name__)\n"
            "try:\n    open('/dev/shm/hold', 'wb')\n    print('shm created')\n"
            "except OSError as e:\n    print('shm', type(e).__name__)\n"
            "try:\n"
            "    with open('hold.bin', 'wb') as f:\n"
            "        for _ in range(700):\n            f.write(b'x' * 2**20)\n"
            "    print('tmpfs held 700 MB')\n"
            "except OSError as e:\n    print('tmpfs', e.errno)\n"
            "try:\n    m = mmap.mmap(-1, 700 * 2**20)\n    m.write(b'x' * 700 * 2**20)\n    print('mmap held')\n"
            "except (OSError, MemoryError) as e:\n    print('mmap', type(e).__name__)\n")
    result = _ok(code, SandboxLimits(wall_s=10.0, cpu_s=5.0, memory_mb=512, max_output_bytes=10_000,
                                     max_file_bytes=1_000_000_000, max_total_bytes=50_000_000))
    # The audit hook refuses writing to /dev/shm (outside the directory); the working directory is a tmpfs of
    # max_total_bytes, so a big file ends with ENOSPC (28) there (or EDQUOT, 122, from the hook's own quota).
    lines = result.stdout.splitlines()
    assert lines[0] == "memfd PermissionError", result
    assert lines[1] == "shm PermissionError", result
    assert lines[2] in ("tmpfs 28", "tmpfs 122"), result
    assert lines[3] in ("mmap OSError", "mmap MemoryError"), result


def test_memfd_through_native_code_is_refused():
    code = _load_as("innocent._cffi_backend", _extension("_cffi_backend")) + (
        "char_p = native.new_pointer_type(native.new_primitive_type('char'))\n"
        "uint = native.new_primitive_type('unsigned int')\n"
        "memfd = native.load_library(None).load_function("
        "native.new_function_type((char_p, uint), native.new_primitive_type('int'), False), 'memfd_create')\n"
        "print('memfd', memfd(b'hold', 0))\n")
    assert _ok(code).stdout == "memfd -1\n"


def test_other_processes_and_the_harness_are_invisible():
    # The harness, its parent and PID 1 of the host, by the host's numbers.
    host_pids = sorted({os.getpid(), os.getppid(), 1})
    code = ("import os\n"
            "print(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
            f"for pid in {host_pids[1:]!r}:\n"
            "    try:\n        print(pid, os.readlink(f'/proc/{pid}/exe'))\n"
            "    except OSError as e:\n        print(pid, type(e).__name__)\n"
            "targets = []\n"
            "for fd in os.listdir('/proc/self/fd'):\n"
            "    try:\n        targets.append(os.readlink('/proc/self/fd/' + fd))\n"
            "    except OSError:\n        pass   # the listing's own descriptor, closed by now\n"
            "print(all(t == '/dev/null' or t.startswith('pipe:') for t in targets))\n")
    result = _ok(code)
    lines = result.stdout.splitlines()
    assert lines[0] == "['1']", result   # itself, as PID 1
    assert all(line.endswith(("FileNotFoundError", "PermissionError")) for line in lines[1:-1]), result
    assert lines[-1] == "True", result   # no descriptor of the harness's beyond the pipes it was given


def test_only_loopback_is_visible():
    code = ("import socket\n"
            "print([l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]])\n"
            "try:\n    print(socket.if_nameindex())\n"
            "except OSError as e:\n    print(type(e).__name__)\n")
    result = _ok(code)
    assert result.stdout.splitlines()[0] == "['lo']", result
    assert result.stdout.splitlines()[1] in ("[(1, 'lo')]", "PermissionError"), result


# ----------------------------------------------------------------------------------------- as a non-root uid

def _hidden_ancestors(paths: list[str]) -> dict[str, set[str]]:
    """For each path uid 65534 cannot reach: {the first ancestor it can't traverse: the child names under it}."""
    hidden: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(path).resolve().parts
        for depth in range(1, len(parts)):
            ancestor = str(Path(*parts[:depth]))
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                hidden.setdefault(ancestor, set()).add(parts[depth])
                break
    return hidden


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get(CHILD_ENV)), reason="this is the non-root pass")
def test_the_native_attacks_hold_for_a_non_root_user():
    if os.geteuid() != 0:
        pytest.skip(f"the suite already runs as uid {os.geteuid()}: every case above ran as a non-root user")
    for tool in ("unshare", "setpriv", "mount"):
        assert shutil.which(tool), f"{tool} (util-linux) is needed to run the suite as a non-root user"
    # A non-root user runs an interpreter they can read. When this one lives under a directory only root may
    # enter (pyenv in /root), a private mount namespace shows uid 65534 just that part of it; nothing on the host
    # changes and the sandbox under test is untouched (it runs its own bwrap as uid 65534).
    import site

    needed = [sys.prefix, sys.base_prefix, os.path.realpath(sys.executable), str(REPO), *site.getsitepackages()]
    script = ["set -e"]
    for ancestor, children in sorted(_hidden_ancestors(needed).items()):
        script.append('d=$(mktemp -d); mount -t tmpfs -o mode=755 tmpfs "$d"')
        for child in sorted(children):
            script.append(f'mkdir "$d/{child}"; mount --rbind "{ancestor}/{child}" "$d/{child}"')
        script.append(f'mount --move "$d" "{ancestor}"')
    script.append(f'exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups -- "$@"')
    env = {**os.environ, CHILD_ENV: "1", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script), "sh",
         sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", __file__,
         "-k", "not test_the_native_attacks_hold_for_a_non_root_user"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-3000:]
