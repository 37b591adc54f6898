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

import copy
from typing import Sequence

from .generators import GENERATORS, MULTIHOP_GENERATORS
from .generators import trivial
from .generators.common import cell_rng, sampled_cell
from .generators.historical_year import HistoricalFact, load_historical_facts
from .schema import DIFFICULTIES, ENV_CATEGORY, SPLITS, Task

__all__ = ["BUILTIN_ENVS", "HistoricalFact", "TIERS", "generate_builtin", "generate_multihop", "generate_trivial",
           "load_historical_facts"]

BUILTIN_ENVS = tuple(GENERATORS)
# standard: the When2Tool-style tasks of every environment; trivial: the tier the default policy answers unaided
# often (generators/trivial.py, its kept templates); both: the two, standard first.
TIERS = ("standard", "trivial", "both")

_SOURCE = "toolwise builtin generator"


#: tasks per (environment, difficulty) of a split when none is asked for (the tasks group's default too)
N_PER_CELL = 20


def generate_builtin(split: str, *, n_per_cell: int = N_PER_CELL, seed: int = 0,
                     envs: Sequence[str] | None = None, hops: str = "single", tier: str = "standard",
                     n_per_template: int = 20, repeat: bool = True) -> list[Task]:
    """Generate ``n_per_cell`` tasks per (environment, difficulty) for ``split``.

    ``tier``: ``standard`` (the tasks below), ``trivial`` (``n_per_template`` tasks of each kept template of the
    trivial tier, :func:`generate_trivial`, which ``repeat`` goes to; single-hop only, so with ``hops=multi``
    nothing) or ``both``.

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
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS}, got {tier!r}")
    if type(n_per_template) is not int or n_per_template < 0:
        raise ValueError(f"n_per_template must be a non-negative integer, got {n_per_template!r}")
    registries = ([GENERATORS] if hops != "multi" else []) + ([MULTIHOP_GENERATORS] if hops != "single" else [])
    known = set(GENERATORS) | set(MULTIHOP_GENERATORS)
    wanted = known if envs is None else set(envs)
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"no built-in generator for {unknown}; available: {sorted(known)}")

    tasks: list[Task] = []
    if tier != "trivial":
        for registry in registries:
            for env, gen in registry.items():
                if env in wanted:
                    tasks.extend(_generate_env(gen, split, n_per_cell, seed))
    if tier != "standard" and hops != "multi":
        tasks.extend(t for t in generate_trivial(split, n_per_template=n_per_template, seed=seed, repeat=repeat)
                     if t.env.name in wanted)
    return tasks


def generate_trivial(split: str, *, n_per_template: int = 20, seed: int = 0,
                     templates: Sequence[str] | None = None, repeat: bool = True) -> list[Task]:
    """``n_per_template`` tasks of each trivial-tier template (default: the kept ones, ``trivial.KEPT``; any
    candidate by name, which is how ``benchmarks/trivial_tier.py`` measures them) for ``split``, in template
    order. A template whose share of ``split`` holds fewer instances repeats them, or with ``repeat=False``
    gives each once. Ids look like ``"builtin/trivial/add_1d/test/0003"``; tasks are ``easy`` single-hop tasks of the
    template's environment tagged ``trivial`` and the template name."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    names = trivial.KEPT if templates is None else tuple(templates)
    unknown = [n for n in names if n not in trivial.CANDIDATES]
    if unknown:
        raise ValueError(f"no trivial template {unknown}; candidates: {list(trivial.CANDIDATES)}")
    if not names and n_per_template:
        raise ValueError("the trivial tier keeps no template yet: run benchmarks/trivial_tier.py and record its "
                         "measurements in data_builders/tasks/generators/trivial.py (MEASURED)")
    out = []
    for name in names:
        tpl = trivial.CANDIDATES[name]
        # Its own stream per template: adding a template never changes another one's tasks.
        r = cell_rng(f"trivial/{name}", "easy", split, seed)
        n = n_per_template if repeat else min(n_per_template, len(trivial.split_pool(name, split)))
        for i, (instruction, answer, params) in enumerate(trivial.template_cell(name, split, r, n)):
            record = {
                "id": f"builtin/trivial/{name}/{split}/{i:04d}",
                "instruction": instruction,
                # a copy each: the pool is cached, and a task's environment must never share state with another's
                "environments": [{"name": tpl.env, "tools": list(tpl.tools), "parameters": copy.deepcopy(params)}],
                "expected": {"answer": answer},
                "difficulty": "easy",
                "multi_step": False,
                "tags": ["trivial", name, "single_round"],
                "category": ENV_CATEGORY[tpl.env],
                "split": split,
            }
            out.append(Task.from_dict(record, source=_SOURCE, index=i))
    return out


def generate_multihop(split: str, *, n_per_cell: int = N_PER_CELL, seed: int = 0) -> list[Task]:
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
