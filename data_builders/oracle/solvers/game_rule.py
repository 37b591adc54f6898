"""GameRuleEnv: look up the question itself, then read the number that answers it from the passage.

The lookup is mechanical (the instruction without " Answer with only the number." is the corpus key
in 100% of When2Tool's tasks). The reading is not: passages often carry several numbers ("32 black
squares ... of the 64 total"), and the question may itself contain numbers ("19x19 Go board",
"110m hurdles") that the passage repeats. The reader therefore prefers a number directly followed
by the thing counted, skips numbers the question already states, and falls back to the first one.
"""
from __future__ import annotations

import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

SUFFIX = " Answer with only the number."
_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?![\d])")
_WORD = re.compile(r"[a-z]+")
# Where the counted phrase of "How many <phrase> <verb> ..." ends.
_VERBS = frozenset("""are is does do did must can could will would should make makes earn earns win wins
    form forms exist exists have has need needs""".split())
_STOP = frozenset("a an the and or each".split())
_PREPOSITIONS = frozenset("per in on at of to for from with by".split())
LOOKAHEAD_WORDS = 4  # how far after a number the counted noun may appear ("12 pieces", "4 railroad spaces")


def question_of(instruction: str) -> str:
    if instruction.endswith(SUFFIX):
        return instruction[: -len(SUFFIX)]
    if "?" not in instruction:
        raise OracleParseError("no question in the instruction")
    return instruction[: instruction.rindex("?") + 1]


def _stem(word: str) -> str:
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) > len(suffix) + 2:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def counted_words(question: str) -> set[str]:
    """Stems of the phrase being counted: "How many black squares are ..." -> {"black", "squar"}."""
    m = re.match(r"\s*how many (.*)", question, re.IGNORECASE)
    words = _WORD.findall(m.group(1).lower()) if m else []
    out = set()
    for w in words:
        if w in _VERBS or w in _PREPOSITIONS:  # "How many players per team ..." counts players
            break
        if w not in _STOP:
            out.add(_stem(w))
    return out


def _answers_count(m: re.Match, passage: str, counted: set[str]) -> bool:
    """Whether the number at ``m`` is stated as the count asked for: followed by the counted noun
    ("16 pieces"), or completing a clause about it ("The maximum points ... is 50")."""
    following = _WORD.findall(passage[m.end():].lower())[:LOOKAHEAD_WORDS]
    if counted & {_stem(w) for w in following}:
        return True
    clause = re.split(r"[.;:!?]\s", passage[: m.start()])[-1].lower()
    before = _WORD.findall(clause)
    return bool(before) and before[-1] in ("is", "are") and bool(counted & {_stem(w) for w in before})


def read_number(question: str, passage: str) -> str:
    """The number in ``passage`` that answers ``question``, without thousands separators.

    Preference: a number stated as the count and not already in the question; then any number
    stated as the count ("a 9x9 grid is divided into 9 regions"); then the first new number."""
    found = list(_NUMBER.finditer(passage))
    if not found:
        raise OracleParseError("no number in the passage")
    stated = {m.group(1) for m in _NUMBER.finditer(question)}
    fresh = [m for m in found if m.group(1) not in stated] or found
    counted = counted_words(question)
    for pool in (fresh, found):
        for m in pool:
            if _answers_count(m, passage, counted):
                return m.group(1).replace(",", "")
    return fresh[0].group(1).replace(",", "")


def solve(task: Task, call: CallFn) -> str:
    question = question_of(task.instruction)
    out = call("lookup_rule", {"query": question})
    return read_number(question, out["passage"])


SOLVERS = {("GameRuleEnv", False): solve}
