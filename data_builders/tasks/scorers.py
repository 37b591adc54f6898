"""Answer scorers for tasks that bring their own rule (a task's ``scorer`` field; data_builders/tasks/custom.py).

A spec is a name (``"exact"``), a mapping with ``kind`` and the scorer's fields
(``{"kind": "numeric", "tolerance": 0.01, "relative": true}``), or None (``when2tool``).
:func:`scorer_from_spec` checks every field and raises :class:`ScorerError` naming it
(``scorer.tolerance: expected a non-negative number, got -1``). ``Scorer.spec()`` is the canonical spec, with
every default filled in: it is recorded with results, and ``scorer_from_spec(s.spec())`` rebuilds the same scorer.

"The answer" below, for every scorer but ``when2tool`` and ``judge``: the content of the *last* ``\\boxed{...}``
(brace-matched, stripped) if the response has a box, else the whole response stripped. The last box, because an
agent that restates the format ("I'll put it in \\boxed{}") or corrects itself ends with its answer. An empty box
is an empty answer, and an empty answer never scores correct. A response that is not a string, or is blank,
scores False.

Scorers:

``when2tool``
    Exactly :func:`~data_builders.tasks.scoring.is_correct`, the benchmark's rule and its quirks (first box only,
    no box fails, ``"8400"`` fails gold ``"8,400"``): scores stay comparable with the published numbers. A
    missing gold scores False, as ``is_correct`` does.
``exact``
    The answer equals gold exactly after ``str.strip()`` on both.
``normalized``
    Both sides: Unicode NFKC, then the benchmark's scalar normalisation
    (:func:`~data_builders.tasks.scoring.normalize_scalar`: whitespace collapsed, one pair of surrounding quotes
    dropped, ``\\text{}``/``\\mathrm{}`` unwrapped, other braces and backslashes removed), casefolded; then
    surrounding quotes (ASCII and typographic), markdown ``*``, and ``, ; : ! ?`` are stripped from both ends, and
    trailing periods from the end, until none is left. Signs, brackets, ``%`` and a leading ``.`` stay (``-5`` is
    not ``5``, ``.5`` is not ``5``). Then equal, and not empty.
``numeric``
    The first number in the answer against gold's first number. A number is an optional sign, an optional
    currency symbol (any Unicode currency sign, before or after the sign: ``-$5``, ``$-5``), digits with optional
    thousands separators in groups of three (``1,234,567``), an optional decimal part (``12.5``, ``.5``) and an
    optional exponent (``6.02e23``, read as a float); what follows (``12.5 km``, ``40%``) is ignored. The digits go
    through :func:`~data_builders.tasks.scoring.parse_number`. A comma is never a decimal point: ``12,5`` reads 12.
    With no box the whole response is read, so its first number counts: ask agents to box. Equal within
    ``tolerance`` (default 1e-6): ``|answer - gold| <= tolerance``, or with ``relative: true``
    ``|answer - gold| <= tolerance * |gold|`` (so gold 0 needs exactly 0), computed in exact rational arithmetic so
    that very large integers compare correctly. A gold that holds no number raises ValueError (a task file bug,
    not a wrong answer).
``regex``
    ``re.fullmatch(pattern, answer)``; ``pattern`` from the spec, else the gold is the pattern. ``ignore_case``
    (default false) adds ``re.IGNORECASE``. A spec pattern is compiled when the spec is read (a bad one is a
    ScorerError naming ``scorer.pattern``); a gold pattern when first used (a bad one raises ValueError).
``judge``
    An LLM judge behind an OpenAI-compatible endpoint (:class:`~data_builders.tasks.judge.Judge`), given the
    instruction, the whole response (a free-form agent may not box its answer) and the gold. Fields:
    ``base_url`` and ``model`` (required), ``rubric`` (default :data:`~data_builders.tasks.judge.DEFAULT_RUBRIC`),
    ``api_key_env`` (default ``OPENAI_API_KEY``; the key itself is never recorded), ``cache_dir`` (default
    ``~/.cache/toolwise/judge``; null: no cache), ``timeout_s`` (60), ``max_retries`` (3). It needs gold only if
    the rubric uses ``{gold}``. A judge that is down raises :class:`~data_builders.tasks.judge.JudgeError`,
    never a silent False.
``bfcl_ast``
    The Berkeley Function Calling Leaderboard's rule (``data_builders/tasks/bfcl.py``), on the episode's executed
    calls, never its text: ``irrelevance`` is correct iff there is no executed call; ``simple_python`` and
    ``multiple`` iff there is exactly one and BFCL's AST checker (``data_builders/tasks/bfcl_ast.py``, a port
    tested against the original) accepts it against the possible answer (the gold, as JSON). Fields: ``category``
    and, but for irrelevance, ``functions`` (the record's BFCL function docs: the checker reads their types, and
    maps a called name with ``_`` for ``.`` back to the documented one). It needs gold but for irrelevance.
``package.module:callable``
    A scorer of your own, with no change to toolwise: ``callable(final_response, gold, instruction=...) -> bool``
    gets the raw response (extract what it needs; :func:`extract_answer` is here). Its only field is
    ``needs_gold`` (default true). Returning anything but a bool raises TypeError.

A scorer that needs gold raises ValueError when called without one (a loader checks ``needs_gold`` first). A
scorer that judges calls rather than text sets ``needs_calls = True``: :func:`score_task` then passes it
``calls=`` (the episode's executed calls as ``(name, arguments)``), and calling it without them raises ValueError
(no calls passed is not the same as no calls made).
:data:`SCORERS` maps names to factories called with the spec's fields as keywords; adding an entry registers a
scorer under a name. :func:`agreement` compares two scorers' verdicts (e.g. a judge against ``exact``).
"""
from __future__ import annotations

