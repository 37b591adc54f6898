"""Built-in, deterministic When2Tool-style tasks: the ``builtin`` task source.

A fresh clone has no copy of the When2Tool task files, so these generators let the project
train and test end to end on its own. They follow the When2Tool schema, instruction wording and
gold formats (docs/guide.md#when2tool-tasks-and-gold-formats), but the tasks are generated here (one module per
environment in ``generators/``), never copied from the benchmark.

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

from .generators import GENERATORS, MULTIHOP_GENERATORS
from .generators.common import cell_rng, sampled_cell
from .generators.historical_year import HistoricalFact, load_historical_facts
from .schema import DIFFICULTIES, ENV_CATEGORY, SPLITS, Task

__all__ = ["BUILTIN_ENVS", "HistoricalFact", "generate_builtin", "generate_multihop", "load_historical_facts"]

BUILTIN_ENVS = tuple(GENERATORS)

_SOURCE = "toolwise builtin generator"


def generate_builtin(split: str, *, n_per_cell: int = 20, seed: int = 0,
                     envs: Sequence[str] | None = None, hops: str = "single") -> list[Task]:
    """Generate ``n_per_cell`` tasks per (environment, difficulty) for ``split``.

    ``hops``: ``"single"`` (the 15 single-hop environments), ``"multi"`` (three-step chains, When2Tool
    envs 16-18, for the environments that have a multi-hop generator) or ``"both"``. Tasks come in
    env_no order, single-hop before multi-hop, then easy/medium/hard, then index; ids look like
    ``"builtin/calculator/easy/test/0007"`` (``calculator_multihop`` for chains) so they never collide
    with When2Tool's integer ids. Fact-table environments repeat facts (within the same split only)
    when asked for more tasks than the split's share of the table.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    if type(n_per_cell) is not int or n_per_cell < 0:
        raise ValueError(f"n_per_cell must be a non-negative integer, got {n_per_cell!r}")
    if type(seed) is not int:
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if hops not in ("single", "multi", "both"):
        raise ValueError(f"hops must be single, multi or both, got {hops!r}")
    registries = ([GENERATORS] if hops != "multi" else []) + ([MULTIHOP_GENERATORS] if hops != "single" else [])
    known = set(GENERATORS) | set(MULTIHOP_GENERATORS)
    wanted = known if envs is None else set(envs)
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"no built-in generator for {unknown}; available: {sorted(known)}")

    tasks: list[Task] = []
    for registry in registries:
        for env, gen in registry.items():
            if env in wanted:
                tasks.extend(_generate_env(gen, split, n_per_cell, seed))
    return tasks


def generate_multihop(split: str, *, n_per_cell: int = 20, seed: int = 0) -> list[Task]:
    """``n_per_cell`` CodeExecutor multi-hop tasks per difficulty (When2Tool env 18 schema)."""
    return generate_builtin(split, n_per_cell=n_per_cell, seed=seed, envs=["CodeExecutorEnv"], hops="multi")


def _generate_env(gen, split: str, n_per_cell: int, seed: int) -> list[Task]:
    tag = gen.tag + ("_multihop" if gen.multi_hop else "")
    out = []
    for difficulty in DIFFICULTIES:
        # Multi-hop cells draw from their own stream, so adding them never changes single-hop tasks.
        r = cell_rng(gen.env + ("/multihop" if gen.multi_hop else ""), difficulty, split, seed)
        cell = gen.cell(difficulty, split, r, n_per_cell) if gen.cell is not None else \
            sampled_cell(gen, difficulty, split, r, n_per_cell)
        for i, draw in enumerate(cell):
            instruction, answer, params = draw[:3]
            expected = {"answer": answer} | ({"steps": list(draw[3])} if gen.multi_hop else {})
            record = {
                "id": f"builtin/{tag}/{difficulty}/{split}/{i:04d}",
                "instruction": instruction,
                "environments": [{"name": gen.env, "tools": list(gen.tools(difficulty)), "parameters": params}],
                "expected": expected,
                "difficulty": difficulty,
                "multi_step": gen.multi_hop,
                "tags": [gen.tag, "multihop_3step" if gen.multi_hop else "single_round"],
                "category": "M" if gen.multi_hop else ENV_CATEGORY[gen.env],
                "split": split,
            }
            out.append(Task.from_dict(record, source=_SOURCE, index=i))
    return out
