"""G-STEP featurizer (arXiv 2605.00136): the fixed-length vector the continue/commit gate sees when the agent
gives a final answer.

Called from ``Hooks.on_answer(view, answer_text)``. At that moment the answering turn is already in
``view.turns`` (``view.turns[-1]``, ``kind == "answer"``, text ``answer_text``) but the answer message is
not yet in ``view.messages``; every value below comes from that view and that text only: the task's
metadata (instruction, env category, difficulty, ``multi_step``, the step *count*), the messages, turns
and calls so far. The gold answer is never read (``task.answer`` / ``task.expected["answer"]``), and no
field written after the decision is used. ``wall_s`` and ``cached_tokens`` are left out on purpose: the
first is timing noise, the second depends on the KV-reuse setting, not on the episode.

Plain answers. The loop calls ``on_answer`` only for a turn with ``\\boxed{...}`` (When2Tool's answer protocol);
a client of the gated endpoint that does not speak that protocol answers in plain text, and G-STEP decides on
that text too (the runtime's converter hands it over as an answer turn). Its answer is then the whole text,
stripped (:func:`answer_of`): the ``agree_*`` and ``form_*`` features read it as they read a box's content,
``form_box_missing`` is 1 and the ``lp_box_*`` statistics are 0 (no box to locate). Boxed answers, and so every
decision point the loop builds, featurize exactly as before: the vector changes only where there was no box,
a case no training point holds, so the featurizer version stays.

The tool-use-tax paper (arXiv 2605.00136) says only that its gate reads "a 120-dimensional feature vector" built by one shared feature
engineering protocol (trajectory, answer and generation confidence); it does not list the features, so the
list below is ours. It has :data:`N_FEATURES` (102) entries in four groups; ``GSTEP_FEATURE_DESCRIPTIONS``
documents each one (the table lives in ``_SPEC`` below, one line per feature, in vector order):

1. ``traj_*`` trajectory statistics: round, turns, call counts by status, tool errors, distinct tools,
   repeated identical calls, format-error turns, rejected answers, earlier answers, verification round,
   answer right after a tool result, token totals and current context (``log1p``), prompt mode and
   reasoning mode, and the task metadata (difficulty / category one-hots, ``multi_step``, expected steps).
2. ``agree_*`` agreement of the answer (the boxed one; a plain answer's whole text, see below) with the tool
   results and the instruction, with scoring's own
   comparison (:func:`data_builders.tasks.scoring.compare_values` on :func:`~data_builders.tasks.scoring.extract_boxed`).
3. ``form_*`` the answer's form and the answering turn's text.
4. ``lp_*`` generation log-prob statistics of the answering turn (``lp_ans_*``), of every turn so far
   (``lp_all_*``) and of the tokens inside the box (``lp_box_*``, approximate span; see below).

Conventions: counts that can grow large are ``log1p``-scaled; flags are 0/1; every value is finite (each
division is guarded, ratios and differences are clipped to the ranges documented per feature, and a final
``nan_to_num`` is only a safety net). The function is deterministic: no randomness, no clocks, iteration
in list order only.

Log-probs: the loop stores each turn's per-token log-probs of generated text, rounded to 4 decimals, or
``None`` when disabled. Each value is clipped to ``[-50, 0]`` before use. A scope with no log-probs gives
zeros for all of its statistics, and the ``*_has`` flag says so. Statistics per scope: ``mean``, ``min``,
``std`` (population), ``last5`` (mean of the last 5 tokens), ``frac_low`` (share of tokens with
logprob < log 0.5), ``nll`` (mean of -logprob, the entropy proxy; it is ``-mean``, kept because the
gate's input contract names it), ``n`` (``log1p`` token count).

Box tokens (approximation): turns record no token offsets, so the tokens inside the box are located by
mapping character offsets to token indices proportionally. With ``G`` the generated text of the answering
turn (its text minus the response prefill), ``L = len(G)``, ``n`` its log-prob count and ``[s, e)`` the
character span of the first box's content in ``G``, the box tokens are indices
``floor(s·n/L) .. max(floor(s·n/L)+1, ceil(e·n/L))`` (clipped to ``n``). This is exact only when tokens
are equally long; it is meant as a coarse "confidence where the answer is written" signal.
``lp_box_located`` is 0 (and the ``lp_box_*`` statistics are 0) when the box is not in the generated text
or there are no log-probs.
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..agent import prompts as P
from ..agent.hooks import EpisodeView
from ..agent.parsing import reasoning_present
from ..agent.trajectory import Call, Turn
from ..tasks.schema import Task
from ..tasks.scoring import BOXED_OPEN, boxed_span, compare_values, extract_boxed, normalize_scalar, parse_number

FEATURIZER_NAME = "gstep"
# v2: numbers are read by scoring's rule (scoring.parse_number: Unicode digits, '1.' not a number), the grammar
# the answer is judged by; v1 had its own ASCII grammar.
FEATURIZER_VERSION = 2

DIFFICULTY_VALUES = ("easy", "medium", "hard")
CATEGORY_VALUES = ("A", "B", "C", "M", "other")
LAST_K = 5
LOW_LOGPROB = math.log(0.5)
LOGPROB_FLOOR = -50.0
MAX_LEAVES = 512          # tool-result leaves compared with the answer (bounds the cost on huge payloads)
MAX_INSTRUCTION_NUMBERS = 512

_LP_STATS = (
    ("mean", "mean logprob"),
    ("min", "min logprob"),
    ("std", "population std of logprobs"),
    ("last5", f"mean logprob of the last {LAST_K} tokens (all when fewer)"),
    ("frac_low", "share of tokens with logprob < log(0.5)"),
    ("nll", "mean of -logprob (entropy proxy)"),
    ("n", "log1p number of tokens with a logprob"),
)
_LP_SCOPES = (
    ("ans", "answering turn"),
    ("all", "all turns so far, concatenated (answering turn included)"),
    ("box", "tokens inside the first box of the answering turn (approximate span, see module doc)"),
)

# (name, description), in vector order. The names are the contract; never reorder without a version bump.
_SPEC: tuple[tuple[str, str], ...] = (
    # ---- 1. trajectory statistics
    ("traj_round", "round index of the answering turn (0-based, view.round)"),
    ("traj_n_turns", "number of turns so far, answering turn included"),
    ("traj_calls_executed", "log1p number of executed tool calls"),
    ("traj_calls_skipped", "log1p number of calls skipped by the pre-call gate"),
    ("traj_calls_rejected", "log1p number of rejected calls (hard_no_tool or reasoning-rule violations)"),
    ("traj_tool_errors", "log1p number of executed calls whose payload says success=false"),
    ("traj_tool_error_frac", "tool errors / executed calls (0 when none executed), in [0, 1]"),
    ("traj_distinct_tools", "log1p number of distinct tool names among executed calls"),
    ("traj_repeated_calls", "log1p number of proposed calls identical (name + args) to an earlier proposed call"),
    ("traj_format_error_turns", "log1p number of turns classified as content (neither call nor box)"),
    ("traj_rejected_answers", "log1p number of boxed answers sent back for breaking the reasoning rule"),
    ("traj_prev_answer_turns", "log1p number of earlier answer turns (verification or rejected answers)"),
    ("traj_is_verification", "1 if a verification prompt was already injected (this answer follows a continue)"),
    ("traj_after_tool_result", "1 if the message right before the answer is a tool response"),
    ("traj_after_executed_call", "1 if that tool response came from an executed (not skipped) call"),
    ("traj_rounds_since_call", "rounds since the last proposed call (round + 1 when there was none), clipped to [0, 64]"),
    ("traj_has_calls", "1 if any call was proposed"),
    ("traj_decode_tokens", "log1p total decode tokens over all turns"),
    ("traj_prefill_tokens", "log1p total prefill tokens over all turns (whole context per turn)"),
    ("traj_new_tokens", "log1p total new (not previously seen) context tokens over all turns"),
    ("traj_context_len", "log1p context length now: last turn's context_len + decode_tokens"),
    ("traj_ans_decode_tokens", "log1p decode tokens of the answering turn"),
    ("traj_ans_truncated", "1 if the answering turn stopped on the token limit (finish_reason == 'length')"),
    ("traj_prefilled", "1 if round 0 had a response prefill (pre-generation hook)"),
    ("traj_reasoning_mode", "1 if the prompt asks for reason-then-act"),
    *((f"traj_mode_{m}", f"1 if the prompt mode is {m}") for m in P.MODES),
    *((f"traj_difficulty_{d}", f"1 if task difficulty is {d}") for d in DIFFICULTY_VALUES),
    *((f"traj_category_{c}", f"1 if task category is {c}" + (" (anything else)" if c == "other" else ""))
      for c in CATEGORY_VALUES),
    ("traj_multi_step", "1 if the task is multi-step"),
    ("traj_instruction_chars", "log1p characters of the task instruction"),
    ("traj_instruction_numbers", "log1p count of numbers written in the instruction"),
    # ---- 2. agreement of the answer with tool results
    ("agree_has_result", "1 if some executed call returned a primary value (see _primary_value)"),
    ("agree_eq_last_result", "1 if the boxed answer equals the last executed call's primary value (scoring's compare)"),
    ("agree_eq_any_result", "1 if it equals the primary value of any executed call"),
    ("agree_eq_any_leaf", "1 if it equals any scalar leaf of any executed payload ('success' excluded)"),
    ("agree_substr_last_result", "1 if the normalised answer is a substring of a leaf of the last executed payload"),
    ("agree_substr_any_result", "1 if the normalised answer is a substring of a leaf of any executed payload"),
    ("agree_n_distinct_results", "log1p number of distinct primary values among executed calls"),
    ("agree_has_numeric", "1 if the answer is numeric and some executed call returned a numeric primary value"),
    ("agree_num_rel_diff", "|a - r| / max(|a|, |r|) vs the last numeric result r, in [0, 2] (0 without has_numeric)"),
    ("agree_num_log_abs_diff", "log1p |a - r|, clipped to [0, 50] (0 without has_numeric)"),
    ("agree_num_exact", "1 if a == r exactly (numeric)"),
    ("agree_num_close", "1 if agree_num_rel_diff < 1e-3"),
    ("agree_last_call_errored", "1 if the last proposed call was executed and its payload says success=false"),
    ("agree_last_call_skipped", "1 if the last proposed call was skipped by the pre-call gate"),
    ("agree_last_call_rejected", "1 if the last proposed call was rejected"),
    ("agree_last_result_no_value", "1 if the last executed call succeeded but carried no primary value"),
    ("agree_num_in_instruction", "1 if the numeric answer equals a number written in the instruction"),
    ("agree_eq_prev_answer", "1 if an earlier answer turn's boxed answer equals this one"),
    # ---- 3. answer form
    ("form_box_missing", "1 if the answer text has no box (a plain answer: the answer is its whole text)"),
    ("form_box_empty", "1 if the first box is empty (scoring then reads the whole text)"),
    ("form_answer_chars", "log1p characters of the boxed answer (scoring's extract_boxed)"),
    ("form_is_numeric", "1 if the answer is a plain number (scoring's int/decimal grammar)"),
    ("form_is_integer", "1 if it is a plain integer"),
    ("form_n_digits", "log1p number of ASCII digits in the answer"),
    ("form_has_decimal_point", "1 if the answer contains '.'"),
    ("form_is_negative", "1 if the answer starts with '-' (after stripping)"),
    ("form_has_letters", "1 if the answer contains an ASCII letter"),
    ("form_has_comma", "1 if the answer contains ',' (a list or thousands separator)"),
    ("form_is_list", "1 if the answer parses as a Python list/tuple literal"),
    ("form_is_bool_like", "1 if the answer is true/false/yes/no (case-insensitive)"),
    ("form_has_latex", "1 if the answer contains a backslash (LaTeX)"),
    ("form_n_boxed", "log1p number of \\boxed{ in the answer text"),
    ("form_boxes_disagree", "1 if the text has several boxes whose contents differ"),
    ("form_text_chars", "log1p characters of the answering turn's text"),
    ("form_reasoning_present", "1 if the text before the box counts as reasoning (parsing.reasoning_present)"),
    ("form_after_box_chars", "log1p characters after the first box closes"),
    # ---- 4. generation log-probs
    ("lp_ans_has", "1 if the answering turn has log-probs"),
    ("lp_all_has", "1 if any turn has log-probs"),
    ("lp_box_located", "1 if the box tokens could be located (box in generated text and log-probs present)"),
    *((f"lp_{scope}_{stat}", f"{sdesc} of the {scopedesc}") for scope, scopedesc in _LP_SCOPES
      for stat, sdesc in _LP_STATS),
)

GSTEP_FEATURES: tuple[str, ...] = tuple(name for name, _ in _SPEC)
FEATURE_NAMES = GSTEP_FEATURES   # what a checkpoint records (contract["feature_names"]) and the contract check compares
GSTEP_FEATURE_DESCRIPTIONS: dict[str, str] = dict(_SPEC)
N_FEATURES = len(GSTEP_FEATURES)

_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?")
_INSTRUCTION_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_BOOL_WORDS = frozenset({"true", "false", "yes", "no"})
_ANSWER_REJECTIONS = frozenset({P.MISSING_REASONING_ANSWER, P.NO_REASONING_ANSWER})
_NO_VALUE = object()
# Keys tried, in order, for the value a payload "returns" (environments differ: see data_builders/environments).
_RESULT_KEY = "result"
_PRIMARY_DATA_KEYS = ("value", "last_result")
_PRIMARY_FALLBACK_KEYS = ("hash", "decoded", "encoded")


# ------------------------------------------------------------------ small helpers
def _log1p(x: float) -> float:
    return math.log1p(max(float(x), 0.0))


def _flag(b: Any) -> float:
    return 1.0 if b else 0.0


def _box_span(text: str) -> tuple[int, int] | None:
    """(begin, end) of the first box's content, brace-matched exactly as scoring does."""
    return boxed_span(text)


