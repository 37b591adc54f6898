"""When2Tool answer scoring and token cost (docs/guide.md#when2tool-scoring), quirks included.

The quirks are deliberate: results must be comparable with the published When2Tool numbers, so
``"1"`` matches gold ``"True"``, ``"8400"`` fails gold ``"8,400"`` and an empty ``\\boxed{}``
scores the whole response. None of these functions raises on model output.

Rules the benchmark settles by example rather than by rule, chosen so that every verdict of the original's scorer
that a differential test against its code found comes out the same:

* Box content is stripped. A box with *no* content (``\\boxed{}``, or a ``\\boxed{`` at the very
  end) returns the whole text (as the original); a box holding only whitespace (``\\boxed{ }``) returns ""
  like the original, and "" never scores correct (it is not a literal, and an empty gold is false).
* String normalisation inside structured values (the structured pass): the string is stripped
  (``str.strip``), then it becomes an int if it fully matches ``[+-]?\\d+`` and a float if it fully
  matches ``[+-]?\\d*\\.\\d+``; otherwise it stays the stripped string. ``\\d`` is Python's Unicode
  digit class and ``int``/``float`` accept the same digits, so ``'٣'`` is 3 (original). The float
  pattern needs a digit *after* the point, so ``'1.'`` stays a string and ``[1.0, 0.0]`` fails gold
  ``['1.', '0.']`` (original, test task 152526); ``'1e3'``, ``'1_000'``, ``'inf'`` stay strings too.
  Dict keys are left as parsed. A digit string beyond Python's int-to-str limit stays a string
  instead of raising.
* ``\\text{...}`` then ``\\mathrm{...}`` unwrap as the original's two substitutions do (its ``src/utils.py``,
  ``re.sub(r"\\\\text\\s*\\{([^}]*)\\}", r"\\1", t)`` and the same for ``mathrm``): optional whitespace before the
  brace (``\\text {33}``), the content running to the *first* ``}``, one left-to-right pass per command. So
  ``\\text{\\mathrm{Paris}}`` is ``Paris`` (the ``\\mathrm`` group is whole after the ``\\text`` pass), but
  ``\\text{\\text{Paris}}`` keeps one ``\\text`` and normalises to ``textparis``: an answer nested in the same
  wrapper twice scores wrong, as in the published numbers. An unclosed wrapper stays. The regex itself would
  backtrack quadratically on many unclosed wrappers (``\\text{`` × 100k and no ``}``), so
  :func:`_unwrap_latex` gives its result in one linear scan.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from ..protocol import BOXED_OPEN

# When2Tool's token cost: prefill tokens (tool responses, rejections, "Continue") weigh 0.2 of a generated token.
PREFILL_WEIGHT = 0.2

# \d on a str pattern is Unicode Nd, the digits int()/float() accept (the original converts '٣' to 3).
_INT_STR = re.compile(r"[+-]?\d+")
# A digit after the point is required: the original keeps '1.' a string.
_FLOAT_STR = re.compile(r"[+-]?\d*\.\d+")
_LATEX_WRAPPER_OPEN = {c: re.compile(rf"\\{c}\s*\{{") for c in ("text", "mathrm")}
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
    behaviour, kept for comparable scores); a whitespace-only box returns "" (also the original).
    """
    if not isinstance(text, str):
        return ""
    span = boxed_span(text)
    if span is None:
        return ""
    begin, i = span
    # Emptiness is tested before stripping: "\boxed{}" gives the whole text, "\boxed{ }" gives "" (both
    # as the original).
    content = text[begin:i]
    return content.strip() if content else text


def _normalise(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, str):
        # The original compares strings inside structures stripped.
        value = value.strip()
        number = parse_number(value)
        return value if number is None else number
    return value


def parse_number(text: str) -> int | float | None:
    """The original's string-to-number rule: an int if ``text`` fully matches
    ``[+-]?\\d+``, a float if ``[+-]?\\d*\\.\\d+``, else None (so ``'1.'`` and ``'1e3'`` stay strings).
    No stripping: callers strip where the original does. The one number grammar: G-STEP's answer features
    read answers through it too (data_builders/features/gstep.py)."""
    try:
        if _INT_STR.fullmatch(text):
            return int(text)
        if _FLOAT_STR.fullmatch(text):
            return float(text)
    except ValueError:  # int-to-str digit limit: not a number we can hold; the caller keeps the string
        return None
    return None


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


def _unwrap_latex(text: str, command: str) -> str:
    """``re.sub(r"\\\\<command>\\s*\\{([^}]*)\\}", r"\\1", text)`` in linear time.

    The regex retries every ``\\<command>{`` after an unclosed one, each time scanning to the end of the text;
    here a wrapper with no ``}`` after it ends the pass, since no later one can have one either.
    """
    opening = _LATEX_WRAPPER_OPEN[command]
    last_close = text.rfind("}")
    parts, pos = [], 0
    while True:
        m = opening.search(text, pos)
        if m is None or m.end() > last_close:        # no "}" after this brace, nor after any later one
            break
        close = text.index("}", m.end())
        parts += [text[pos:m.start()], text[m.end():close]]    # the group, up to the first "}"
        pos = close + 1                                      # matching resumes after it, as re.sub does
    parts.append(text[pos:])
    return "".join(parts)


def normalize_scalar(text: str) -> str:
    s = " ".join(text.split())
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    s = _unwrap_latex(_unwrap_latex(s, "text"), "mathrm")
    s = s.replace("{", "").replace("}", "").replace("\\", "")
    return " ".join(s.split()).lower()


def compare_values(pred: str, gold: str) -> bool:
    """The benchmark's comparison: structured pass (``==`` on normalised literals) if both parse, else scalar pass."""
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
    """When2Tool's token cost: generation_tokens + 0.2 × prefill_tokens."""
    return float(generation_tokens) + PREFILL_WEIGHT * float(prefill_tokens)
