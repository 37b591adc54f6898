"""the PTE paper's (arXiv 2604.05404) four tool-use inefficiency patterns, detected on toolwise trajectories.

Source: Su et al., "Beyond Accuracy: Unveiling Inefficiency Patterns in Tool-Integrated Reasoning",
arXiv:2604.05404v2 (ACL 2026). The paper's operational definitions are its Appendix E "Detection Heuristics"
(with Table 7's one-line "Heuristic Definition"), described in prose in §6.2:

* **Confirmatory Tool Usage.** App. E: "Detected when the model generates an answer or final value in its
  reasoning text before invoking the Python tool for verification." Table 7: "Answer token generated
  pre-tool". §6.2: "models often use tools to verify their internal thoughts rather than using them as
  direct solvers".
* **Tool-Mixing.** App. E: "Detected when a trajectory uses more than one distinct tool type (e.g., both
  search and Python)." Table 7: "Unique tool types > 1". §6.2 calls it "a kind of inefficient
  over-tooluse".
* **Lack of Tool Priors.** App. E: "Detected when a tool call returns empty output or execution error due
  to missing print statements or incorrect syntax." Table 7: "Empty or Error tool return". §6.2: "the
  model often forgets to print the final value, so no output is returned".
* **Tool Format Collapse.** App. E: "Detected when the output contains JSON parsing errors or schema
  violations." Table 7: "Schema/JSON Error in output". §6.2: renaming the tool "or sending a single query
  instead of the expected list queries, is enough to break the call"; Qwen-2.5 "reverts to this style
  [```python ...```] instead of using the required <tool_call> tag".

Operationalisation on toolwise trajectories (``data_builders/agent/loop.py`` ``_record``). Only calls with
``status == "executed"`` count as *using* or *invoking* a tool: a call the controller skipped or the
protocol rejected never ran, so an arm whose controller skips calls shows the effect in these counts.

* ``confirmatory_tool_use``: some executed call is preceded, in the model's own text, by an answer that
  no earlier tool result supplied. "The model's own text" is every earlier turn plus the current turn up
  to its call (before ``<tool_call>``, or before the call's JSON; unreadable call attempts are cut the
  same way), minus any controller ``prefill_text``.
  "An answer" is the content of a ``\\boxed{}`` there, or a mention of the trajectory's final ``answer``.
  Deviations: the paper names the Python tool; toolwise applies this to every tool. A bare mention
  counts only for answers of at least 2 characters that are not a boolean word (``True``/``yes``...) and
  do not occur in the task's instruction (restating the question is not answering it): those appear in
  reasoning text anyway, so for them only a ``\\boxed{}`` counts. Matching is case-insensitive, ignores
  whitespace inside the answer, and respects token boundaries (``17`` is not in ``170`` or ``17.5``). An
  answer the loop sent back for verification (``on_answer`` "continue") followed by a tool call is
  confirmatory by this definition: the harness asked for it, but the cost is the same.
* ``tool_mixing``: more than one distinct tool name among executed calls to tools that exist (calls
  answered "Tool X not available", ``error_kind == "unavailable_tool"``, are a format failure, below).
  Approximate: every toolwise task has one environment, i.e. one toolset, so the paper's toolset-level
  "tool type" (search vs Python) cannot differ within a task; the tool name is the finest type there is.
  Multi-step tasks that need two tools of their environment (list ``append`` then ``sort``) count too;
  the paper's heuristic does not ask whether one tool would have sufficed, and neither does this.
* ``lack_of_tool_prior``: some executed call returned an execution error (``error_kind`` ``tool_error``,
  ``runtime_error`` or ``argument_limit``: the call was well formed but the tool failed on it, e.g. code
  raising ``SyntaxError``) or an empty output (``success`` true, but the ``result``, or ``stdout``/
  ``data`` when there is no ``result``, is empty; e.g. code that computes but never prints). The
  paper's "due to missing print statements or incorrect syntax" is a cause toolwise does not record, so
  every execution error counts, as in Table 7's "Empty or Error tool return". Simulated stressor
  payloads (``[EMPTY_OUTPUT]``, ``[SIMULATED_TOOL_ERROR]``) are the environment's doing and are excluded.
* ``tool_format_collapse``: any of (a) a turn that tried a call the parser could not read (the loop's
  ``malformed_calls``: ``<tool_call>`` or ``"name"`` in a turn that parsed as neither call nor answer):
  the JSON parsing error; (b) a turn that parsed as neither call nor answer but holds a Markdown code
  fence (the Qwen-2.5 ```python``` fallback); (c) an executed call rejected by the schema: unknown tool
  (``unavailable_tool``), ``missing_param`` or ``bad_type``; (d) an executed call with argument keys its
  tool's schema does not define (the runtime silently drops them, so no error is recorded; checked only
  when the trajectory's ``env`` is a known environment). Calls rejected for the reasoning rule
  (``status == "rejected"``) are protocol violations, not call-format ones, and are not counted.

Input: typed :class:`~data_builders.agent.trajectory.Trajectory` objects, whose validator
(``Trajectory.from_dict`` / ``validate``) guarantees every field used here; nothing is re-checked or
guessed in this module.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Iterable, Mapping

from data_builders.agent.parsing import has_boxed, parse_tool_call
from data_builders.agent.trajectory import Call, Trajectory, Turn
from data_builders.environments import ENVIRONMENTS
from data_builders.protocol import TOOL_CALL_OPEN
from data_builders.tasks.scoring import boxed_span

__all__ = ["PATTERNS", "PATTERN_NAMES", "detect", "count_patterns"]

PATTERNS: tuple[tuple[str, str], ...] = (
    ("confirmatory_tool_use",
     "an executed tool call comes after the model already wrote an answer no tool had given it (think, then verify)"),
    ("tool_mixing",
     "the trajectory executes more than one distinct tool"),
    ("lack_of_tool_prior",
     "an executed call returned an execution error or empty output (e.g. code that never prints)"),
    ("tool_format_collapse",
     "a call the parser could not read, a code fence instead of a call, or a call violating the tool schema"),
)
PATTERN_NAMES: tuple[str, ...] = tuple(name for name, _ in PATTERNS)

SCHEMA_ERRORS = frozenset({"unavailable_tool", "missing_param", "bad_type"})
EXECUTION_ERRORS = frozenset({"tool_error", "runtime_error", "argument_limit"})
STRESSOR_MESSAGES = ("[EMPTY_OUTPUT]", "[SIMULATED_TOOL_ERROR]")
# Answers this common in reasoning text only count when boxed.
_WEAK_ANSWERS = frozenset({"true", "false", "yes", "no", "none"})
_MIN_BARE_CHARS = 2
_MAX_ANSWER_CHARS = 500
_FENCE = "```"


def _executed(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c.status == "executed"]


def _model_text(turn: Turn) -> str:
    """The turn's text without the controller's prefill (the loop stores ``prefill + generated``)."""
    text, prefill = turn.text, turn.prefill_text
    if prefill and text.startswith(prefill):
        return text[len(prefill):]
    return text


def _before_call(text: str) -> str:
    """The part of a call turn written before the call itself (cf. ``parsing.reasoning_present``)."""
    tag = text.find(TOOL_CALL_OPEN)
    if tag >= 0:
        return text[:tag]
    call = parse_tool_call(text)
    if call is not None and call.raw:
        at = text.find(call.raw)
        if at >= 0:
            return text[:at]
    brace = text.find("{")
    return text[:brace] if brace >= 0 else text


def _payload_text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)


# ------------------------------------------------------------------------------------------- matching
@lru_cache(maxsize=4096)
def _pattern(value: str) -> re.Pattern | None:
    chars = [c for c in value if not c.isspace()]
    if not chars or len(chars) > _MAX_ANSWER_CHARS:
        return None
    body = r"\s*".join(re.escape(c) for c in chars)
    # Token boundaries: 17 is not inside 170, x17, 1.17, -17 or 17.5.
    head = r"(?<![\w.])" if not chars[0].isdigit() else r"(?<![\w.\-])"
    tail = r"(?!\w|\.\d)"
    return re.compile(head + body + tail, re.IGNORECASE)


def _mentions(text: str, value: str) -> bool:
    pat = _pattern(value.strip())
    return pat is not None and pat.search(text) is not None


def _boxed_values(text: str) -> list[str]:
    out, pos = [], 0
    while True:
        span = boxed_span(text[pos:])
        if span is None:
            return out
        begin, end = span
        value = text[pos + begin:pos + end].strip()
        if value:
            out.append(value)
        pos += end + 1


def _final_answer(traj: Trajectory) -> str:
    final, answer = traj.final_response, traj.answer
    # extract_boxed returns the whole response for an empty box (scoring quirk): that is no answer.
    if answer == final and has_boxed(final):
        return ""
    return answer.strip()


def _instruction(traj: Trajectory) -> str:
    return next((m["content"] for m in traj.messages if m["role"] == "user"), "")


def _bare_matchable(answer: str, instruction: str) -> bool:
    compact = "".join(answer.split())
    if len(compact) < _MIN_BARE_CHARS or compact.lower() in _WEAK_ANSWERS:
        return False
    return not (instruction and _mentions(instruction, answer))


# ------------------------------------------------------------------------------------------- detectors
def _confirmatory(traj: Trajectory) -> bool:
    answer = _final_answer(traj)
    bare = bool(answer) and _bare_matchable(answer, _instruction(traj))
    by_round: dict[int, list[Call]] = {}
    for call in traj.calls:
        by_round.setdefault(call.round, []).append(call)
    tool_texts: list[str] = []          # every tool result returned so far
    internal = False                    # the model has stated an answer no tool gave it

    def from_tools(value: str) -> bool:
        return any(_mentions(t, value) for t in tool_texts)

    for turn in traj.turns:
        round_calls = by_round.get(turn.round, [])
        text = _model_text(turn)
        kind = turn.kind
        if round_calls or kind == "call":
            text = _before_call(text)
        elif kind == "content" and TOOL_CALL_OPEN in text:
            text = text[:text.find(TOOL_CALL_OPEN)]    # an unreadable call attempt is not reasoning
        if not internal:
            candidates = _boxed_values(text)
            if bare and _mentions(text, answer):
                candidates.append(answer)
            internal = any(not from_tools(v) for v in candidates)
        for call in round_calls:
            if call.status != "executed":
                continue
            if internal:
                return True
            tool_texts.append(_payload_text(call.result))
    return False


def _tool_mixing(calls: list[Call]) -> bool:
    names = {c.name for c in _executed(calls) if c.error_kind != "unavailable_tool"}
    return len(names) > 1


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, dict, set)):
        return len(value) == 0
    return False


def _empty_output(result: Mapping) -> bool:
    for key in ("result", "stdout", "data"):
        if key in result:
            return _is_empty(result[key])
    rest = [v for k, v in result.items() if k not in ("success", "message")]
    return all(_is_empty(v) for v in rest)


def _stressed(result: Any) -> bool:
    return isinstance(result, Mapping) and str(result.get("message", "")).startswith(STRESSOR_MESSAGES)


def _lack_of_tool_prior(calls: list[Call]) -> bool:
    for call in _executed(calls):
        result = call.result
        if _stressed(result):
            continue
        if call.error_kind in EXECUTION_ERRORS:
            return True
        if call.error_kind is None and call.ok and _empty_output(result):
            return True
    return False


@lru_cache(maxsize=None)
def _schema_keys(env: str) -> dict[str, frozenset[str]] | None:
    """Argument names per tool of a known environment; None for an unknown one."""
    cls = ENVIRONMENTS.get(env)
    if cls is None:
        return None
    return {s["name"]: frozenset(s.get("parameters", {}).get("properties", {})) for s in cls.schemas()}


def _tool_format_collapse(traj: Trajectory) -> bool:
    if traj.malformed_calls > 0:
        return True
    for turn in traj.turns:
        if turn.kind != "content":
            continue
        text = turn.text
        if TOOL_CALL_OPEN in text or '"name"' in text or _FENCE in text:
            return True
    schemas = _schema_keys(traj.env)
    for call in _executed(traj.calls):
        if call.error_kind in SCHEMA_ERRORS:
            return True
        if schemas is not None and call.name in schemas:
            if set(map(str, call.args)) - schemas[call.name]:
                return True
    return False


# ------------------------------------------------------------------------------------------- public API
def detect(trajectory: Trajectory) -> dict[str, bool]:
    """Which of the four patterns one trajectory shows (keys: :data:`PATTERN_NAMES`)."""
    return {
        "confirmatory_tool_use": _confirmatory(trajectory),
        "tool_mixing": _tool_mixing(trajectory.calls),
        "lack_of_tool_prior": _lack_of_tool_prior(trajectory.calls),
        "tool_format_collapse": _tool_format_collapse(trajectory),
    }


def count_patterns(trajectories: Iterable[Trajectory]) -> dict[str, int]:
    """Number of trajectories showing each pattern, plus ``n`` (trajectories seen)."""
    counts = {name: 0 for name in PATTERN_NAMES}
    n = 0
    for traj in trajectories:
        for name, hit in detect(traj).items():
            counts[name] += int(hit)
        n += 1
    counts["n"] = n
    return counts