def answer_of(text: str) -> str:
    """The answer a turn gives: its boxed content (scoring's ``extract_boxed``, what the gold is compared with), or,
    for a plain answer without a box (a client that does not use When2Tool's answer protocol), its whole text,
    stripped: the answer that client receives. The agent loop asks G-STEP about boxed answers only, so no decision
    point it builds is featurized differently by this rule."""
    return extract_boxed(text) if _box_span(text) is not None else text.strip()


def _all_box_contents(text: str, limit: int = 16) -> list[str]:
    out, pos = [], 0
    while len(out) < limit:
        span = _box_span(text[pos:])
        if span is None:
            break
        b, e = span
        out.append(text[pos + b:pos + e].strip())
        pos += e + 1
    return out


def _to_number(value: Any) -> int | float | None:
    """An int/float for numbers and numeric strings (scoring's grammar, thousands commas allowed); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    s = value.strip()
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    number = parse_number(s)
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return number


def _as_float(x: int | float) -> float | None:
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _value_text(value: Any) -> str | None:
    """A tool value as text that scoring's compare reads back: strings as they are, other values as
    Python literals (``repr``), so lists/dicts/bools round-trip through ``ast.literal_eval``."""
    if value is None or value is _NO_VALUE:
        return None
    if isinstance(value, str):
        return value
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - e.g. an int beyond the int-to-str digit limit
        return None


def _primary_value(payload: Any) -> Any:
    """The value a tool payload returns: ``result``, else ``data.value`` / ``data.last_result``, else
    ``hash`` / ``decoded`` / ``encoded``; ``_NO_VALUE`` when none is present (or it is None)."""
    if not isinstance(payload, dict):
        return _NO_VALUE
    if payload.get(_RESULT_KEY) is not None:
        return payload[_RESULT_KEY]
    data = payload.get("data")
    if isinstance(data, dict):
        for key in _PRIMARY_DATA_KEYS:
            if key in data and data[key] is not None:
                return data[key]
    for key in _PRIMARY_FALLBACK_KEYS:
        if payload.get(key) is not None:
            return payload[key]
    return _NO_VALUE


def _leaves(payload: Any, out: list, limit: int) -> None:
    """Scalar leaves of a payload (dict values, list items), depth first, ``success`` excluded."""
    stack = [payload]
    while stack and len(out) < limit:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(v for k, v in reversed(list(node.items())) if k != "success")
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
        elif node is not None:
            out.append(node)


def _equal(answer: str, value: Any) -> bool:
    text = _value_text(value)
    if text is None or not answer:
        return False
    # A string far longer than the answer cannot equal it after normalisation (cheap skip of passages).
    if isinstance(value, str) and len(value) > 4 * len(answer) + 64:
        return False
    return compare_values(answer, text)


def _substr(norm_answer: str, value: Any) -> bool:
    text = _value_text(value)
    if text is None or not norm_answer:
        return False
    try:
        return norm_answer in normalize_scalar(text)
    except Exception:  # noqa: BLE001
        return False


def _lp_list(turn: Turn | None) -> list[float] | None:
    if turn is None:
        return None
    lps = turn.logprobs
    if lps is None:
        return None
    out = []
    for x in lps:
        try:
            v = float(x)
        except (TypeError, ValueError):
            continue
        if math.isnan(v):
            continue
        out.append(min(max(v, LOGPROB_FLOOR), 0.0))
    return out


def _lp_stats(lps: list[float] | None) -> dict[str, float]:
    if not lps:
        return {stat: 0.0 for stat, _ in _LP_STATS}
    a = np.asarray(lps, dtype=np.float64)
    mean = float(a.mean())
    return {
        "mean": mean,
        "min": float(a.min()),
        "std": float(a.std()),
        "last5": float(a[-LAST_K:].mean()),
        "frac_low": float((a < LOW_LOGPROB).mean()),
        "nll": -mean,
        "n": _log1p(a.size),
    }


def _box_tokens(turn: Turn, lps: list[float]) -> list[float] | None:
    """Log-probs of the tokens inside the first box, located by proportional char->token mapping."""
    text = turn.text or ""
    prefill = turn.prefill_text or ""
    generated = text[len(prefill):] if prefill and text.startswith(prefill) else text
    span = _box_span(generated)
    n, length = len(lps), len(generated)
    if span is None or n == 0 or length == 0:
        return None
    s, e = span
    t0 = min(int(math.floor(s * n / length)), n - 1)
    t1 = min(max(t0 + 1, int(math.ceil(e * n / length))), n)
    return lps[t0:t1]


def _signature(call: Call) -> str:
    try:
        return json.dumps({"name": call.name, "args": call.args}, sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - unsortable keys etc.
        return repr((call.name, call.args))


def _is_tool_response(msg: Any) -> bool:
    if not isinstance(msg, dict):
        return False
    if msg.get("role") == "tool":
        return True
    content = msg.get("content")
    return msg.get("role") == "user" and isinstance(content, str) and content.startswith("<tool_response>")


def _instruction_numbers(instruction: str) -> list[int | float]:
    out = []
    for m in _INSTRUCTION_NUMBER.finditer(instruction):
        if len(out) >= MAX_INSTRUCTION_NUMBERS:
            break
        v = _to_number(m.group(0))
        if v is not None:
            out.append(v)
    return out


def _onehot(prefix: str, values: Iterable[str], value: str, other: str | None = None) -> dict[str, float]:
    values = tuple(values)
    chosen = value if value in values else other
    return {f"{prefix}{v}": _flag(v == chosen) for v in values}


# ------------------------------------------------------------------ the featurizer
@dataclass(frozen=True)
class _Episode:
    """The parts of the view every feature group reads, read once: lists as lists (a view may hold None),
    a non-string answer as "", the prompt mode canonical ("" when unknown, so its one-hot is all zeros)."""

    task: Task
    text: str                     # the answering turn's text
    answer: str                   # its answer (answer_of): the boxed one scoring compares, or a plain text
    turns: list[Turn]
    calls: list[Call]
    messages: list
    round: int
    mode: str
    executed: list[Call]
    errors: list[Call]            # the executed calls that failed
    error_ids: frozenset[int]     # their id()s
    instruction: str
    instruction_numbers: list[int | float]

    @property
    def answer_turn(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    @property
    def last_call(self) -> Call | None:
        return self.calls[-1] if self.calls else None

    @property
    def user_texts(self) -> list:
        return [m.get("content") for m in self.messages if isinstance(m, dict) and m.get("role") == "user"]


def _episode(view: EpisodeView, answer_text: str) -> _Episode:
    turns = list(view.turns or [])
    calls = list(view.calls or [])
    executed = [c for c in calls if c.status == "executed"]
    errors = [c for c in executed if c.ok is False
              or (isinstance(c.result, dict) and c.result.get("success") is False)]
    try:
        mode = P.canonical_mode(view.mode)
    except Exception:  # noqa: BLE001 - unknown mode: all zeros
        mode = ""
    text = answer_text if isinstance(answer_text, str) else ""
    instruction = view.task.instruction if isinstance(view.task.instruction, str) else ""
    return _Episode(task=view.task, text=text, answer=answer_of(text), turns=turns, calls=calls,
                    messages=list(view.messages or []),
                    round=int(view.round) if isinstance(view.round, int) else len(turns) - 1, mode=mode,
                    executed=executed, errors=errors,
                    error_ids=frozenset(map(id, errors)), instruction=instruction,
                    instruction_numbers=_instruction_numbers(instruction))


def _call_features(ep: _Episode) -> dict[str, float]:
    """Calls by status, tool errors, distinct tools, repeats, and where the last call stands."""
    calls, executed, last_call = ep.calls, ep.executed, ep.last_call
    seen, repeats = set(), 0
    for c in calls:
        sig = _signature(c)
        repeats += sig in seen
        seen.add(sig)
    after_tool = _is_tool_response(ep.messages[-1] if ep.messages else None)
    since = ep.round - last_call.round if last_call is not None else ep.round + 1
    return {
        "traj_calls_executed": _log1p(len(executed)),
        "traj_calls_skipped": _log1p(sum(c.status == "skipped" for c in calls)),
        "traj_calls_rejected": _log1p(sum(c.status == "rejected" for c in calls)),
        "traj_tool_errors": _log1p(len(ep.errors)),
        "traj_tool_error_frac": len(ep.errors) / len(executed) if executed else 0.0,
        "traj_distinct_tools": _log1p(len({c.name for c in executed})),
        "traj_repeated_calls": _log1p(repeats),
        "traj_after_tool_result": _flag(after_tool),
        "traj_after_executed_call": _flag(after_tool and last_call is not None and last_call.status == "executed"),
        "traj_rounds_since_call": float(min(max(since, 0), 64)),
        "traj_has_calls": _flag(calls),
    }


def _turn_features(ep: _Episode) -> dict[str, float]:
    """Rounds and turns, earlier answers and verification, token totals, and how the episode was prompted."""
    turns, answer_turn, user_texts = ep.turns, ep.answer_turn, ep.user_texts
    last_ctx = answer_turn.context_len + answer_turn.decode_tokens if answer_turn is not None else 0
    return {
        "traj_round": float(min(max(ep.round, 0), 1024)),
        "traj_n_turns": float(min(len(turns), 1024)),
        "traj_format_error_turns": _log1p(sum(t.kind == "content" for t in turns)),
        "traj_rejected_answers": _log1p(sum(u in _ANSWER_REJECTIONS for u in user_texts)),
        "traj_prev_answer_turns": _log1p(sum(t.kind == "answer" for t in turns[:-1])),
        "traj_is_verification": _flag(any(u == P.VERIFY_PROMPT for u in user_texts)),
        "traj_decode_tokens": _log1p(sum(t.decode_tokens for t in turns)),
        "traj_prefill_tokens": _log1p(sum(t.prefill_tokens for t in turns)),
        "traj_new_tokens": _log1p(sum(t.new_tokens or 0 for t in turns)),
        "traj_context_len": _log1p(last_ctx),
        "traj_ans_decode_tokens": _log1p(answer_turn.decode_tokens if answer_turn else 0),
        "traj_ans_truncated": _flag(answer_turn is not None and answer_turn.finish_reason == "length"),
        "traj_prefilled": _flag(turns and turns[0].round == 0 and bool(turns[0].prefill_text)),
        "traj_reasoning_mode": _flag(any(isinstance(u, str) and P.REASONING_LINE in u for u in user_texts[:1])),
    }


def _task_features(ep: _Episode) -> dict[str, float]:
    """Prompt mode and the task's metadata. The gold step count (``task.expected["steps"]``) is part of the
    answer key: deliberately not a feature."""
    task = ep.task
    return {
        **_onehot("traj_mode_", P.MODES, ep.mode),
        **_onehot("traj_difficulty_", DIFFICULTY_VALUES, task.difficulty),
        **_onehot("traj_category_", CATEGORY_VALUES, task.category, other="other"),
        "traj_multi_step": _flag(task.multi_step),
        "traj_instruction_chars": _log1p(len(ep.instruction)),
        "traj_instruction_numbers": _log1p(len(ep.instruction_numbers)),
    }


def _numeric_distance(answer: int | float, result: int | float) -> tuple[float, float, bool]:
    """(relative difference, log1p absolute difference, exactly equal) of two numbers, unclipped."""
    if answer == result:
        return 0.0, 0.0, True
    a, r = _as_float(answer), _as_float(result)
    if a is None or r is None:
        return 2.0, 50.0, False            # beyond float range and unequal: maximally far
    diff = abs(a - r)
    denom = max(abs(a), abs(r))
    rel = diff / denom if denom > 0 and math.isfinite(diff) else (0.0 if diff == 0 else 2.0)
    return rel, math.log1p(diff) if math.isfinite(diff) else 50.0, False


def _agreement_features(ep: _Episode) -> dict[str, float]:
    """The boxed answer against the executed calls' values, the instruction's numbers and earlier answers."""
    answer, executed, last_call = ep.answer, ep.executed, ep.last_call
    norm_answer = normalize_scalar(answer) if answer else ""
    answer_num = _to_number(answer)
    primaries = [_primary_value(c.result) for c in executed]
    with_value = [v for v in primaries if v is not _NO_VALUE]
    last_exec = executed[-1] if executed else None
    last_primary = primaries[-1] if primaries else _NO_VALUE
    leaves_last: list = []
    if last_exec is not None:
        _leaves(last_exec.result, leaves_last, MAX_LEAVES)
    leaves_all: list = []
    for c in executed:
        _leaves(c.result, leaves_all, MAX_LEAVES)
    last_numeric = next((n for n in map(_to_number, reversed(with_value)) if n is not None), None)
    has_numeric = answer_num is not None and last_numeric is not None
    rel, logabs, exact = _numeric_distance(answer_num, last_numeric) if has_numeric else (0.0, 0.0, False)
    prev_answers = [answer_of(t.text or "") for t in ep.turns[:-1] if t.kind == "answer"]
    return {
        "agree_has_result": _flag(with_value),
        "agree_eq_last_result": _flag(last_primary is not _NO_VALUE and _equal(answer, last_primary)),
        "agree_eq_any_result": _flag(any(_equal(answer, v) for v in with_value)),
        "agree_eq_any_leaf": _flag(any(_equal(answer, v) for v in leaves_all)),
        "agree_substr_last_result": _flag(any(_substr(norm_answer, v) for v in leaves_last)),
        "agree_substr_any_result": _flag(any(_substr(norm_answer, v) for v in leaves_all)),
        "agree_n_distinct_results": _log1p(len({_value_text(v) for v in with_value} - {None})),
        "agree_has_numeric": _flag(has_numeric),
        "agree_num_rel_diff": float(min(max(rel, 0.0), 2.0)),
        "agree_num_log_abs_diff": float(min(max(logabs, 0.0), 50.0)),
        "agree_num_exact": _flag(has_numeric and exact),
        "agree_num_close": _flag(has_numeric and rel < 1e-3),
        "agree_last_call_errored": _flag(last_call is not None and last_call.status == "executed"
                                         and id(last_call) in ep.error_ids),
        "agree_last_call_skipped": _flag(last_call is not None and last_call.status == "skipped"),
        "agree_last_call_rejected": _flag(last_call is not None and last_call.status == "rejected"),
        "agree_last_result_no_value": _flag(last_exec is not None and id(last_exec) not in ep.error_ids
                                            and last_primary is _NO_VALUE),
        "agree_num_in_instruction": _flag(answer_num is not None
                                          and any(answer_num == v for v in ep.instruction_numbers)),
        "agree_eq_prev_answer": _flag(answer and any(p and compare_values(answer, p) for p in prev_answers)),
    }


def _is_list_literal(s: str) -> bool:
    if not s or s[0] not in "[(":
        return False
    try:
        return isinstance(ast.literal_eval(s), (list, tuple))
    except Exception:  # noqa: BLE001 - untrusted model output
        return False


def _form_features(text: str, answer: str) -> dict[str, float]:
    """The boxed answer's form and the answering text around it."""
    span = _box_span(text)
    content = text[span[0]:span[1]].strip() if span else ""
    stripped = answer.strip()
    number = parse_number(stripped)
    return {
        "form_box_missing": _flag(span is None),
        "form_box_empty": _flag(span is not None and not content),
        "form_answer_chars": _log1p(len(answer)),
        "form_is_numeric": _flag(number is not None),
        "form_is_integer": _flag(isinstance(number, int)),
        "form_n_digits": _log1p(sum(ch in "0123456789" for ch in answer)),
        "form_has_decimal_point": _flag("." in answer),
        "form_is_negative": _flag(stripped.startswith("-")),
        "form_has_letters": _flag(_ASCII_LETTER.search(answer)),
        "form_has_comma": _flag("," in answer),
        "form_is_list": _flag(_is_list_literal(stripped)),
        "form_is_bool_like": _flag(stripped.lower() in _BOOL_WORDS),
        "form_has_latex": _flag("\\" in answer),
        "form_n_boxed": _log1p(text.count(BOXED_OPEN)),
        "form_boxes_disagree": _flag(len(set(_all_box_contents(text))) > 1),
        "form_text_chars": _log1p(len(text)),
        "form_reasoning_present": _flag(reasoning_present(text, kind="answer")),
        "form_after_box_chars": _log1p(len(text) - span[1] - 1 if span and span[1] < len(text) else 0),
    }


