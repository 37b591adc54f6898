"""Trajectory cache of the evaluator: per (arm, policy, decoding) a directory of JSONL segments, one line per task.

The key of a directory is a hash of everything that determines a trajectory except the task — the arm's
specification (mode, reasoning, hooks with their controller's weights hash and τ), the policy fingerprint
and the decoding settings; inside it each line is keyed by task id *and* a hash of the task's content,
so an edited task is recomputed. A rerun reads what is there and runs only the missing tasks; a new arm
gets a new directory.

Runs sharing one ``cache_dir`` at once (normal on a cluster's shared file system) need no lock: a store never
rewrites what is there, it adds one immutable segment (the trajectories it computed) under a name of its own,
written to a temp file of its own and renamed into place, the one operation shared file systems make atomic.
So writers never wait for each other, never drop each other's entries (there is no read-modify-write) and a
reader sees whole segments only; a killed run loses at most the shard in flight. This scales to any number of
writers, where one file per arm rewritten under a lock would serialize them all on rewriting the whole file and
depend on file locks, which some shared file systems do not honour. Two runs that compute the same task both
store it; either copy is that task's trajectory under this key. An arm's single ``<arm>-<hash>.jsonl`` file from
before segments is read as its first segment.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Sequence

from data_builders.agent.trajectory import Trajectory, read_trajectories, write_text_atomic, write_trajectories
from data_builders.tasks.schema import digest, task_key


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


class TrajectoryCache:
    def __init__(self, root: str | Path, policy: str, decoding: dict):
        self.root = Path(root) / digest(policy)
        self.policy, self.decoding = policy, decoding
        self.hits = self.misses = 0

    def path(self, arm_spec: dict) -> Path:
        """The arm's directory of segments."""
        return self.root / f"{arm_spec.get('name', 'arm')}-{digest([arm_spec, self.decoding])}"

    def segments(self, arm_spec: dict) -> list[Path]:
        """The arm's segment files, oldest first (a pre-segment file first of all); temp files are not listed."""
        d = self.path(arm_spec)
        single = d.with_name(d.name + ".jsonl")
        return ([single] if single.is_file() else []) + (sorted(d.glob("*.jsonl")) if d.is_dir() else [])

    def load(self, arm_spec: dict) -> dict[str, Trajectory]:
        """The arm's cached trajectories by task key; a record without its key is a broken cache file."""
        have = {}
        for p in self.segments(arm_spec):
            for n, t in enumerate(read_trajectories(p), 1):
                if t.task_key is None:
                    raise ValueError(f"{p}: record {n} (task {t.task_id!r}) has no _task_key: not an evaluator "
                                     "cache file")
                have[t.task_key] = t
        return have

    def missing(self, arm_spec: dict, tasks: Sequence) -> tuple[dict[str, Trajectory], list]:
        have = self.load(arm_spec)
        todo = [t for t in tasks if task_key(t) not in have]
        self.hits += len(tasks) - len(todo)
        self.misses += len(todo)
        return have, todo

    def store(self, arm_spec: dict, have: dict[str, Trajectory], new: Sequence[tuple[Any, Trajectory]]) -> None:
        """Add ``new`` (task, trajectory) pairs to ``have`` and to the cache, as one new segment. Pairs whose task
        is in ``have`` already (loaded, or stored before by this run: a failing run stores what finished) are
        not written again."""
        added = []
        for task, traj in new:
            if task_key(task) not in have:
                added.append(dataclasses.replace(traj, task_key=task_key(task)))
                have[added[-1].task_key] = added[-1]
        if not added:
            return
        d = self.path(arm_spec)
        spec = d / "spec.json"          # for a person browsing the cache; the same text from every writer
        if not spec.exists():
            write_text_atomic(spec, json.dumps({"arm": arm_spec, "policy": self.policy, "decoding": self.decoding},
                                               indent=2, default=str))
        # time first, so segments list in the order they were written; pid and random bits make the name unique
        write_trajectories(d / f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.jsonl", added)


def load_scores(root: str | Path, name: str) -> dict[str, float]:
    """Per-task scores stored under ``name`` (the probe's p), merged from every segment (see the module doc)."""
    d = Path(root) / name
    single = d.with_name(d.name + ".json")     # the one file written before segments
    files = ([single] if single.is_file() else []) + (sorted(d.glob("*.json")) if d.is_dir() else [])
    have: dict[str, float] = {}
    for f in files:
        try:
            have |= json.loads(f.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not valid JSON ({e.msg}): a damaged cache file; delete it") from None
    return have


def store_scores(root: str | Path, name: str, scores: dict[str, float]) -> None:
    """Add ``scores`` under ``name`` as one new segment."""
    if scores:
        write_text_atomic(Path(root) / name / f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}.json",
                          json.dumps(scores))
