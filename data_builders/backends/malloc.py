"""glibc's malloc tuned for CPU inference, opt-in because it is process-wide.

:func:`keep_freed_memory` changes the allocator of the whole process, not only of the backend asking for it: in a
notebook, a server or a Ray worker that merely builds a backend it would keep every later peak of the host's memory
too. So the backends ask for it (on CPU) and it happens only where the process opted in: the command-line entry
points do (:func:`cli_opt_in`), anything else with ``TOOLWISE_MALLOC_TUNING=1``; ``TOOLWISE_MALLOC_TUNING=0`` keeps
glibc's defaults even under the command-line entry points.

Standard library only: ``trainers.fit`` imports it without loading torch.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

ENV = "TOOLWISE_MALLOC_TUNING"
#: Whether this process's malloc was tuned (glibc has no getter for ``M_MMAP_MAX`` to ask it afterwards).
applied = False


def opted_in() -> bool:
    """``TOOLWISE_MALLOC_TUNING`` is 1 (or true/yes/on); unset or anything else: no."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cli_opt_in(main):
    """Wraps a command-line entry point's ``main`` (outside ``hydra.main``): the process is the job's own, so malloc
    is tuned unless ``TOOLWISE_MALLOC_TUNING`` says otherwise. Through the environment so that the processes the job
    starts (DDP ranks, a local Ray cluster's workers) inherit the choice; before Hydra, so that a ``main`` called
    in-process (benchmarks/main_job.py) opts in as ``python -m`` does."""
    @functools.wraps(main)
    def entry(*args, **kwargs):
        os.environ.setdefault(ENV, "1")
        return main(*args, **kwargs)
    return entry


def keep_freed_memory() -> bool:
    """Tune malloc (:func:`_mallopt_keep_freed`) where the process opted in; True when it is tuned now."""
    return opted_in() and _mallopt_keep_freed()


def _mallopt_keep_freed() -> bool:
    """Make glibc's malloc keep freed memory for reuse instead of handing it back to the kernel.

    By default a large block is its own ``mmap``, unmapped when freed, and free memory at the top of the heap is
    trimmed: on CPU each forward's large temporaries (a prefill batch's activations) are then faulted in page by
    page, zeroed by the kernel, at every forward. The main job took 7.2 million minor page faults and 31.8 s of
    system time that way, 1.1 million and 14.3 s with this (docs/results.md#where-the-main-jobs-time-goes). With
    ``mmap`` off and no trimming, the heap grows to the process's peak once and is reused: the process keeps
    that peak, as jemalloc or tcmalloc would. Process-wide and idempotent; False where the C library has no
    ``mallopt`` (not glibc)."""
    global applied
    # -1: glibc reads the threshold as a size_t, so no trimming at all. A threshold of 2 GB (the largest positive
    # int) still trimmed after each round of the main job: a batch's KV cache alone is ~2.2 GB when it is freed,
    # and every round faulted it in again (12 s of the job, 1.6 M page faults)
    ok = _mallopt(mmap_max=0, trim_threshold=-1)
    applied = applied or ok
    return ok


def _mallopt(mmap_max: int, trim_threshold: int) -> bool:
    """Set glibc's ``M_MMAP_MAX`` and ``M_TRIM_THRESHOLD``; False where the C library has no ``mallopt``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4     # <malloc.h>
    return bool(mallopt(M_MMAP_MAX, mmap_max)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))


def opt_out() -> bool:
    """This process (and what it starts) keeps glibc's defaults from now on, and a malloc tuned earlier in it gets
    them back: for a training loop, whose activations and logits change size with every batch's length, an
    untrimmed heap without ``mmap`` keeps each size's peak side by side (recipe=tool_dpo grew to 24 GB and was
    OOM-killed at its ninth step; a DPO step's largest temporaries are ~2 GB of logits). True when the defaults
    were restored (False: nothing was tuned, or not glibc)."""
    os.environ[ENV] = "0"
    # glibc's defaults: 65,536 mappings, a 128 KiB trim threshold
    return applied and _mallopt(mmap_max=65536, trim_threshold=128 * 1024)
