"""GameRuleEnv tasks from shipped fact tables (easy: well-known real rules, medium: less-known real
rules, hard: invented games).

As in When2Tool, a task's corpus is the *whole* table of its difficulty in fixed order (the lookup
rule is first-match over stored keys, so order matters), and the question asked is itself the key.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache

from ..schema import DIFFICULTIES
from .common import Draw, EnvGenerator, cycle_split_facts, load_fact_table

TOOLS = ("lookup_rule",)
RULE_INSTRUCTION = "{question} Answer with only the number."


@dataclass(frozen=True)
class GameRuleFact:
    question: str   # corpus key and the question asked ("How many ...?")
    answer: int     # gold answer
    paragraph: str  # corpus value; contains the answer as a standalone number


def _has_number(text: str, n: int) -> bool:
    # Standalone: "8" must not be read out of "18", "8,000" or "8.5".
    return re.search(rf"(?<![\d,.]){n}(?![\d,]|\.\d)", text) is not None


@lru_cache(maxsize=None)
def load_game_rule_facts(difficulty: str) -> tuple[GameRuleFact, ...]:
    """The GameRule fact table of one difficulty, in its fixed (corpus) order."""
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r} not in {DIFFICULTIES}")
    name = f"game_rule_{difficulty}.json"
    facts, seen = [], set()
    for i, rec in enumerate(load_fact_table(name)):
        where = f"facts/{name}: entry {i}"
        question, answer, paragraph = rec.get("question"), rec.get("answer"), rec.get("paragraph")
        if not isinstance(question, str) or not question.startswith("How many ") or not question.endswith("?"):
            raise ValueError(f"{where}: 'question' must be a 'How many ...?' string")
        if type(answer) is not int or answer < 0:
            raise ValueError(f"{where}: 'answer' must be a non-negative integer")
        if not isinstance(paragraph, str) or not _has_number(paragraph, answer):
            raise ValueError(f"{where}: 'paragraph' must contain the answer {answer} as a standalone number")
        if question.lower() in seen:
            raise ValueError(f"{where}: duplicate question {question!r}")
        seen.add(question.lower())
        facts.append(GameRuleFact(question, answer, paragraph))
    return tuple(facts)


def cell(difficulty: str, split: str, r: random.Random, n: int) -> list[Draw]:
    pool = load_game_rule_facts(difficulty)
    return [(RULE_INSTRUCTION.format(question=fact.question), str(fact.answer),
             {"corpus": {f.question: f.paragraph for f in pool}})  # a fresh dict per task
            for fact in cycle_split_facts(pool, split, r, n)]


GENERATOR = EnvGenerator("GameRuleEnv", "game_rule", tools=lambda difficulty: TOOLS, cell=cell)