def _logprob_features(turns: list[Turn], answer_turn: Turn | None) -> dict[str, float]:
    """Log-prob statistics of the answering turn, of every turn so far and of the box tokens."""
    ans_lps = _lp_list(answer_turn)
    per_turn = [lp for lp in map(_lp_list, turns) if lp is not None]
    all_lps = [x for lp in per_turn for x in lp]
    box_lps = _box_tokens(answer_turn, ans_lps) if answer_turn is not None and ans_lps else None
    f = {"lp_ans_has": _flag(ans_lps is not None), "lp_all_has": _flag(per_turn),
         "lp_box_located": _flag(bool(box_lps))}
    for scope, lps in (("ans", ans_lps), ("all", all_lps), ("box", box_lps)):
        f.update({f"lp_{scope}_{stat}": value for stat, value in _lp_stats(lps).items()})
    return f


def gstep_features(view: EpisodeView, answer_text: str) -> np.ndarray:
    """The G-STEP gate input for the answer ``answer_text`` given in ``view`` (see the module doc).

    Returns float32 of shape ``(len(GSTEP_FEATURES),)``, all finite, in :data:`GSTEP_FEATURES` order.
    """
    ep = _episode(view, answer_text)
    f = {**_turn_features(ep), **_call_features(ep), **_task_features(ep), **_agreement_features(ep),
         **_form_features(ep.text, ep.answer), **_logprob_features(ep.turns, ep.answer_turn)}
    if f.keys() != set(GSTEP_FEATURES) or len(f) != N_FEATURES:   # programming error, never data
        raise AssertionError(f"gstep feature drift: {sorted(set(f) ^ set(GSTEP_FEATURES))}")
    vec = np.fromiter((f[name] for name in GSTEP_FEATURES), dtype=np.float64, count=N_FEATURES)
    return np.nan_to_num(vec, nan=0.0, posinf=0.0, neginf=0.0).astype(np.float32)


def controller_input(tensors: dict):
    """[points, N_FEATURES] G-STEP vectors, as stored."""
    return tensors["features"].float()