import inspect
import json
import math
import re
import threading
import unicodedata
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from importlib import import_module
from typing import Any, Callable, Protocol, runtime_checkable

from ..tool_sources.bfcl import original_names
from .bfcl_ast import SUPPORTED_CATEGORIES as BFCL_CALL_CATEGORIES, ast_checker
from .scoring import BOXED_OPEN, boxed_span, is_correct, normalize_scalar, parse_number
from .judge import DEFAULT_API_KEY_ENV, DEFAULT_CACHE_DIR, DEFAULT_RUBRIC, Judge, rubric_fields

__all__ = ["ScorerError", "Scorer", "SCORERS", "scorer_from_spec", "score_task", "extract_answer", "agreement",
           "When2ToolScorer", "ExactScorer", "NormalizedScorer", "NumericScorer", "RegexScorer", "JudgeScorer",
           "UserScorer", "BFCLASTScorer"]


class ScorerError(ValueError):
    """A scorer spec that cannot be used; the message starts with the field (``scorer.tolerance: ...``)."""


@runtime_checkable
class Scorer(Protocol):
    name: str
    needs_gold: bool

    def __call__(self, final_response: str, gold: str | None, *, instruction: str = "") -> bool: ...

    def spec(self) -> dict: ...


# ---------------------------------------------------------------- the answer

def extract_answer(final_response: str) -> str:
    """The last ``\\boxed{...}``'s content (brace-matched, stripped), else the whole response stripped."""
    if not isinstance(final_response, str):
        return ""
    start = final_response.rfind(BOXED_OPEN)
    if start < 0:
        return final_response.strip()
    # boxed_span is extract_boxed's brace matcher; extract_boxed itself is not used because it turns an
    # empty box into the whole text, a benchmark quirk kept only for when2tool.
    begin, end = boxed_span(final_response[start:])
    return final_response[start + begin:start + end].strip()


def _gold_text(gold: Any) -> str:
    # Task files may hold numeric golds; they score as their text.
    return gold if isinstance(gold, str) else str(gold)


# ---------------------------------------------------------------- field checks

def _fail(field: str, problem: str) -> ScorerError:
    return ScorerError(f"scorer.{field}: {problem}")


