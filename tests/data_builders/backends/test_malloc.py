"""glibc's malloc tuning is opt-in: building a backend in a host process (a notebook, a server, a Ray worker) leaves
its allocator alone; the command-line entry points and ``TOOLWISE_MALLOC_TUNING=1`` turn it on, ``=0`` off.

glibc has no getter for ``M_MMAP_MAX``: the tests watch the one function that calls ``mallopt`` and, in a fresh
interpreter, the module's record of whether it ran."""
from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from data_builders.backends import malloc
from tests.conftest import REPO

GLIBC = sys.platform.startswith("linux") and bool(ctypes.util.find_library("c"))
# The entry points of `python -m data_builders.build`, `... data_builders.rollout`, `... trainers.fit` and
# `... trainers.evaluate` (its __main__ runs trainers.evaluate.run's main).
CLIS = ("data_builders.build", "data_builders.rollout", "trainers.fit", "trainers.evaluate.__main__")


def env(value: str | None) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != malloc.ENV}
    return e if value is None else e | {malloc.ENV: value}


@pytest.mark.parametrize("value", [None, "0"])
def test_building_a_backend_does_not_call_mallopt(tiny_model_dir, monkeypatch, value):
    from data_builders.backends.hf import HFBackend
    from data_builders.backends.loading import load_backend

    monkeypatch.delenv(malloc.ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(malloc.ENV, value)
    with mock.patch.object(malloc, "_mallopt_keep_freed", return_value=True) as mallopt:
        backend = load_backend(str(tiny_model_dir), max_batch_size=2)
        assert isinstance(backend, HFBackend) and backend.tune_malloc and backend.model.device.type == "cpu"
    mallopt.assert_not_called()


def test_opting_in_tunes_malloc_when_a_cpu_backend_is_built(tiny_model_dir, monkeypatch):
    from data_builders.backends.loading import load_backend

    monkeypatch.setenv(malloc.ENV, "1")
    with mock.patch.object(malloc, "_mallopt_keep_freed", return_value=True) as mallopt:
        load_backend(str(tiny_model_dir), max_batch_size=2)
    mallopt.assert_called_once_with()


BUILD = """
import json, sys
from data_builders.backends import malloc
from data_builders.backends.loading import load_backend
backend = load_backend(sys.argv[1], max_batch_size=2)
print(json.dumps({"device": backend.model.device.type, "applied": malloc.applied}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("value, applied", [(None, False), ("0", False), ("1", GLIBC)])
def test_in_a_fresh_process(tiny_model_dir, value, applied):
    """What the process's malloc ends up with after a CPU backend is built: untouched unless opted in."""
    proc = subprocess.run([sys.executable, "-c", BUILD, str(tiny_model_dir)], cwd=REPO, env=env(value),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"device": "cpu", "applied": applied}


ENTRY = """
import importlib, json, os, sys
from data_builders.backends import malloc
seen = {}
for name in sys.argv[1:]:
    main = importlib.import_module(name).main
    for preset in (None, "0"):
        os.environ.pop(malloc.ENV, None)
        if preset is not None:
            os.environ[malloc.ENV] = preset
        sys.argv = [name, "--version"]   # Hydra prints its version and exits: nothing of the job runs
        try:
            main()
        except SystemExit:
            pass
        seen[f"{name} {preset}"] = os.environ.get(malloc.ENV)
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_the_command_line_entry_points_opt_in():
    """Each entry point's ``main`` sets ``TOOLWISE_MALLOC_TUNING=1`` before Hydra runs the job (so a CPU backend it
    builds tunes malloc, as test_in_a_fresh_process shows), and leaves an explicit 0 alone."""
    proc = subprocess.run([sys.executable, "-c", ENTRY, *CLIS], cwd=REPO, env=env(None), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {**{f"{m} None": "1" for m in CLIS}, **{f"{m} 0": "0" for m in CLIS}}


def test_the_switch():
    with mock.patch.dict(os.environ, {malloc.ENV: "1"}):
        assert malloc.opted_in()
    for value in ("0", "", "no"):
        with mock.patch.dict(os.environ, {malloc.ENV: value}):
            assert not malloc.opted_in()
    with mock.patch.dict(os.environ):
        os.environ.pop(malloc.ENV, None)
        assert not malloc.opted_in()
        with mock.patch.object(malloc, "_mallopt_keep_freed") as mallopt:
            assert malloc.keep_freed_memory() is False
        mallopt.assert_not_called()


def test_a_training_process_opts_out_and_gets_glibcs_defaults_back(tiny_model_dir, monkeypatch):
    # recipe=tool_dpo builds an HF backend for the policy's first turns, then trains: with malloc tuned for
    # inference its heap kept every batch length's logits side by side (24 GB, OOM-killed)
    from data_builders.backends.loading import load_backend

    monkeypatch.setenv(malloc.ENV, "1")
    monkeypatch.setattr(malloc, "applied", True)           # tuned earlier in this process
    calls = []
    libc = type("Libc", (), {"mallopt": staticmethod(lambda param, value: calls.append((param, value)) or 1)})
    with mock.patch.object(malloc.ctypes, "CDLL", return_value=libc):
        assert malloc.opt_out() is GLIBC
    if GLIBC:
        assert calls == [(-4, 65536), (-1, 128 * 1024)]    # M_MMAP_MAX, M_TRIM_THRESHOLD: glibc's defaults
    assert os.environ[malloc.ENV] == "0"                   # inherited by what the process starts
    with mock.patch.object(malloc, "_mallopt_keep_freed", return_value=True) as mallopt:
        load_backend(str(tiny_model_dir), max_batch_size=2)
    mallopt.assert_not_called()                            # a backend built later leaves it alone
