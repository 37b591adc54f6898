"""Trajectory cache of the evaluator: one JSONL per (arm, policy, decoding), one line per task.

The key of a file is a hash of everything that determines a trajectory except the task — the arm's
specification (mode, reasoning, hooks with their controller's weights hash and τ), the policy fingerprint
and the decoding settings; inside a file each line is keyed by task id *and* a hash of the task's content,
so an edited task is recomputed. A rerun reads what is there and runs only the missing tasks; a new arm
gets a new file. Files are rewritten atomically, so a killed evaluation loses at most the arm in flight.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from data_builders.agent.trajectory import Trajectory, read_trajectories, write_trajectories
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
        return self.root / f"{arm_spec.get('name', 'arm')}-{digest([arm_spec, self.decoding])}.jsonl"

    def load(self, arm_spec: dict) -> dict[str, Trajectory]:
        """The arm's cached trajectories by task key; a record without its key is a broken cache file."""
        p = self.path(arm_spec)
        if not p.exists():
            return {}
        have = {}
        for n, t in enumerate(read_trajectories(p), 1):
            if t.task_key is None:
                raise ValueError(f"{p}: record {n} (task {t.task_id!r}) has no _task_key: not an evaluator cache file")
            have[t.task_key] = t
        return have

    def missing(self, arm_spec: dict, tasks: Sequence) -> tuple[dict[str, Trajectory], list]:
        have = self.load(arm_spec)
        todo = [t for t in tasks if task_key(t) not in have]
        self.hits += len(tasks) - len(todo)
        self.misses += len(todo)
        return have, todo

    def store(self, arm_spec: dict, have: dict[str, Trajectory], new: Sequence[tuple[Any, Trajectory]]) -> None:
        for task, traj in new:
            have[task_key(task)] = dataclasses.replace(traj, task_key=task_key(task))
        p = self.path(arm_spec)
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.with_suffix(".spec.json")).write_text(json.dumps({"arm": arm_spec, "policy": self.policy,
                                                             "decoding": self.decoding}, indent=2, default=str))
        write_trajectories(p, have.values())
