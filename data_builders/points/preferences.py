"""Preference pairs for a policy-side fine-tune (``recipe=tool_dpo``) from the policy's own decision points.

The probe labels already say where the policy answers right without a tool: a probe point of label 0 is a task
whose direct (``hard_no_tool``) answer was right, so at its first prompt the direct answer is preferred over a call;
label 1 (the direct answer was wrong) prefers the call. This is the knowledge-aware preference data of the
tool-overuse paper (arXiv 2604.19749: pairs that prefer answering directly where the model already knows the
answer), read off toolwise's own labels. A flip point of class ``harmful`` (the forced answer was right before the
call and wrong after it) prefers answering at that moment; ``helpful`` of a correct episode (its label) prefers the
call. Each side is the policy's own text where its rollouts wrote one (its direct answer, its call, its forced
answer), else the oracle's call; the pair says which.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

# what each pair teaches, by the point it comes from
ANSWER_KNOWN = "answer_known"       # probe label 0: the direct answer was right
TOOL_NEEDED = "tool_needed"         # probe label 1: the direct answer was wrong
HARMFUL_CALL = "harmful_call"       # flip class harmful: right before the call, wrong after it
HELPFUL_CALL = "helpful_call"       # flip label 1: wrong before, right after, the episode right


@dataclass(frozen=True)
class Pair:
    """One preference: at ``prompt`` (messages, with ``tools`` offered), ``chosen`` over ``rejected``."""
    point_id: str
    task_id: str
    split: str
    category: str
    label: int
    prompt: list[dict] = field(hash=False)
    tools: list[dict] = field(hash=False)
    chosen: str = ""
    rejected: str = ""
    chosen_from: str = "policy"         # "policy" (its own rollout) or "oracle"
    rejected_from: str = "policy"
    prefers_call: bool = False

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Texts:
    """What the policy itself wrote, by task id: its first turn in default mode (a call or an answer) and, for
    flip points, by point id: the messages before the call, the call's text and the forced answer there."""
    first_prompt: Mapping[str, list[dict]]
    tools: Mapping[str, list[dict]]
    first_turn: Mapping[str, str] = field(default_factory=dict)
    is_call: Callable[[str], bool] = lambda text: False
    oracle_call: Callable[[str], str | None] = lambda task_id: None
    flip_state: Mapping[str, dict] = field(default_factory=dict)   # point id -> {messages, call, forced_answer}


# The columns a flip build writes for these pairs (data_builders/points/labelers.py, label_flip): the loop's messages
# before the call (JSON), the call turn's text, and the forced answer at that moment (``\\boxed{`` included).
FLIP_STATE_COLUMNS = ("before_messages", "call_text", "before_answer")


def flip_state_columns(messages: Sequence[Mapping], call_text: str, forced_answer: str) -> dict[str, str]:
    """A flip point's row fields for :func:`flip_pairs` (written by the flip labeler)."""
    return dict(zip(FLIP_STATE_COLUMNS, (json.dumps(list(messages), ensure_ascii=False), call_text, forced_answer)))


def flip_states(rows: Sequence[Mapping]) -> dict[str, dict]:
    """Point id -> ``{messages, call, forced_answer}`` for the flip rows that carry the state (a dataset built
    before the columns existed has none: its points are left out as "no recorded state")."""
    out = {}
    for row in rows:
        values = [row.get(c) for c in FLIP_STATE_COLUMNS]
        if all(isinstance(v, str) for v in values):
            out[str(row["point_id"])] = {"messages": json.loads(values[0]), "call": values[1],
                                         "forced_answer": values[2]}
    return out


def _call_side(task_id: str, texts: Texts) -> tuple[str | None, str]:
    own = texts.first_turn.get(task_id)
    if own is not None and texts.is_call(own):
        return own, "policy"
    return texts.oracle_call(task_id), "oracle"


