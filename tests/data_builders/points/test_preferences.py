"""Preference pairs from decision points: each pair's preferred side follows its point's label."""
from __future__ import annotations

from data_builders.agent.parsing import has_boxed, parse_tool_call
from data_builders.agent.prompts import tool_call_text
from data_builders.points.preferences import (ANSWER_KNOWN, HARMFUL_CALL, HELPFUL_CALL, TOOL_NEEDED, Pair, Texts,
                                              balanced, composition, flip_pairs, probe_pairs)

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
OWN_CALL = "I will compute it.\n" + tool_call_text("add", {"a": 2, "b": 2}, "xml")
ORACLE_CALL = tool_call_text("add", {"a": 40, "b": 2}, "xml")


def probe_row(task_id, label, direct="\\boxed{4}"):
    return {"point_id": task_id, "task_id": task_id, "split": "train", "label": label, "no_tool_answer": direct}


def texts(**kw):
    ids = ["t0", "t1", "t2", "t3", "t4"]
    return Texts(first_prompt={t: [{"role": "user", "content": f"question {t}"}] for t in ids},
                 tools={t: TOOLS for t in ids},
                 first_turn={"t0": OWN_CALL, "t1": "\\boxed{7}", "t2": OWN_CALL, "t3": "\\boxed{1}"},
                 is_call=lambda text: parse_tool_call(text) is not None,
                 oracle_call=lambda t: ORACLE_CALL if t != "t4" else None, **kw)


def test_probe_pairs_prefer_the_direct_answer_where_it_was_right_and_the_call_where_it_was_wrong():
    rows = [probe_row("t0", 0), probe_row("t1", 0), probe_row("t2", 1, "\\boxed{5}"), probe_row("t3", 1, "\\boxed{9}"),
            probe_row("t4", 0), probe_row("t5", 1), probe_row("t0", 1, direct=None) | {"point_id": "x"}]
    pairs, left = probe_pairs(rows, texts())
    by = {p.point_id: p for p in pairs}
    assert set(by) == {"t0", "t1", "t2", "t3"}
    assert left == {"no call (the policy made none, no oracle)": 1, "no first prompt": 1, "no direct answer": 1}
    for p in pairs:
        call, answer = (p.chosen, p.rejected) if p.prefers_call else (p.rejected, p.chosen)
        # the preferred side is a call exactly when the direct answer was wrong (label 1)
        assert p.prefers_call == (p.label == 1) and p.category == (TOOL_NEEDED if p.label else ANSWER_KNOWN)
        assert parse_tool_call(call) is not None and parse_tool_call(answer) is None and has_boxed(answer)
        assert p.prompt == [{"role": "user", "content": f"question {p.task_id}"}] and p.tools == TOOLS
    # the policy's own texts where its rollout wrote them; the oracle's call where it made none
    assert (by["t0"].chosen, by["t0"].rejected, by["t0"].rejected_from) == ("\\boxed{4}", OWN_CALL, "policy")
    assert (by["t1"].rejected, by["t1"].rejected_from) == (ORACLE_CALL, "oracle")
    assert (by["t2"].chosen, by["t2"].rejected, by["t2"].chosen_from) == (OWN_CALL, "\\boxed{5}", "policy")
    assert (by["t3"].chosen, by["t3"].chosen_from, by["t3"].rejected) == (ORACLE_CALL, "oracle", "\\boxed{9}")
    comp = composition(pairs)
    assert comp[ANSWER_KNOWN]["pairs"] == 2 and comp[ANSWER_KNOWN]["label"] == {"0": 2}
    assert comp[TOOL_NEEDED]["chosen_from"] == {"policy": 1, "oracle": 1}


def test_flip_pairs_prefer_answering_before_a_harmful_call_and_calling_where_the_call_helped():
    state = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "thinking"}],
             "call": OWN_CALL, "forced_answer": "\\boxed{4}"}
    rows = [{"point_id": "t0:0", "task_id": "t0", "split": "train", "label": 0, "flip_class": "harmful"},
            {"point_id": "t1:0", "task_id": "t1", "split": "test", "label": 1, "flip_class": "helpful"},
            {"point_id": "t2:0", "task_id": "t2", "split": "train", "label": 0, "flip_class": "helpful"},
            {"point_id": "t3:0", "task_id": "t3", "split": "train", "label": 0, "flip_class": "unchanged"},
            {"point_id": "t4:0", "task_id": "t4", "split": "train", "label": 0, "flip_class": "harmful"}]
    pairs, left = flip_pairs(rows, texts(flip_state={"t0:0": state, "t1:0": state, "t2:0": state}))
    by = {p.point_id: p for p in pairs}
    assert set(by) == {"t0:0", "t1:0"}
    assert left == {"flip class helpful (no preference)": 1, "flip class unchanged (no preference)": 1,
                    "no recorded state": 1}
    assert by["t0:0"].category == HARMFUL_CALL and not by["t0:0"].prefers_call
    assert (by["t0:0"].chosen, by["t0:0"].rejected) == ("\\boxed{4}", OWN_CALL)
    assert by["t1:0"].category == HELPFUL_CALL and by["t1:0"].prefers_call and by["t1:0"].chosen == OWN_CALL
    assert by["t1:0"].prompt == state["messages"] and by["t1:0"].split == "test"


def test_balanced_pairs_keep_as_many_answer_preferred_as_call_preferred_pairs_per_split():
    def pair(i, split, prefers_call):
        return Pair(point_id=f"{split}{i}", task_id=f"t{i}", split=split, category=TOOL_NEEDED if prefers_call
                    else ANSWER_KNOWN, label=int(prefers_call), prompt=[], tools=[], prefers_call=prefers_call)
    pairs = ([pair(i, "train", True) for i in range(9)] + [pair(i, "train", False) for i in range(9, 12)]
             + [pair(i, "val", False) for i in range(2)] + [pair(i, "val", True) for i in range(2, 3)])
    kept, left = balanced(pairs, seed=3)
    count = {(s, c): sum(p.split == s and p.prefers_call == c for p in kept) for s in ("train", "val") for c in (0, 1)}
    assert count == {("train", 0): 3, ("train", 1): 3, ("val", 0): 1, ("val", 1): 1}
    # the minority side is kept whole, the pairs keep their order, and what was cut is counted
    assert [p for p in kept if not p.prefers_call and p.split == "train"] == pairs[9:12]
    assert [pairs.index(p) for p in kept] == sorted(pairs.index(p) for p in kept)
    assert left == {"balance: train call-preferred over the other side's 3": 6,
                    "balance: val answer-preferred over the other side's 1": 1}
    # seeded: the same seed cuts the same pairs, another seed (here) other ones
    assert balanced(pairs, seed=3)[0] == kept and balanced(pairs, seed=4)[0] != kept
