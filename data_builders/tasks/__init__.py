"""Task sources. Every source yields :class:`~data_builders.tasks.schema.Task` (When2Tool schema).

``builtin``: deterministic generators shipped with toolwise (no external files; a fresh clone has tasks).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .schema import DIFFICULTIES, ENV_CATEGORY, EnvSpec, Task, TaskFormatError

__all__ = ["Task", "EnvSpec", "TaskFormatError", "ENV_CATEGORY", "load_tasks", "interleave", "TASK_SOURCES"]

TASK_SOURCES = ("builtin",)


def interleave(tasks: Sequence[Task]) -> list[Task]:
    """Round-robin over (difficulty, environment) cells, keeping each cell's order, so that any prefix
    (``limit=32``) covers every cell as evenly as possible and a prefix of 3 already spans A, B and C."""
    cells: dict[tuple[str, str], list[Task]] = defaultdict(list)
    for t in tasks:
        cells[(t.env.name, t.difficulty)].append(t)
    rank = {d: i for i, d in enumerate(DIFFICULTIES)}
    queues = [cells[k] for k in sorted(cells, key=lambda k: (rank.get(k[1], 9), k[0]))]
    out: list[Task] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        out.extend(q[depth] for q in queues if depth < len(q))
    return out


def load_tasks(source: str = "builtin", *, split: str = "test", limit: int | None = None,
               envs: Sequence[str] | None = None, difficulties: Sequence[str] | None = None,
               n_per_cell: int = 20, seed: int = 0) -> list[Task]:
    if source == "builtin":
        from .builtin import generate_builtin

        tasks = generate_builtin(split, n_per_cell=n_per_cell, seed=seed, envs=envs)
    else:
        raise ValueError(f"unknown task source {source!r}; known: {TASK_SOURCES}")
    if envs:
        tasks = [t for t in tasks if t.env.name in set(envs)]
    if difficulties:
        tasks = [t for t in tasks if t.difficulty in set(difficulties)]
    tasks = interleave(tasks)
    return tasks[:limit] if limit else tasks
