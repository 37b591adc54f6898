"""SFT data from oracle runs: demonstrations the real agent loop accepts turn by turn, train split only."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from data_builders.agent import prompts as P
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.oracle.sft import SplitLeakError, build_examples, write_parquet
from data_builders.tasks import load_tasks
from tests.doubles import ScriptedBackend


@pytest.fixture(scope="module")
def train_tasks():
    return load_tasks("builtin", split="train", n_per_cell=3)


def test_test_tasks_never_become_training_data():
    with pytest.raises(SplitLeakError, match="test"):
        build_examples(load_tasks("builtin", split="test", limit=2))


def test_rows_cover_every_task_and_direct_answers_only_easy(train_tasks):
    rows, counts = build_examples(train_tasks)
    tool = [r for r in rows if r["kind"] == "tool"]
    direct = [r for r in rows if r["kind"] == "direct"]
    assert counts["dropped_tool"] == 0 and len(tool) == len(train_tasks)
    assert {r["difficulty"] for r in direct} == {"easy"}
    assert len(direct) == sum(t.difficulty == "easy" for t in train_tasks)
    for r in rows:
        assert r["split"] == "train"
        assert r["messages"][0]["role"] == "system" and r["messages"][-1]["content"].startswith("\\boxed{")
        assert sum(m["role"] == "system" for m in r["messages"]) == 1  # contract merged as the agent does
        assert json.loads(r["tools"])[0]["type"] == "function"


def test_demonstrations_replay_through_the_agent_loop_unchanged(train_tasks):
    """Feed each demonstration's assistant turns to the real agent: every call is accepted and executed,
    the tool responses match the recorded ones, and the final answer is scored correct."""
    rows, _ = build_examples(train_tasks)
    by_task = {t.id: t for t in train_tasks}
    tool_rows = [r for r in rows if r["kind"] == "tool"]
    scripts = {json.dumps(by_task[r["task_id"]].instruction)[1:-1]: [m["content"] for m in r["messages"]
                                                                     if m["role"] == "assistant"]
               for r in tool_rows}
    agent = Agent(ScriptedBackend(scripts), AgentConfig(mode="default", max_rounds=6))
    trajs = {t.task_id: t for t in agent.run([by_task[r["task_id"]] for r in tool_rows])}
    for r in tool_rows:
        traj = trajs[r["task_id"]]
        assert traj.correct, (r["task_id"], traj.final_response)
        assert traj.tool_calls == r["n_calls"] and traj.format_errors == 0
        assert P.template_messages(traj.messages) == r["messages"]


def test_parquet_round_trip(tmp_path, train_tasks):
    rows, _ = build_examples(train_tasks[:4])
    path = write_parquet(rows, tmp_path / "sft_train.parquet")
    assert pq.read_table(path).to_pylist() == rows


def test_direct_rules_draw_a_mixture_without_conflicting_replies():
    import random

    from data_builders.oracle.sft import DirectRule
    tasks = load_tasks("builtin", split="train", n_per_cell=2, seed=0)
    rules = [DirectRule(modes=("no_tool", "hard_no_tool"), difficulties=("easy", "medium", "hard"), fraction=1.0),
             DirectRule(modes=("default",), difficulties=("easy",), fraction=1.0)]
    rows, counts = build_examples(tasks, modes=["default", "force"], rng=random.Random(0), direct_rules=rules)
    by_task: dict = {}
    for r in rows:
        by_task.setdefault(r["task_id"], []).append((r["kind"], r["mode"]))
    for t in tasks:
        got = by_task[str(t.id)]
        assert sum(k == "direct" and m in ("no_tool", "hard_no_tool") for k, m in got) == 1   # fraction 1.0
        if t.difficulty == "easy":
            assert ("direct", "default") in got and ("tool", "force") in got and ("tool", "default") not in got
        else:
            assert ("direct", "default") not in got
    for r in rows:
        last = r["messages"][-1]["content"]
        replies = "".join(m["content"] for m in r["messages"] if m["role"] == "assistant")
        assert (r["kind"] == "direct") == ("<tool_call>" not in replies)
        assert last.startswith("\\boxed{")
    assert counts["direct_default"] == sum(t.difficulty == "easy" for t in tasks)
    with pytest.raises(ValueError, match="pass rng"):
        build_examples(tasks[:1], direct_rules=rules)


def test_direct_rule_categories_limit_which_tasks_it_answers():
    """v3's rules: knowledge (B) tasks always get a direct answer in no_tool or hard_no_tool mode, multi-hop (M) ones
    in both modes (two rules), and no other category gets one from these rules."""
    import random

    from data_builders.oracle.sft import DirectRule
    tasks = load_tasks("builtin", split="train", n_per_cell=2, seed=0, hops="both")
    assert {t.category for t in tasks} == {"A", "B", "C", "M"}
    all_diff = ("easy", "medium", "hard")
    rules = [DirectRule(modes=("no_tool", "hard_no_tool"), difficulties=all_diff, categories=("B",)),
             DirectRule(modes=("no_tool",), difficulties=all_diff, multi_step=True, categories=("M",)),
             DirectRule(modes=("hard_no_tool",), difficulties=all_diff, multi_step=True, categories=("M",))]
    rows, _ = build_examples(tasks, modes=["default", "force"], rng=random.Random(0), direct_rules=rules)
    direct: dict = {}
    for r in rows:
        if r["kind"] == "direct":
            direct.setdefault(r["task_id"], set()).add(r["mode"])
    for t in tasks:
        got = direct.get(str(t.id), set())
        if t.category == "B":
            assert len(got) == 1 and got <= {"no_tool", "hard_no_tool"}
        elif t.category == "M":
            assert got == {"no_tool", "hard_no_tool"}
        else:
            assert not got
    # every task keeps its call demonstration (its direct answers never take default or force)
    assert {r["task_id"] for r in rows if r["kind"] == "tool"} == {str(t.id) for t in tasks}
