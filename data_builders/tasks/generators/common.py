"""Shared machinery for the built-in task generators: seeded per-cell randomness and split ownership.

Every (environment, difficulty, split, seed) cell draws from its own ``random.Random`` seeded from a
SHA-256 digest, so output never depends on Python's salted ``hash()``, on cell order, or on which other
environments were requested, and a smaller ``n`` yields a prefix of a larger one.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable

from ..schema import SPLITS

# One generated task before it becomes a Task: (instruction, gold answer, environment parameters), plus
# the gold intermediate steps ``[x, y, z]`` for multi-hop generators.
Draw = tuple[str, str, dict[str, Any]] | tuple[str, str, dict[str, Any], list[str]]


@dataclass(frozen=True)
class EnvGenerator:
    """How to generate one environment's tasks.

    Exactly one of ``make`` and ``cell`` is set. ``make(difficulty, rng)`` draws one task; the
    assembler keeps only draws whose instruction hashes to the requested split (``owner_split``),
    so train and test never share an instruction for any pair of seeds. ``cell(difficulty, split,
    rng, n)`` returns a whole cell, for fact-table environments that split their tables themselves.
    ``tools(difficulty)`` is the task's tool list exactly as When2Tool's files give it (order included).
    """

    env: str
    tag: str
    tools: Callable[[str], tuple[str, ...]]
    make: Callable[[str, random.Random], Draw] | None = None
    cell: Callable[[str, str, random.Random, int], list[Draw]] | None = None
    multi_hop: bool = False  # a three-step chain (When2Tool envs 16-18): draws carry their steps

    def __post_init__(self):
        if (self.make is None) == (self.cell is None):
            raise ValueError(f"{self.env}: set exactly one of make and cell")


def digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()


def cell_rng(env: str, difficulty: str, split: str, seed: int) -> random.Random:
    # Keyed by the cell only (not by n), so larger requests extend smaller ones.
    return random.Random(int.from_bytes(digest("toolwise.builtin", env, difficulty, split, seed)[:8], "big"))


def owner_split(instruction: str) -> str:
    """The split an instruction may appear in; a fixed function of its text, independent of seed."""
    return SPLITS[digest("toolwise.builtin.split", instruction)[0] & 1]


def table_split(index: int) -> str:
    """Fact tables split by position (even rows train, odd rows test): no fact is asked in both splits.
    New facts must therefore be *appended* to a table; inserting one would move later facts across."""
    return SPLITS[index % 2]


def cycle_split_facts(pool, split: str, r: random.Random, n: int) -> list:
    """``n`` facts of this split's share of a fact table (``table_split``), in shuffled order. When more
    tasks than facts are asked for, fresh permutations follow, so repeats stay inside the split."""
    mine = [f for i, f in enumerate(pool) if table_split(i) == split]
    if n and not mine:
        raise ValueError(f"fact table has no {split} entries")
    out: list = []
    while len(out) < n:
        order = list(mine)
        r.shuffle(order)
        out.extend(order[: n - len(out)])
    return out


def sampled_cell(gen: EnvGenerator, difficulty: str, split: str, r: random.Random, n: int) -> list[Draw]:
    out, seen = [], set()
    budget = 100 * n + 1000  # half the draws belong to the other split; exhaustion means n is unreasonably large
    while len(out) < n:
        budget -= 1
        if budget < 0:
            raise ValueError(f"{gen.env}/{difficulty}: could only generate {len(out)} distinct {split} tasks, "
                             f"asked for {n}")
        draw = gen.make(difficulty, r)
        instruction = draw[0]
        if instruction in seen or owner_split(instruction) != split:
            continue
        seen.add(instruction)
        out.append(draw)
    return out


def load_fact_table(name: str) -> list[dict]:
    """A JSON fact table shipped in ``generators/facts/`` (read through importlib.resources, so it works installed)."""
    text = resources.files(__package__).joinpath("facts").joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)