def _check_bool(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(field, f"expected true or false, got {value!r}")
    return value


def _check_number(field: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise _fail(field, f"expected a {'positive' if positive else 'non-negative'} number, got {value!r}")
    return value


def _check_str(field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(field, f"expected a non-empty string, got {value!r}")
    return value


# ---------------------------------------------------------------- scorers

class _Base:
    name = ""
    needs_gold = True
    needs_calls = False       # True: judged on the episode's executed calls, passed as calls= (score_task)

    def __call__(self, final_response: str, gold: str | None, *, instruction: str = "") -> bool:
        if gold is None and self.needs_gold:
            raise ValueError(f"the {self.name} scorer needs a gold answer, and the task has none")
        if not isinstance(final_response, str) or not final_response.strip():
            return False
        return self._score(final_response, gold, instruction)

    def _score(self, final_response: str, gold: Any, instruction: str) -> bool:
        raise NotImplementedError

    def _fields(self) -> dict[str, Any]:
        return {}

    def spec(self) -> dict:
        return {"kind": self.name, **self._fields()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({json.dumps(self.spec(), sort_keys=True)})"


class When2ToolScorer(_Base):
    name = "when2tool"

    def __call__(self, final_response: str, gold: str | None, *, instruction: str = "") -> bool:
        return is_correct(final_response, gold)   # the benchmark's rule, untouched (a None gold: False)


class ExactScorer(_Base):
    name = "exact"

    def _score(self, final_response, gold, instruction):
        answer = extract_answer(final_response)
        return bool(answer) and answer == _gold_text(gold).strip()


# Stripped from both ends by `normalized`: quotes (ASCII, and Unicode's initial/final quote classes), markdown
# emphasis, and clause punctuation. Not signs, brackets, % or ".": they can carry meaning at the front.
_EDGE = "\"'`*,;:!?"


def _edge_char(ch: str) -> bool:
    return ch in _EDGE or unicodedata.category(ch) in ("Pi", "Pf")


def normalize_text(text: str) -> str:
    """The ``normalized`` scorer's form of one side (see the module docstring)."""
    s = unicodedata.normalize("NFKC", text)
    s = normalize_scalar(s)
    s = unicodedata.normalize("NFKC", s.casefold())
    while True:
        before = s
        i, j = 0, len(s)
        while i < j and _edge_char(s[i]):
            i += 1
        while j > i and (_edge_char(s[j - 1]) or s[j - 1] == "."):
            j -= 1
        s = s[i:j].strip()
        if s == before:
            return s


class NormalizedScorer(_Base):
    name = "normalized"

    def _score(self, final_response, gold, instruction):
        answer = normalize_text(extract_answer(final_response))
        return bool(answer) and answer == normalize_text(_gold_text(gold))


# Digits with thousands separators in groups of three (not followed by another digit: "1,2345" is 1), or plain
# digits; then a decimal part. A sign right before the digits counts unless it follows a word character
# ("item-5" is 5, "x = -5" is -5).
_NUMBER = re.compile(r"(?:(?<!\w)(?P<sign>[+\-\u2212]))?"
                     r"(?P<num>(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"
                     r"(?:[eE](?P<exp>[+\-]?\d{1,3})(?!\w))?")


def first_number(text: str) -> int | float | None:
    """The ``numeric`` scorer's number: the first one in ``text`` (see the module docstring), or None."""
    if not isinstance(text, str):
        return None
    m = _NUMBER.search(text)
    if m is None:
        return None
    sign = m.group("sign")
    if sign is None:
        # A currency sign between the sign and the digits: "-$5", "+€3".
        k = m.start()
        if k >= 2 and unicodedata.category(text[k - 1]) == "Sc" and text[k - 2] in "+-\u2212" \
                and (k == 2 or not text[k - 3].isalnum()):
            sign = text[k - 2]
    value = parse_number(("-" if sign in ("-", "\u2212") else "") + m.group("num").replace(",", ""))
    if value is None or m.group("exp") is None:
        return value
    # Scientific notation, which parse_number does not read (6.02e23 is not 6.02); float() rounds it correctly.
    scaled = float(f"{value!r}e{m.group('exp')}")
    return scaled if math.isfinite(scaled) else None   # beyond a float: not a number to compare


class NumericScorer(_Base):
    name = "numeric"

    def __init__(self, tolerance: float = 1e-6, relative: bool = False):
        self.tolerance = _check_number("tolerance", tolerance)
        self.relative = _check_bool("relative", relative)
        self._tol = Fraction(self.tolerance)

    def _fields(self):
        return {"tolerance": self.tolerance, "relative": self.relative}

    def _score(self, final_response, gold, instruction):
        if isinstance(gold, (int, float)) and not isinstance(gold, bool) and math.isfinite(gold):
            want = gold
        else:
            want = first_number(_gold_text(gold))
            if want is None:
                raise ValueError(f"the numeric scorer's gold {gold!r} holds no number")
        got = first_number(extract_answer(final_response))
        if got is None:
            return False
        diff = abs(Fraction(got) - Fraction(want))
        return diff <= (self._tol * abs(Fraction(want)) if self.relative else self._tol)


@lru_cache(maxsize=4096)
def _gold_pattern(pattern: str, flags: int) -> re.Pattern:
    try:
        return re.compile(pattern, flags)
    except re.error as e:
        raise ValueError(f"the regex scorer has no scorer.pattern, so the gold is the pattern, and gold "
                         f"{pattern!r} is not a valid regular expression: {e}") from e


class RegexScorer(_Base):
    name = "regex"

    def __init__(self, pattern: str | None = None, ignore_case: bool = False):
        self.ignore_case = _check_bool("ignore_case", ignore_case)
        self._flags = re.IGNORECASE if ignore_case else 0
        self.pattern = pattern
        self._compiled = None
        if pattern is not None:
            if not isinstance(pattern, str):
                raise _fail("pattern", f"expected a regular expression string, got {pattern!r}")
            try:
                self._compiled = re.compile(pattern, self._flags)
            except re.error as e:
                raise _fail("pattern", f"not a valid regular expression ({e}): {pattern!r}") from e

    @property
    def needs_gold(self) -> bool:
        return self._compiled is None

    def _fields(self):
        return {"pattern": self.pattern, "ignore_case": self.ignore_case}

    def _score(self, final_response, gold, instruction):
        compiled = self._compiled or _gold_pattern(_gold_text(gold), self._flags)
        answer = extract_answer(final_response)
        return bool(answer) and compiled.fullmatch(answer) is not None


class JudgeScorer(_Base):
    name = "judge"

    def __init__(self, base_url: str | None = None, model: str | None = None, rubric: str = DEFAULT_RUBRIC,
                 api_key_env: str = DEFAULT_API_KEY_ENV, cache_dir: str | None = DEFAULT_CACHE_DIR,
                 timeout_s: float = 60, max_retries: int = 3):
        if base_url is None:
            raise _fail("base_url", "required: the judge's OpenAI-compatible endpoint (http://host:port/v1)")
        if model is None:
            raise _fail("model", "required: the judge model's name on that endpoint")
        self.base_url = _check_str("base_url", base_url)
        self.model = _check_str("model", model)
        if not isinstance(rubric, str):
            raise _fail("rubric", f"expected a str.format template, got {rubric!r}")
        try:
            fields = rubric_fields(rubric)
        except ValueError as e:
            raise _fail("rubric", str(e)) from e
        self.rubric = rubric
        self.api_key_env = _check_str("api_key_env", api_key_env)
        if cache_dir is not None:
            _check_str("cache_dir", cache_dir)
        self.cache_dir = cache_dir
        self.timeout_s = _check_number("timeout_s", timeout_s, positive=True)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise _fail("max_retries", f"expected a non-negative integer, got {max_retries!r}")
        self.max_retries = max_retries
        self._needs_gold = "gold" in fields
        self._judge: Judge | None = None
        self._lock = threading.Lock()

    @property
    def needs_gold(self) -> bool:
        return self._needs_gold

    @property
    def judge(self) -> Judge:
        # Built on first use: reading a task file checks the spec but must not need the key or the client.
        with self._lock:
            if self._judge is None:
                self._judge = Judge(self.base_url, self.model, self.rubric, api_key_env=self.api_key_env,
                                    cache_dir=self.cache_dir, timeout_s=self.timeout_s,
                                    max_retries=self.max_retries)
            return self._judge

    def _fields(self):
        return {"base_url": self.base_url, "model": self.model, "rubric": self.rubric,
                "api_key_env": self.api_key_env, "cache_dir": self.cache_dir, "timeout_s": self.timeout_s,
                "max_retries": self.max_retries}

    def _score(self, final_response, gold, instruction):
        gold_text = None if gold is None else _gold_text(gold)
        return self.judge.judge(instruction, final_response.strip(), gold_text).correct


class UserScorer(_Base):
    """A ``package.module:callable`` scorer (see the module docstring)."""

    def __init__(self, kind: str, needs_gold: bool = True):
        self.name = kind
        self.needs_gold = _check_bool("needs_gold", needs_gold)
        self.fn = _load_callable(kind)

    def _fields(self):
        return {"needs_gold": self.needs_gold}

    def __call__(self, final_response, gold, *, instruction: str = "") -> bool:
        if gold is None and self.needs_gold:
            raise ValueError(f"the {self.name} scorer needs a gold answer, and the task has none")
        result = self.fn(final_response, gold, instruction=instruction)
        if type(result).__name__ not in ("bool", "bool_"):   # numpy's bool too; None or 0/1 is a bug to show
            raise TypeError(f"scorer {self.name} returned {type(result).__name__} {result!r}, not a bool")
        return bool(result)


BFCL_CATEGORIES = ("irrelevance",) + BFCL_CALL_CATEGORIES


class BFCLASTScorer(_Base):
    """BFCL's rule on the episode's executed calls (see the module docstring)."""
    name = "bfcl_ast"
    needs_calls = True

    def __init__(self, category: str | None = None, functions: list | None = None):
        if category not in BFCL_CATEGORIES:
            raise _fail("category", f"expected one of {', '.join(BFCL_CATEGORIES)}, got {category!r}")
        self.category = category
        if category == "irrelevance":
            if functions is not None:
                raise _fail("functions", "irrelevance is scored without them (correct iff no call): leave it out")
        elif not (isinstance(functions, list) and functions and
                  all(isinstance(f, Mapping) and isinstance(f.get("name"), str) for f in functions)):
            raise _fail("functions", f"required for {category}: the record's BFCL function docs, got {functions!r}")
        self.functions = functions
        # A call names a function as the model was shown it ("." replaced by "_"); the checker, and the possible
        # answers, use the documented name.
        self._documented = original_names(functions or [])

    @property
    def needs_gold(self) -> bool:
        return self.category != "irrelevance"

    def _fields(self):
        return {"category": self.category, **({"functions": self.functions} if self.functions is not None else {})}

    def __call__(self, final_response: str, gold: Any, *, instruction: str = "", calls=None) -> bool:
        if calls is None:
            raise ValueError("the bfcl_ast scorer judges the episode's executed calls, and none were passed: "
                             "score_task(task, final_response, calls=[(name, arguments), ...])")
        calls = list(calls)
        if self.category == "irrelevance":
            return not calls
        if gold is None:
            raise ValueError(f"the {self.name} scorer needs a gold answer, and the task has none")
        possible = json.loads(gold) if isinstance(gold, str) else gold
        output = [{self._documented.get(name, name): args} for name, args in calls]
        try:
            return bool(ast_checker(self.functions, output, possible, self.category)["valid"])
        except (AttributeError, KeyError, TypeError, IndexError):
            # Arguments of a shape the checker cannot walk (a list item that is not an object where objects are
            # expected, say): BFCL would stop there; a call it cannot read is not a correct one.
            return False


def _load_callable(kind: str) -> Callable:
    mod_name, _, attr = kind.partition(":")
    if not mod_name or not attr:
        raise _fail("kind", f"unknown scorer {kind!r}; known: {', '.join(sorted(SCORERS))}, or a scorer of "
                            "your own as 'package.module:callable'")
    try:
        obj: Any = import_module(mod_name)
    except Exception as e:   # noqa: BLE001 - any failure of a user module is reported the same way
        raise _fail("kind", f"cannot import {mod_name!r} for scorer {kind!r}: {type(e).__name__}: {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _fail("kind", f"{mod_name!r} has no {attr!r} (scorer {kind!r})")
        obj = getattr(obj, part)
    if not callable(obj):
        raise _fail("kind", f"{kind!r} is not callable")
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):   # some builtins have none: the first call will tell
        return obj
    try:
        sig.bind("", "", instruction="")
    except TypeError as e:
        raise _fail("kind", f"{kind!r} must accept (final_response, gold, instruction=...): {e}") from e
    return obj


SCORERS: dict[str, Callable[..., Scorer]] = {
    "when2tool": When2ToolScorer,
    "exact": ExactScorer,
    "normalized": NormalizedScorer,
    "numeric": NumericScorer,
    "regex": RegexScorer,
    "judge": JudgeScorer,
    "bfcl_ast": BFCLASTScorer,
}


def _keyword_names(factory: Callable) -> set[str] | None:
    """The keywords a factory accepts; None when it takes **kwargs (then it checks its own fields)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}


def scorer_from_spec(spec: str | Mapping[str, Any] | None) -> Scorer:
    """A scorer from its spec (see the module docstring); :class:`ScorerError` names a bad field."""
    if spec is None:
        return When2ToolScorer()
    if isinstance(spec, str):
        kind, fields = spec, {}
    elif isinstance(spec, Mapping):
        fields = {str(k): v for k, v in spec.items()}
        kind = fields.pop("kind", None)
        if kind is None:
            raise _fail("kind", f"required: one of {', '.join(sorted(SCORERS))}, or 'package.module:callable'")
    else:
        raise ScorerError(f"scorer: expected a name, a mapping with 'kind', or null, got {type(spec).__name__}")
    if not isinstance(kind, str) or not kind.strip():
        raise _fail("kind", f"expected a scorer name, got {kind!r}")
    if kind in SCORERS:
        factory = SCORERS[kind]
        accepted = _keyword_names(factory)
    elif ":" in kind:
        factory, accepted = (lambda **kw: UserScorer(kind, **kw)), {"needs_gold"}
    else:
        raise _fail("kind", f"unknown scorer {kind!r}; known: {', '.join(sorted(SCORERS))}, or a scorer of "
                            "your own as 'package.module:callable'")
    if accepted is not None:
        for name in sorted(fields):
            if name not in accepted:
                raise _fail(name, f"unknown field for the {kind} scorer (accepted: "
                                  f"{', '.join(sorted(accepted)) or 'none'})")
    try:
        scorer = factory(**fields)
    except ScorerError:
        raise
    except TypeError as e:   # a registered factory of someone else's that refused its fields
        raise ScorerError(f"scorer: the {kind} scorer refused its fields: {e}") from e
    return scorer


# One scorer per distinct spec: a judge keeps its client across the episodes of a run.
_BUILT: dict[str, Scorer] = {}
_BUILT_LOCK = threading.Lock()


def cached_scorer(spec: str | Mapping[str, Any]) -> Scorer:
    """The scorer of ``spec``, built once per distinct spec in this process (a judge keeps its client)."""
    key = json.dumps(spec, sort_keys=True, default=str) if not isinstance(spec, str) else spec
    with _BUILT_LOCK:
        scorer = _BUILT.get(key)
        if scorer is None:
            scorer = _BUILT[key] = scorer_from_spec(spec)
    return scorer


def score_task(task: Any, final_response: str, calls: Any = None) -> bool:
    """Score a task's final response with the task's scorer (``task.scorer``; None is When2Tool's rule, applied
    exactly as before scorers existed: ``is_correct(final_response, task.answer)``). ``calls``: the episode's
    executed calls as ``(name, arguments)`` (a call a gate skipped, or one refused, is not one), for a scorer that
    judges calls (``needs_calls``); other scorers never see them."""
    spec = getattr(task, "scorer", None)
    if spec is None:
        return is_correct(final_response, task.answer)
    scorer = cached_scorer(spec)
    if getattr(scorer, "needs_calls", False):
        return scorer(final_response, task.gold, instruction=task.instruction, calls=calls)
    return scorer(final_response, task.gold, instruction=task.instruction)


def agreement(pairs: list[tuple[bool, bool]]) -> dict:
    """How often two scorers agree over the same answers, e.g. ``(judge, exact)`` pairs: ``n``, ``agree`` (the
    count), ``rate`` and Cohen's kappa (agreement beyond chance; sklearn). ``rate`` is None when n is 0;
    ``cohen_kappa`` is None when it is undefined: no pairs, or both scorers giving one and the same verdict on
    every answer (chance agreement is then 1)."""
    a = [bool(x) for x, _ in pairs]
    b = [bool(y) for _, y in pairs]
    n = len(a)
    agree = sum(x == y for x, y in zip(a, b))
    kappa = None
    if n and not (len(set(a)) == 1 and set(a) == set(b)):
        from sklearn.metrics import cohen_kappa_score   # why here: sklearn takes ~1 s to import; most runs never ask

        kappa = float(cohen_kappa_score(a, b, labels=[False, True]))
    return {"n": n, "agree": agree, "rate": agree / n if n else None, "cohen_kappa": kappa}
