"""The trivial tier: built-in tasks the embedded policy can answer without a tool, kept by measuring it.

On When2Tool's own tasks the default policy (tool_sft v3 on SmolLM2-135M) answers 2 of 108 test tasks right
with tools disabled, so every decision about *skipping* a tool is made on almost no evidence. This tier gives
it tasks where skipping can pay: one- and two-digit arithmetic, short counts and list edits, capitals,
well-known years and everyday counts, each asked the way its When2Tool environment asks (the same instruction
wording, tools and gold format, so the environment's tools answer it and the oracle solves it).

Every candidate template is kept or dropped **by measurement** (``benchmarks/trivial_tier.py``): the default
policy runs each one in ``hard_no_tool`` mode on a draw of *train* tasks, and a template is kept when it is
answered right often but not always (:data:`KEEP_RANGE`), so that whether a task needs a tool varies inside
a template too and a controller cannot read the label off the template. :data:`MEASURED` records that run;
:data:`KEPT` follows from it by the rule. Test tasks are fresh draws (test-owned instructions) of the kept
templates: nothing is selected on the test split. docs/results.md#a-task-tier-the-policy-can-answer-unaided
has the table and the command.

Why a task family and not ``difficulty=trivial``: the When2Tool schema has three difficulties, and the
difficulty drives the per-difficulty tables, stratified subsamples and SFT mixture rules of every other
source; a fourth value would be a schema change for all of them. The tier's tasks are ``easy`` tasks of their
environment, marked by the tag ``trivial`` (and the template name) and by ids
``builtin/trivial/<template>/<split>/<i>``; ``tasks.tier`` selects them (``data_builders/tasks/builtin.py``).

Splits: a template's instances belong to the split chosen by a hash of their instruction
(:func:`~.common.owner_split`), fact tables included, so train and test never share a question and appending
a fact never moves another one across.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from .calculator import TOOLS as CALC_TOOLS
from .calculator import _eval_int
from .common import Draw, digest, load_fact_table, owner_split
from .counting import TOOLS as COUNT_TOOLS
from .datetime_env import MONTHS, TOOLS as DATE_TOOLS
from .game_rule import RULE_INSTRUCTION, TOOLS as RULE_TOOLS
from .historical_year import HIST_INSTRUCTION, TOOLS as YEAR_TOOLS
from .list_manipulation import TOOLS_EASY as LIST_TOOLS
from .prime import TOOLS as PRIME_TOOLS
from .prime import is_prime
from .retriever import N_DOCS, TOOLS as RETRIEVER_TOOLS
from .statistics import TOOLS as STAT_TOOLS

# Kept iff measured accuracy (right / asked, hard_no_tool, train draw) lies in this closed range: "often"
# (at least 3 in 10) but "not always" (at least 1 in 20 wrong).
KEEP_RANGE = (0.30, 0.95)


@dataclass(frozen=True)
class TrivialTemplate:
    """One candidate: ``pool()`` enumerates every instance (instruction, gold, environment parameters) in a
    fixed order; a split owns the instances whose instruction hashes to it."""

    name: str
    env: str
    tools: tuple[str, ...]
    pool: Callable[[], list[Draw]]
    about: str   # what it asks, for the docs table


# ---------------------------------------------------------------------------- arithmetic (CalculatorEnv)
_CALC_PREFIX = "Answer with only the number: "   # When2Tool's easy Calculator wording


def _calc(pairs) -> Callable[[], list[Draw]]:
    def pool() -> list[Draw]:
        return [(_CALC_PREFIX + e, str(_eval_int(e)), {}) for e in pairs()]
    return pool


_ONE = range(1, 10)
_TWO = range(10, 100)


# ---------------------------------------------------------------------------- short counts and edits
def _sum_pair() -> list[Draw]:
    return [(f"What is the sum of {[a, b]}? Answer with only the number.", str(a + b), {}) for a in _ONE for b in _ONE]


def _choose_one() -> list[Draw]:
    # C(n, 1) = n, in the Counting environment's wording (its tool computes it)
    return [(f"How many ways can you choose 1 item from {n}? Answer with only the number.", str(n), {})
            for n in range(2, 61)]


def _days_between() -> list[Draw]:
    # Two dates a few days apart in one month, in the DateTime environment's same-year wording
    out = []
    for year in range(2020, 2027):
        for month in range(1, 13):
            for day in range(1, 26):
                for gap in (1, 2, 3):
                    m = MONTHS[month - 1]
                    out.append((f"How many days are between {m} {day} and {m} {day + gap}, {year}? "
                                "Answer with only the number.", str(gap), {}))
    return out


def _list_op(call: str, values: list[int], result: list[int]) -> Draw:
    return f"Single operation only. Initial {values}. Apply {call}. Return final list.", str(result), {}


def _list_append() -> list[Draw]:
    return [_list_op(f"append({c})", [a, b], [a, b, c]) for a in _ONE for b in _ONE for c in _ONE]


def _list_reverse() -> list[Draw]:
    return [_list_op("reverse()", [a, b], [b, a]) for a in _ONE for b in _ONE if a != b]


def _list_remove() -> list[Draw]:
    # three distinct digits, the middle one removed: no ambiguity about which occurrence goes
    return [_list_op(f"remove({b})", [a, b, c], [a, c]) for a in _ONE for b in _ONE for c in _ONE
            if len({a, b, c}) == 3]


# ---------------------------------------------------------------------------- facts (shipped tables)
@lru_cache(maxsize=None)
def _table(name: str, fields: tuple[tuple[str, type], ...]) -> tuple[dict, ...]:
    """A trivial-tier fact table, each record checked (file, entry and field named on error)."""
    rows = load_fact_table(name)
    seen = set()
    for i, rec in enumerate(rows):
        for key, typ in fields:
            value = rec.get(key)
            if not isinstance(value, typ) or isinstance(value, bool) or (isinstance(value, str) and not value.strip()):
                raise ValueError(f"facts/{name}: entry {i}: {key!r} must be a non-empty {typ.__name__}")
        first = str(rec[fields[0][0]]).lower()
        if first in seen:
            raise ValueError(f"facts/{name}: entry {i}: duplicate {fields[0][0]} {rec[fields[0][0]]!r}")
        seen.add(first)
    return tuple(rows)


def _retriever_pool(questions: list[tuple[str, str]], docs: list[dict]) -> list[Draw]:
    """Retriever tasks: question ``i`` is answered by ``docs[i]``. Each corpus is the target document and
    N_DOCS-1 others, shuffled and numbered as the Retriever generator does, drawn from a generator seeded by the
    question, so an instance is one fixed task."""
    out = []
    for i, (question, gold) in enumerate(questions):
        rng = random.Random(int.from_bytes(digest("toolwise.trivial.corpus", question)[:8], "big"))
        picked = [docs[i], *rng.sample(docs[:i] + docs[i + 1:], N_DOCS - 1)]
        rng.shuffle(picked)
        out.append((question, gold, {"corpus": [{"id": f"doc{j}", **d} for j, d in enumerate(picked, start=1)]}))
    return out


def _capital_docs(rows) -> list[dict]:
    return [{"title": f"{r['country']} capital city reference", "text": f"{r['capital']} is the capital of {r['country']}."}
            for r in rows]


def _capitals() -> list[Draw]:
    rows = _table("trivial_capitals.json", (("country", str), ("capital", str)))
    return _retriever_pool([(f"What is the capital of {r['country']}? Return city only.", r["capital"]) for r in rows],
                           _capital_docs(rows))


def _capital_countries() -> list[Draw]:
    # The capitals the policy names asked the other way round: the same documents answer them
    rows = _table("trivial_capitals.json", (("country", str), ("capital", str)))
    # Reference documents open with their answer (as the Retriever tables' do), so these name the country first
    docs = [{"title": f"{r['capital']} city reference", "text": f"{r['country']} is the country whose capital is "
             f"{r['capital']}."} for r in rows]
    return _retriever_pool([(f"{r['capital']} is the capital of which country? Return country only.", r["country"])
                            for r in rows], docs)


def _continents() -> list[Draw]:
    # Countries that lie on one continent only (no Russia, Turkey or Australia: their gold would be disputable)
    rows = _table("trivial_continents.json", (("country", str), ("continent", str)))
    docs = [{"title": f"{r['country']} geography reference",
             "text": f"{r['continent']} is the continent where {r['country']} lies."} for r in rows]
    return _retriever_pool([(f"On which continent is {r['country']}? Return continent only.", r["continent"])
                            for r in rows], docs)


def _is_prime_small() -> list[Draw]:
    # The Prime environment's easy is-prime wording over 2..99
    return [(f"Is {n} prime? Answer True or False.", str(is_prime(n)), {}) for n in range(2, 100)]


def _famous_years() -> list[Draw]:
    rows = _table("trivial_years.json", (("event", str), ("year", int)))
    corpus = {r["event"]: f"In {r['year']}: {r['event']}." for r in rows}
    return [(HIST_INSTRUCTION.format(event=r["event"]), str(r["year"]), {"corpus": dict(corpus)}) for r in rows]


def _everyday_counts() -> list[Draw]:
    rows = _table("trivial_counts.json", (("question", str), ("answer", int), ("paragraph", str)))
    for i, r in enumerate(rows):
        if str(r["answer"]) not in r["paragraph"]:
            raise ValueError(f"facts/trivial_counts.json: entry {i}: 'paragraph' must contain the answer {r['answer']}")
    corpus = {r["question"]: r["paragraph"] for r in rows}   # the whole table, as GameRule tasks carry theirs
    return [(RULE_INSTRUCTION.format(question=r["question"]), str(r["answer"]), {"corpus": dict(corpus)})
            for r in rows]


CANDIDATES: dict[str, TrivialTemplate] = {t.name: t for t in (
    TrivialTemplate("add_1d", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}+{b}" for a in _ONE for b in _ONE]),
                    "a+b, one digit each"),
    TrivialTemplate("sub_1d", "CalculatorEnv", CALC_TOOLS,
                    _calc(lambda: [f"{a}-{b}" for a in range(2, 10) for b in range(1, a)]), "a-b, one digit, a > b"),
    TrivialTemplate("mul_1d", "CalculatorEnv", CALC_TOOLS,
                    _calc(lambda: [f"{a}*{b}" for a in range(2, 10) for b in range(2, 10)]), "a*b, 2..9"),
    TrivialTemplate("add_2d_1d", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}+{b}" for a in _TWO for b in _ONE]),
                    "two digits + one digit"),
    TrivialTemplate("sub_2d_1d", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}-{b}" for a in _TWO for b in _ONE]),
                    "two digits - one digit"),
    TrivialTemplate("add_2d", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}+{b}" for a in _TWO for b in _TWO]),
                    "two digits + two digits"),
    TrivialTemplate("mul_2d_1d", "CalculatorEnv", CALC_TOOLS,
                    _calc(lambda: [f"{a}*{b}" for a in range(11, 31) for b in range(2, 10)]), "11..30 * 2..9"),
    TrivialTemplate("succ_2d", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}+1" for a in _TWO]),
                    "two digits + 1"),
    TrivialTemplate("times_one", "CalculatorEnv", CALC_TOOLS, _calc(lambda: [f"{a}*1" for a in range(2, 100)]),
                    "n*1, n in 2..99"),
    TrivialTemplate("sum_pair", "StatisticsEnv", STAT_TOOLS, _sum_pair, "sum of a two-element list, one digit each"),
    TrivialTemplate("choose_one", "CountingEnv", COUNT_TOOLS, _choose_one, "ways to choose 1 item from n (= n)"),
    TrivialTemplate("days_between", "DateTimeEnv", DATE_TOOLS, _days_between,
                    "days between two dates 1-3 days apart in one month"),
    TrivialTemplate("list_append", "ListManipulationEnv", LIST_TOOLS, _list_append,
                    "append a digit to a two-element list"),
    TrivialTemplate("list_reverse", "ListManipulationEnv", LIST_TOOLS, _list_reverse, "reverse a two-element list"),
    TrivialTemplate("list_remove", "ListManipulationEnv", LIST_TOOLS, _list_remove,
                    "remove the middle one of three distinct digits"),
    TrivialTemplate("capital", "RetrieverEnv", RETRIEVER_TOOLS, _capitals, "capital of a country (52 countries)"),
    TrivialTemplate("capital_country", "RetrieverEnv", RETRIEVER_TOOLS, _capital_countries,
                    "the country whose capital a city is (the same 52)"),
    TrivialTemplate("continent", "RetrieverEnv", RETRIEVER_TOOLS, _continents,
                    "the continent of a country (68 one-continent countries)"),
    TrivialTemplate("is_prime", "PrimeEnv", PRIME_TOOLS, _is_prime_small, "is n prime, n in 2..99 (True/False)"),
    TrivialTemplate("famous_year", "HistoricalYearEnv", YEAR_TOOLS, _famous_years,
                    "year of a well-known event (42 events)"),
    TrivialTemplate("everyday_count", "GameRuleEnv", RULE_TOOLS, _everyday_counts,
                    "everyday counts: days in a week, legs of a spider (44 questions)"),
)}

# Right / asked per candidate, from one run of ``python benchmarks/trivial_tier.py`` (the default policy,
# hard_no_tool, train split, seed 0): docs/results.md#a-task-tier-the-policy-can-answer-unaided.
MEASURED: dict[str, tuple[int, int]] = {
    "add_1d": (0, 16), "sub_1d": (0, 16), "mul_1d": (0, 16), "add_2d_1d": (0, 16), "sub_2d_1d": (0, 16),
    "add_2d": (0, 16), "mul_2d_1d": (0, 16), "succ_2d": (0, 16), "times_one": (16, 16), "sum_pair": (4, 16),
    "choose_one": (5, 16), "days_between": (1, 16), "list_append": (0, 16), "list_reverse": (1, 16),
    "list_remove": (0, 16), "capital": (9, 16), "famous_year": (3, 16), "everyday_count": (0, 16),
    # second round of candidates (facts asked the other way round, a second fact table, True/False checks),
    # ``python benchmarks/trivial_tier.py --templates capital_country continent is_prime --standard-per-cell 0``
    "capital_country": (7, 16), "continent": (10, 16), "is_prime": (5, 16),
}


def kept(measured: dict[str, tuple[int, int]] | None = None) -> tuple[str, ...]:
    """The candidates whose measured accuracy lies in :data:`KEEP_RANGE`, in candidate order."""
    measured = MEASURED if measured is None else measured
    lo, hi = KEEP_RANGE
    return tuple(n for n in CANDIDATES if n in measured and lo <= measured[n][0] / measured[n][1] <= hi)


KEPT: tuple[str, ...] = kept()


@lru_cache(maxsize=None)
def split_pool(name: str, split: str) -> tuple[Draw, ...]:
    """The instances of template ``name`` that ``split`` owns, in pool order."""
    return tuple(d for d in CANDIDATES[name].pool() if owner_split(d[0]) == split)


def template_cell(name: str, split: str, r: random.Random, n: int) -> list[Draw]:
    """``n`` instances of ``split``'s share of template ``name``, in shuffled order; when more are asked for than
    the share holds, fresh permutations follow (repeats stay inside the split). A smaller ``n`` is a prefix."""
    mine = split_pool(name, split)
    if n and not mine:
        raise ValueError(f"trivial template {name!r} has no {split} instance")
    out: list[Draw] = []
    while len(out) < n:
        order = list(mine)
        r.shuffle(order)
        out.extend(order[: n - len(out)])
    return out
