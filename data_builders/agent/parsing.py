"""Classifying one model turn: tool call or content (docs/guide.md#when2tool-tool-call-formats-and-parsing), and the
"reasoning present" test (docs/guide.md#when2tool-the-protocol-state-machine).

Model output is untrusted: no function here raises because of the text it is given (only an
invalid ``kind`` argument, a programming error, raises). Decoding errors of every kind (``ValueError``, ``SyntaxError``, ``RecursionError`` and
``MemoryError`` from deeply nested brackets, int-to-str digit limits) mean "this candidate is not a
call", so the turn falls through to the next candidate or to content.

Choices where the benchmark's rule leaves a detail open (our best reading of the original harness, not checked
against it):

* A non-string ``name`` (``{"name": 7}``, ``{"name": null}``) is converted with ``str()`` rather
  than rejected. The rule accepts "an object with a name", and routing such a call yields the
  "Tool None not available in this task." failure, which still counts as a routed call. Using
  ``str()`` reproduces the same message and the same count, and downstream code only ever sees a
  ``str``.
* ``arguments`` is taken when the key is present (even if its value is null), otherwise
  ``parameters``, otherwise ``{}``. This is the ``dict.get(a, dict.get(b, {}))`` reading of "arguments,
  else parameters".
* The lazy ``{...}`` candidates of step (c) may span newlines (regex ``DOTALL`` semantics). They are
  found by a linear scan instead of ``re.finditer(r"\\{.*?\\}")``, which is quadratic on a text of
  many unclosed ``{``. The matches are identical, less those that cannot hold a call.
* A candidate is decoded only if some decoder could read a ``"name"`` key out of it (:func:`_may_hold_name_key`),
  a decoder is skipped when the text it would see cannot parse or is the text the previous one rejected, and
  a candidate equal to one already rejected is not decoded again. Each of these is exact (no result changes);
  together they bound the decode attempts to three per distinct candidate that can hold a call, instead of
  three failing decodes, each raising an exception, for every ``{...}`` of a long output.
* ``ast.literal_eval`` is only tried on candidates of at most :data:`MAX_LITERAL_CHARS` characters.
  A turn is at most 2048 generated tokens plus a short prefill, far below that, so no real call
  is lost. The cap bounds the parse time on pathological input. ``literal_eval`` never evaluates
  operators such as ``**``, so ``10**10**10`` is rejected rather than computed.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..protocol import BOXED_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

# Far above any single model turn (the benchmark generates at most 2048 tokens). Only a bound on parse time.
MAX_LITERAL_CHARS = 100_000

# The benchmark's threshold: reasoning needs at least this many characters after normalisation.
MIN_REASONING_CHARS = 12

_ASCII_LETTER = re.compile(r"[A-Za-z]")
# Two adjacent string tokens ('na' 'me'): Python's implicit concatenation can spell a key.
_ADJACENT_STRINGS = re.compile(r"['\"]\s*['\"]")
# The key spelled in one string token without escapes, as each decoder can read it: "name" (JSON), 'name' or a
# mix of the two quotes (JSON after ' -> "), and 'name' or "name" inside every Python literal form (triple-quoted,
# u'name').
_NAME_TOKEN = re.compile(r"['\"]name['\"]")
_NOT_DECODED = object()


@dataclass(frozen=True)
class ToolCall:
    """One parsed call. ``arguments`` is always a dict; ``raw`` is the candidate text it came from."""

    name: str
    arguments: dict = field(default_factory=dict)
    raw: str = ""


def _decode(candidate: str) -> Any:
    """Strict JSON, then JSON with ' -> ", then a JSON-serialisable Python literal (the
    benchmark's order).

    The first decoder that succeeds decides the value, so ``_NOT_DECODED`` only when all fail.
    """
    # Only called on candidates holding a quote (_may_hold_name_key). Without a '"', strict JSON cannot parse a
    # text holding a "'" (one may only appear inside a JSON string); without a "'", the replacement changes
    # nothing. Either decoder would then fail on what it is given, so it is not run (each failure costs an
    # exception).
    if '"' in candidate:
        try:
            return json.loads(candidate)
        except Exception:  # noqa: BLE001 - untrusted text: any failure means "try the next decoder"
            pass
    if "'" in candidate:
        try:
            return json.loads(candidate.replace("'", '"'))
        except Exception:  # noqa: BLE001
            pass
    if len(candidate) > MAX_LITERAL_CHARS:
        return _NOT_DECODED
    try:
        value = ast.literal_eval(candidate.strip())
        # Round-tripping through JSON both enforces "JSON-serialisable" (sets, bytes, complex are
        # rejected) and gives the same shapes a JSON decode would (tuples -> lists, keys -> str).
        return json.loads(json.dumps(value))
    except Exception:  # noqa: BLE001 - includes RecursionError/MemoryError on deep nesting
        return _NOT_DECODED


def _may_hold_name_key(candidate: str) -> bool:
    """Cheap, exact pre-filter: False only if no decoder could produce a dict with a ``"name"`` key.

    A dict with a key needs a ``:`` (JSON and a Python dict display alike), and a string key a quote. A
    string equal to ``name`` is then one token matching :data:`_NAME_TOKEN`, unless it is spelled with escapes
    (a backslash) or split by implicit concatenation (adjacent string tokens, possibly with a ``#`` comment
    between them). Skipping every other candidate changes no result; it keeps the many small ``{...}`` matches
    of a long output (code, templates, degenerate repetition) from each costing failed decodes.
    """
    if ":" not in candidate or ('"' not in candidate and "'" not in candidate):
        return False
    return (
        ("name" in candidate and _NAME_TOKEN.search(candidate) is not None)
        or "\\" in candidate
        or "#" in candidate
        or _ADJACENT_STRINGS.search(candidate) is not None
    )


def _as_call(value: Any, raw: str) -> ToolCall | None:
    if not isinstance(value, dict) or "name" not in value:
        return None
    name = value["name"]
    if not isinstance(name, str):
        try:
            name = str(name)
        except Exception:  # noqa: BLE001 - str() of a decoded JSON value cannot realistically fail
            return None
    if "arguments" in value:
        args = value["arguments"]
    else:
        args = value.get("parameters", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except Exception:  # noqa: BLE001
            args = {}
    if not isinstance(args, dict):
        args = {}
    return ToolCall(name=name, arguments=args, raw=raw)


# One match: the text up to the next lazy span that may hold a call (group 1; None once there is none left),
# consumed in C: characters between spans, and the spans _may_hold_name_key refuses: no ':', no quote, or none of
# a name token, a backslash, a '#' and two adjacent string tokens (each quote's lookahead stops at the span's '}').
# Possessive (*+): no backtracking into what was consumed, so each character is read a bounded number of times.
# CPython before 3.11.5 (Debian 12's python3 is 3.11.2) matches a possessive repeat of a group that backtracks
# inside wrongly (github.com/python/cpython/issues/106052): there the scan finds no call in '{"a": 1} {"name": "f"}'.
# Such an interpreter gets the atomic group that means the same ((?>...*)), which it matches right, at 1-4x the
# time on long outputs (benchmarks/parse_tool_call.py).
_SPANS_BETWEEN = r"""(?:[^{]|\{[^}:]*\}|\{[^}'"]*\}|\{(?:[^}\\#'"]|['"](?!\s*['"]|name['"]))*\})"""
_SPAN = r"""(\{[^}]*\})?"""
_POSSESSIVE_SCAN = re.compile(_SPANS_BETWEEN + "*+" + _SPAN)
_ATOMIC_SCAN = re.compile("(?>" + _SPANS_BETWEEN + "*)" + _SPAN)
_SKIP_TO_SPAN = (_POSSESSIVE_SCAN if _POSSESSIVE_SCAN.match('{"a": 1} {"name": "f"}').group(1) == '{"name": "f"}'
                 else _ATOMIC_SCAN)


def _lazy_brace_spans(text: str):
    """Yield each non-overlapping lazy ``{...}`` match that may hold a call, left to right, in linear time.

    The matches are those of ``re.finditer(r"\\{.*?\\}", text, re.DOTALL)`` (a match runs from a ``{`` to the
    first ``}`` after it, and scanning resumes after that ``}``) less the ones :func:`_may_hold_name_key` would
    refuse anyway. The search ends at the last ``}``: past it no ``{`` has a match, and every ``{`` before it
    has one, so no attempt fails and is retried from a later position (what makes the regex quadratic on a
    text of many unclosed ``{``). The spans skipped never reach Python, where each would cost a loop turn and
    the pre-filter: most of the time on a long output of code or templates (``{}``, ``{x}``, ``{0:>8}``).
    """
    end = text.rfind("}") + 1
    pos = 0
    while pos < end:
        m = _SKIP_TO_SPAN.match(text, pos, end)
        if m.group(1) is None:
            return
        yield m.group(1)
        pos = m.end()


def _clean(text: str) -> str:
    return text.strip().replace("```json", "").replace("```", "")


def _candidates(cleaned: str):
    tag = cleaned.find(TOOL_CALL_OPEN)
    if tag >= 0:
        body_start = tag + len(TOOL_CALL_OPEN)
        body_end = cleaned.find(TOOL_CALL_CLOSE, body_start)
        yield cleaned[body_start:] if body_end < 0 else cleaned[body_start:body_end]
    yield cleaned
    yield from _lazy_brace_spans(cleaned)


def parse_tool_call(text: str) -> ToolCall | None:
    """Return the turn's tool call, or None if it is content. Never raises."""
    if not isinstance(text, str):
        return None
    # Candidates already decoded without giving a call: an equal one cannot give one either. Output that repeats
    # itself (a model looping until its token budget) repeats its candidates; each is decoded once.
    rejected: set[str] = set()
    try:
        for candidate in _candidates(_clean(text)):
            candidate = candidate.strip()
            if not candidate or not _may_hold_name_key(candidate) or candidate in rejected:
                continue
            rejected.add(candidate)
            value = _decode(candidate)
            if value is _NOT_DECODED:
                continue
            call = _as_call(value, candidate)
            if call is not None:
                return call
    except Exception:  # noqa: BLE001 - defensive: classification must not crash an episode
        return None
    return None


def has_boxed(text: str) -> bool:
    """True if the content contains ``\\boxed{`` (a candidate final answer)."""
    return isinstance(text, str) and BOXED_OPEN in text


def _delete_boxed_spans(text: str) -> str:
    """Remove every ``\\boxed{...}`` span, brace-matched; an unclosed box runs to the end.

    Brace matching (rather than a ``\\boxed{[^}]*}`` regex) matches how :mod:`scoring` reads a box,
    so ``\\boxed{\\frac{1}{2}}`` leaves no ``{2}}`` residue to count as reasoning.
    """
    out: list[str] = []
    pos = 0
    while True:
        start = text.find(BOXED_OPEN, pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start])
        depth, i = 1, start + len(BOXED_OPEN)
        while i < len(text) and depth:
            ch = text[i]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            i += 1
        pos = i


def _is_reasoning(segment: str) -> bool:
    normalised = " ".join(_delete_boxed_spans(segment).split())
    return len(normalised) >= MIN_REASONING_CHARS and _ASCII_LETTER.search(normalised) is not None


def reasoning_present(text: str, *, kind: str) -> bool:
    """The benchmark's "reasoning present" test on the raw turn text.

    ``kind="call"``: the text before ``<tool_call>``; without a tag, the text before the first
    ``{`` (absent when there is no ``{`` or it is the first character).
    ``kind="answer"``: the text before the first ``\\boxed{``, or the whole text.
    """
    if kind not in ("call", "answer"):
        raise ValueError(f"kind must be 'call' or 'answer', got {kind!r}")
    if not isinstance(text, str):
        return False
    if kind == "call":
        tag = text.find(TOOL_CALL_OPEN)
        if tag >= 0:
            segment = text[:tag]
        else:
            brace = text.find("{")
            if brace <= 0:
                return False
            segment = text[:brace]
    else:
        box = text.find(BOXED_OPEN)
        segment = text if box < 0 else text[:box]
    return _is_reasoning(segment)
