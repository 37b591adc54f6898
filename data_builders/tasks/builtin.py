"""Built-in, deterministic When2Tool-style tasks: the ``builtin`` task source.

A fresh clone has no copy of the When2Tool task files, so these generators let the project
train and test end to end on its own. They follow the When2Tool schema, instruction wording and
gold formats (SPEC §1.2, §1.3), but the tasks are generated here (one module per environment in
``generators/``), never copied from the benchmark.

Guarantees:

* **Deterministic.** Every (environment, difficulty, split, seed) cell draws from its own
  ``random.Random`` seeded from a SHA-256 digest, so results do not depend on Python's salted
  ``hash()``, on the order of cells, or on which other environments were requested. A smaller
  ``n_per_cell`` yields a prefix of a larger one.
* **Train and test are disjoint for every pair of seeds.** Sampled instructions belong to the
  split chosen by a hash of their text, and a cell keeps only its own split's instructions.
  Fact-table environments split facts by their position in the table (even positions train, odd
  positions test), so no fact is asked in both splits. New facts must therefore be *appended* to
  a fact file; inserting one in the middle would move later facts to the other split.
"""
from __future__ import annotations

from typing import Sequence

from .generators import GENERATORS
from .generators.common import cell_rng, sampled_cell
from .generators.historical_year import HistoricalFact, load_historical_facts
from .schema import DIFFICULTIES, ENV_CATEGORY, SPLITS, Task

__all__ = ["BUILTIN_ENVS", "HistoricalFact", "generate_builtin", "load_historical_facts"]

BUILTIN_ENVS = tuple(GENERATORS)

_SOURCE = "toolwise builtin generator"


def generate_builtin(split: str, *, n_per_cell: int = 20, seed: int = 0,
                     envs: Sequence[str] | None = None) -> list[Task]:
    """Generate ``n_per_cell`` single-hop tasks per (environment, difficulty) for ``split``.

    Tasks come in ``BUILTIN_ENVS`` order, then easy/medium/hard, then index; ids look like
    ``"builtin/calculator/easy/test/0007"`` so they never collide with When2Tool's integer ids.
    For HistoricalYear, a request larger than the split's share of a fact table repeats events
    (within the same split only).
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    if type(n_per_cell) is not int or n_per_cell < 0:
        raise ValueError(f"n_per_cell must be a non-negative integer, got {n_per_cell!r}")
    if type(seed) is not int:
        raise ValueError(f"seed must be an integer, got {seed!r}")
    wanted = BUILTIN_ENVS if envs is None else tuple(envs)
    unknown = sorted(set(wanted) - set(BUILTIN_ENVS))
    if unknown:
        raise ValueError(f"no built-in generator for {unknown}; available: {list(BUILTIN_ENVS)}")

    tasks: list[Task] = []
    for env in (e for e in BUILTIN_ENVS if e in wanted):
        gen = GENERATORS[env]
        tag = gen.tag
        for difficulty in DIFFICULTIES:
            r = cell_rng(env, difficulty, split, seed)
            if gen.cell is not None:
                cell = gen.cell(difficulty, split, r, n_per_cell)
            else:
                cell = sampled_cell(gen, difficulty, split, r, n_per_cell)
            for i, (instruction, answer, params) in enumerate(cell):
                record = {
                    "id": f"builtin/{tag}/{difficulty}/{split}/{i:04d}",
                    "instruction": instruction,
                    "environments": [{"name": env, "tools": list(gen.tools(difficulty)), "parameters": params}],
                    "expected": {"answer": answer},
                    "difficulty": difficulty,
                    "multi_step": False,
                    "tags": [tag, "single_round"],
                    "category": ENV_CATEGORY[env],
                    "split": split,
                }
                tasks.append(Task.from_dict(record, source=_SOURCE, index=i))
    return tasks
