"""When2Tool answer scoring and token cost (SPEC §6), quirks included.

The quirks are deliberate: results must be comparable with the published When2Tool numbers, so
``"1"`` matches gold ``"True"``, ``"8400"`` fails gold ``"8,400"`` and an empty ``\\boxed{}``
scores the whole response. None of these functions raises on model output.

Choices where SPEC is silent:

* Box contents that are only whitespace count as an empty box (the content is stripped first).
* String-to-number normalisation accepts ASCII digits only: an optionally signed integer, or an
  optionally signed decimal with a point and digits on at least one side (``3.5``, ``.5``, ``3.``). A digit string too long for Python's int-to-str limit
  stays a string instead of raising.
* ``\\text{...}``/``\\mathrm{...}`` unwrap lazily (up to the first ``}``); every other brace is
  deleted right after, so only the command word itself is affected.
"""
from __future__ import annotations

import ast
import re
from typing import Any

BOXED_OPEN = "\\boxed{"

# SPEC §6: prefill tokens (tool responses, rejections, "Continue") weigh 0.2 of a generated token.
PREFILL_WEIGHT = 0.2

_INT_STR = re.compile(r"[+-]?[0-9]+")
_FLOAT_STR = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)")
_LATEX_WRAPPER = re.compile(r"\\(?:text|mathrm)\{(.*?)\}", re.DOTALL)
_NOT_STRUCTURED = object()


def boxed_span(text: str) -> tuple[int, int] | None:
    """(begin, end) character offsets of the first ``\\boxed{``'s content, brace-matched; an unclosed box
    runs to the end of the text; None if there is no box."""
    start = text.find(BOXED_OPEN)
    if start < 0:
        return None
    begin = start + len(BOXED_OPEN)
    depth, i = 1, begin
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        i += 1
    return begin, i


def extract_boxed(text: str) -> str:
    """Stripped content of the first ``\\boxed{``, brace-matched; "" if there is no box.

    An unclosed box runs to the end of the text. An empty box returns the whole text (original
    behaviour, kept for comparable scores).
    """
    if not isinstance(text, str):
        return ""
    span = boxed_span(text)
    if span is None:
        return ""
    begin, i = span
    content = text[begin:i].strip()
    return content if content else text


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            if _INT_STR.fullmatch(value):
                return int(value)
            if _FLOAT_STR.fullmatch(value):
                return float(value)
        except ValueError:  # int-to-str digit limit: compare as the string it is
            return value
    return value


def _structured(text: str) -> Any:
    """``ast.literal_eval`` then normalise; ``_NOT_STRUCTURED`` on failure or a bare ``None``.

    ``literal_eval`` never evaluates operators (``10**10**10`` is rejected, not computed). Deep
    nesting raises ``RecursionError``/``MemoryError`` and huge ints raise ``ValueError``; all of
    them mean "not structured".
    """
    try:
        value = ast.literal_eval(text)
        if value is None:
            return _NOT_STRUCTURED
        return _normalise(value)
    except Exception:  # noqa: BLE001 - untrusted model output
        return _NOT_STRUCTURED


def normalize_scalar(text: str) -> str:
    s = " ".join(text.split())
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    s = _LATEX_WRAPPER.sub(r"\1", s)
    s = s.replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(s.split()).lower()


def compare_values(pred: str, gold: str) -> bool:
    """SPEC §6: structured pass (``==`` on normalised literals) if both parse, else scalar pass."""
    if not isinstance(pred, str) or not isinstance(gold, str):
        return False
    p, g = _structured(pred), _structured(gold)
    if p is not _NOT_STRUCTURED and g is not _NOT_STRUCTURED:
        try:
            return bool(p == g)
        except Exception:  # noqa: BLE001 - e.g. RecursionError on self-similar deep values
            return False
    try:
        norm_gold = normalize_scalar(gold)
        if not norm_gold:
            return False
        return normalize_scalar(pred) == norm_gold
    except Exception:  # noqa: BLE001 - string ops only; kept so scoring can never crash a run
        return False


def is_correct(final_response: str, gold: str) -> bool:
    """Score one task: an empty final response (no accepted answer) is wrong."""
    if not isinstance(final_response, str) or not final_response:
        return False
    return compare_values(extract_boxed(final_response), gold)


def token_cost(generation_tokens: int, prefill_tokens: int) -> float:
    """SPEC §6: generation_tokens + 0.2 × prefill_tokens."""
    return float(generation_tokens) + PREFILL_WEIGHT * float(prefill_tokens)