def probe_pairs(rows: Sequence[Mapping], texts: Texts) -> tuple[list[Pair], Counter]:
    """A pair per labelled probe point whose two sides exist; the counter says what was left out and why."""
    pairs, left = [], Counter()
    for row in rows:
        task_id, label = str(row["task_id"]), int(row["label"])
        direct = row.get("no_tool_answer")
        if task_id not in texts.first_prompt:
            left["no first prompt"] += 1
            continue
        if not direct:
            left["no direct answer"] += 1
            continue
        call, call_from = _call_side(task_id, texts)
        if call is None:
            left["no call (the policy made none, no oracle)"] += 1
            continue
        base = dict(point_id=str(row["point_id"]), task_id=task_id, split=str(row["split"]), label=label,
                    prompt=list(texts.first_prompt[task_id]), tools=list(texts.tools[task_id]))
        if label == 0:
            pairs.append(Pair(**base, category=ANSWER_KNOWN, chosen=direct, rejected=call, chosen_from="policy",
                              rejected_from=call_from, prefers_call=False))
        else:
            pairs.append(Pair(**base, category=TOOL_NEEDED, chosen=call, rejected=direct, chosen_from=call_from,
                              rejected_from="policy", prefers_call=True))
    return pairs, left


def flip_pairs(rows: Sequence[Mapping], texts: Texts) -> tuple[list[Pair], Counter]:
    """A pair per harmful flip point (the answer preferred) and per label-1 point (the call preferred); unchanged
    points and helpful calls of episodes that ended wrong teach no preference."""
    pairs, left = [], Counter()
    for row in rows:
        point_id, task_id = str(row["point_id"]), str(row["task_id"])
        harmful, helpful = row.get("flip_class") == "harmful", int(row["label"]) == 1
        if not (harmful or helpful):
            left[f"flip class {row.get('flip_class')} (no preference)"] += 1
            continue
        state = texts.flip_state.get(point_id)
        if state is None:
            left["no recorded state"] += 1
            continue
        if task_id not in texts.tools:
            left["task not among the run's tasks"] += 1
            continue
        base = dict(point_id=point_id, task_id=task_id, split=str(row["split"]), label=int(row["label"]),
                    prompt=list(state["messages"]), tools=list(texts.tools[task_id]))
        if harmful:
            pairs.append(Pair(**base, category=HARMFUL_CALL, chosen=state["forced_answer"], rejected=state["call"],
                              prefers_call=False))
        else:
            pairs.append(Pair(**base, category=HELPFUL_CALL, chosen=state["call"], rejected=state["forced_answer"],
                              prefers_call=True))
    return pairs, left


def balanced(pairs: Sequence[Pair], seed: int = 0) -> tuple[list[Pair], Counter]:
    """As many answer-preferred pairs as call-preferred ones in each split: the larger side is subsampled (seeded;
    the kept pairs keep their order). A policy that calls on nearly every task and is trained on twice as many
    call-preferred pairs learns to call more, on the tasks it knows too; balanced, what is left to learn is which
    prompts prefer which side. The counter says how many of each split and side were left out."""
    rng = random.Random(seed)
    drop: set[int] = set()
    left = Counter()
    for split in sorted({p.split for p in pairs}):
        sides = {flag: [i for i, p in enumerate(pairs) if p.split == split and p.prefers_call == flag]
                 for flag in (True, False)}
        n = min(len(v) for v in sides.values())
        for flag, idx in sides.items():
            cut = set(idx) - set(rng.sample(idx, n))
            drop |= cut
            if cut:
                left[f"balance: {split} {'call' if flag else 'answer'}-preferred over the other side's {n}"] += len(cut)
    return [p for i, p in enumerate(pairs) if i not in drop], left


def composition(pairs: Sequence[Pair]) -> dict[str, dict]:
    """Pairs per category and per label, and where each side came from (printed, and saved with the adapter)."""
    out: dict[str, dict] = {}
    for p in pairs:
        c = out.setdefault(p.category, {"pairs": 0, "label": Counter(), "chosen_from": Counter(),
                                         "rejected_from": Counter(), "split": Counter()})
        c["pairs"] += 1
        c["label"][str(p.label)] += 1
        c["chosen_from"][p.chosen_from] += 1
        c["rejected_from"][p.rejected_from] += 1
        c["split"][p.split] += 1
    return {k: {kk: dict(vv) if isinstance(vv, Counter) else vv for kk, vv in v.items()} for k, v in out.items()}
