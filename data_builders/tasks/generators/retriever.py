"""RetrieverEnv tasks from shipped fact tables (docs/guide.md#when2tool-tasks-and-gold-formats): easy asks well-known
facts, medium less-known ones ("From local corpus: "), hard invented ones ("From local corpus only: ").

Each fact is one reference document (title like "Spain capital city reference", text that states
the answer phrase verbatim) plus the question it answers. A task's corpus is the target document
and 9 distractor documents from the same table, shuffled, with ids doc1..doc10 assigned *after*
shuffling as in When2Tool, so the id says nothing about which document holds the answer.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from ..schema import DIFFICULTIES
from .common import Draw, EnvGenerator, cycle_split_facts, load_fact_table

TOOLS = ("search_corpus", "read_doc")
PREFIX = {"easy": "", "medium": "From local corpus: ", "hard": "From local corpus only: "}
N_DOCS = 10


@dataclass(frozen=True)
class RetrieverFact:
    question: str  # the question with its answer-format hint, e.g. "... ? Return city only."
    answer: str    # gold: the answer phrase exactly as the text writes it
    title: str
    text: str


@lru_cache(maxsize=None)
def load_retriever_facts(difficulty: str) -> tuple[RetrieverFact, ...]:
    """The Retriever fact table of one difficulty, in its fixed order (the order decides the split)."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r} not in {DIFFICULTIES}")
    name = f"retriever_{difficulty}.json"
    facts, questions, titles = [], set(), set()
    for i, rec in enumerate(load_fact_table(name)):
        where = f"facts/{name}: entry {i}"
        fields = {k: rec.get(k) for k in ("question", "answer", "title", "text")}
        for key, value in fields.items():
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: {key!r} must be a non-empty string")
        if "?" not in fields["question"]:
            raise ValueError(f"{where}: 'question' must contain the question mark")
        if fields["answer"] not in fields["text"]:
            raise ValueError(f"{where}: 'text' must contain the answer {fields['answer']!r} verbatim")
        # Unique questions keep the split clean; unique titles keep the search unambiguous.
        if fields["question"].lower() in questions or fields["title"].lower() in titles:
            raise ValueError(f"{where}: duplicate question or title")
        questions.add(fields["question"].lower())
        titles.add(fields["title"].lower())
        facts.append(RetrieverFact(**fields))
    if len(facts) < N_DOCS:
        raise ValueError(f"facts/{name}: need at least {N_DOCS} facts to fill a corpus")
    return tuple(facts)


def make_corpus(target: RetrieverFact, pool: tuple[RetrieverFact, ...], r: random.Random) -> list[dict]:
    """Target plus N_DOCS-1 distractors drawn from the whole table (either split: only the *asked*
    fact must belong to the task's split), shuffled, then numbered."""
    others = [f for f in pool if f is not target]
    docs = [target, *r.sample(others, N_DOCS - 1)]
    r.shuffle(docs)
    return [{"id": f"doc{i}", "title": f.title, "text": f.text} for i, f in enumerate(docs, start=1)]


def cell(difficulty: str, split: str, r: random.Random, n: int) -> list[Draw]:
    pool = load_retriever_facts(difficulty)
    # Each repeat of a fact gets a new corpus draw.
    return [(PREFIX[difficulty] + fact.question, fact.answer, {"corpus": make_corpus(fact, pool, r)})
            for fact in cycle_split_facts(pool, split, r, n)]


GENERATOR = EnvGenerator("RetrieverEnv", "retrieval", tools=lambda difficulty: TOOLS, cell=cell)
