"""HistoricalYearEnv tasks from shipped fact tables (easy: well-known, medium: less-known, hard: fictional)."""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from ..schema import DIFFICULTIES
from .common import Draw, EnvGenerator, cycle_split_facts, load_fact_table

TOOLS = ("lookup_year",)


@dataclass(frozen=True)
class HistoricalFact:
    event: str      # corpus key and the phrase asked about
    year: int       # gold answer
    paragraph: str  # corpus value; contains the year verbatim


HIST_INSTRUCTION = "In what year was {event}? Answer with only the year as a number."


@lru_cache(maxsize=None)
def load_historical_facts(difficulty: str) -> tuple[HistoricalFact, ...]:
    """The HistoricalYear fact table of one difficulty, in its fixed (corpus) order.

    easy: well-known real events; medium: less-known real events; hard: fictional events.
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r} not in {DIFFICULTIES}")
    name = f"historical_{difficulty}.json"
    facts, seen = [], set()
    for i, rec in enumerate(load_fact_table(name)):
        where = f"facts/{name}: entry {i}"
        event, year, paragraph = rec.get("event"), rec.get("year"), rec.get("paragraph")
        if not isinstance(event, str) or not event.strip():
            raise ValueError(f"{where}: 'event' must be a non-empty string")
        if type(year) is not int or year <= 0:
            raise ValueError(f"{where}: 'year' must be a positive integer (BC years as bare numbers)")
        if not isinstance(paragraph, str) or str(year) not in paragraph:
            raise ValueError(f"{where}: 'paragraph' must contain the year {year} verbatim")
        if event.lower() in seen:
            raise ValueError(f"{where}: duplicate event {event!r}")
        seen.add(event.lower())
        facts.append(HistoricalFact(event, year, paragraph))
    return tuple(facts)


def cell(difficulty: str, split: str, r: random.Random, n: int) -> list[Draw]:
    pool = load_historical_facts(difficulty)
    # Each task owns its corpus dict (the whole pool, fixed order): mutating one cannot leak into another.
    return [(HIST_INSTRUCTION.format(event=fact.event), str(fact.year), {"corpus": {f.event: f.paragraph for f in pool}})
            for fact in cycle_split_facts(pool, split, r, n)]


GENERATOR = EnvGenerator("HistoricalYearEnv", "historical_year", tools=lambda difficulty: TOOLS, cell=cell)
