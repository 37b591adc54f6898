"""The agent state machine (docs/guide.md#when2tool-the-protocol-state-machine) and its three hooks, driven by a
scripted backend so every branch is exercised deterministically. Real-model runs are in
tests/data_builders/test_embedded.py."""
from __future__ import annotations

import json

import pytest

from data_builders.agent import prompts as P
from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import CONTEXT_EXCEEDED, Agent, AgentConfig
from data_builders.agent.trajectory import Decision
from data_builders.tasks.schema import Task
from tests.doubles import CALL, ScriptedBackend, SkipHooks, calc_task, run


def test_call_then_answer_is_scored_and_counted():
    (t,), _ = run({"20+20": [CALL % "20+20", "\\boxed{40}"]}, [calc_task(1, "20+20", "40")], mode="force")
    assert t.correct and t.tool_calls == 1 and t.rounds == 2 and t.ended == "answer"
    assert t.calls[0].result == {"success": True, "result": 40, "expression": "20+20"}
    assert t.calls[0].ok and t.calls[0].error_kind is None
    # the tool result went back as a <tool_response> user message (xml format)
    assert t.messages[-2]["role"] == "user" and t.messages[-2]["content"].startswith("<tool_response>\n{")
    assert [tr.kind for tr in t.turns] == ["call", "answer"]
    assert t.turns[1].prefill_tokens > t.turns[0].prefill_tokens  # whole context each turn


def test_direct_answer_without_reasoning_is_accepted():
    (t,), _ = run({"1+1": ["\\boxed{2}"]}, [calc_task(1, "1+1", "2")])
    assert t.correct and t.tool_calls == 0 and t.format_errors == 0


def test_no_reasoning_mode_rejects_reasoned_answer_then_accepts_bare_one():
    (t,), _ = run({"1+1": ["I think the answer is clearly two. \\boxed{2}", "\\boxed{2}"]}, [calc_task(1, "1+1", "2")])
    assert t.correct and t.format_errors == 1 and t.rounds == 2
    assert t.messages[3]["content"] == P.NO_REASONING_ANSWER


def test_reasoning_mode_rejects_bare_call():
    (t,), _ = run({"2+2": [CALL % "2+2", "I should compute with the tool now. " + CALL % "2+2", "\\boxed{4}"]},
                  [calc_task(1, "2+2", "4")], reasoning=True)
    assert t.rejected_calls == 1 and t.tool_calls == 1 and t.correct
    assert t.calls[0].status == "rejected" and t.calls[1].status == "executed"


def test_hard_no_tool_rejects_without_executing():
    (t,), _ = run({"3+3": [CALL % "3+3", "\\boxed{6}"]}, [calc_task(1, "3+3", "6")], mode="hard_no_tool")
    assert t.tool_calls == 0 and t.rejected_calls == 1 and t.correct
    assert P.TOOLS_UNAVAILABLE in t.messages[3]["content"]


def test_malformed_call_is_counted_never_crashes():
    bad = '<tool_call>{"name": "evaluate_expression", "arguments": {"expression": "1+</tool_call>'
    (t,), _ = run({"5+5": [bad, "rambling", "\\boxed{10}"]}, [calc_task(1, "5+5", "10")], max_rounds=5)
    assert t.malformed_calls == 1 and t.format_errors == 2 and t.correct


def test_unknown_tool_is_routed_and_counted_as_error():
    (t,), _ = run({"7*7": ['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "\\boxed{49}"]},
                  [calc_task(1, "7*7", "49")])
    assert t.tool_calls == 1 and t.calls[0].error_kind == "unavailable_tool"


def test_max_rounds_ends_episode_wrong():
    (t,), _ = run({"9-1": ["hmm"]}, [calc_task(1, "9-1", "8")], max_rounds=3)
    assert t.rounds == 3 and t.ended == "max_rounds" and not t.correct and t.final_response == ""


def test_context_limit_ends_episode():
    (t,), _ = run({"9-2": ["x " * 50]}, [calc_task(1, "9-2", "7")], max_rounds=50, max_context=300,
                  max_new_tokens=10)
    assert t.final_response == CONTEXT_EXCEEDED and t.ended == "context_length"


class _Positions:
    max_position_embeddings = 8192


@pytest.mark.parametrize("over", [{"max_new_tokens": 8192}, {"max_new_tokens": 300, "max_context": 300},
                                  {"max_new_tokens": 10**9}])
def test_a_token_budget_that_fills_the_context_is_refused_before_any_episode(over):
    # Accepted before: every episode ended context_length at round 0 and a probe build labelled each "tool needed".
    backend = ScriptedBackend({})
    backend.config = _Positions()
    with pytest.raises(ValueError, match=r"max_new_tokens=\d+ leaves no room for a prompt: the context holds"):
        Agent(backend, AgentConfig(**over))


@pytest.mark.parametrize("field,value", [("max_new_tokens", 1e9), ("max_new_tokens", 0), ("max_new_tokens", True),
                                         ("max_rounds", 0), ("max_context", -1), ("max_in_flight", 2.5)])
def test_a_token_or_round_budget_that_is_not_a_positive_integer_is_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a positive integer, got {value!r}"):
        AgentConfig(**{field: value})


def test_a_budget_that_leaves_no_room_for_an_environments_prompt_is_refused_before_generating():
    backend = ScriptedBackend({"9-2": ["\\boxed{7}"]})
    task = calc_task(1, "9-2", "7")
    # the scripted backend counts words: the CalculatorEnv prompt is far over 10 words before its instruction
    overhead = backend.count_tokens(Agent(backend, AgentConfig()).initial_prompt(task)) - 6
    agent = Agent(backend, AgentConfig(max_context=300, max_new_tokens=300 - overhead))
    with pytest.raises(ValueError, match=r"max_new_tokens=\d+ leaves no room to generate: a CalculatorEnv prompt "
                                         r"in mode default takes \d+ tokens before its instruction"):
        agent.run([task])
    assert backend.calls == []                                  # refused before anything was generated
    with pytest.raises(ValueError, match="leaves no room to generate"):
        agent.check_tasks([task])                               # what a build asks before it writes anything
    (t,), _ = run({"9-2": ["\\boxed{7}"]}, [task], max_context=300, max_new_tokens=300 - overhead - 40)
    assert t.correct                                            # room enough: the episode runs


class _CountingBackend(ScriptedBackend):
    """Counts like a real tokenizer would be slow to: records the length of every text it tokenizes."""

    max_token_chars = 20

    def __init__(self, scripts):
        super().__init__(scripts)
        self.counted: list[int] = []

    def count_tokens(self, text):
        self.counted.append(len(text))
        return super().count_tokens(text)


def test_a_task_whose_instruction_overflows_the_context_ends_unscored_without_tokenizing_it_and_is_reported():
    from data_builders.agent.trajectory import summarize

    huge = calc_task(2, "1+1 " + "pad " * 2_500_000, "2")           # a 10 MB instruction
    backend = _CountingBackend({"9-2": ["\\boxed{7}"], "1+1": ["\\boxed{2}"]})
    small, big = Agent(backend, AgentConfig(max_context=4096, max_new_tokens=64)).run([calc_task(1, "9-2", "7"), huge])
    assert small.correct and not small.never_generated
    assert big.ended == "context_length" and big.rounds == 0 and big.never_generated and not big.correct
    # refused on its length in characters: the 10 MB prompt was never tokenized (a real tokenizer takes ~13 s)
    assert max(backend.counted) < 100_000
    s = summarize([small, big])
    assert s["context_exceeded"] == 1 and s["context_exceeded_before_generating"] == 1


def test_many_tasks_are_batched_together():
    tasks = [calc_task(i, f"{i}+{i}", str(2 * i)) for i in range(1, 6)]
    scripts = {f"{i}+{i}": [CALL % f"{i}+{i}", f"\\boxed{{{2 * i}}}"] for i in range(1, 6)}
    trajs, backend = run(scripts, tasks, max_in_flight=8)
    assert [t.task_id for t in trajs] == [1, 2, 3, 4, 5] and all(t.correct for t in trajs)
    assert [len(c) for c in backend.calls] == [5, 5]  # two rounds, all five episodes in each batch


def test_in_flight_cap_refills_from_queue():
    tasks = [calc_task(i, f"{i}+{i}", str(2 * i)) for i in range(1, 6)]
    scripts = {f"{i}+{i}": [f"\\boxed{{{2 * i}}}"] for i in range(1, 6)}
    backend = ScriptedBackend(scripts)
    rounds = []
    trajs = Agent(backend, AgentConfig(max_in_flight=2)).run(tasks, on_round=lambda s, n: rounds.append((s, n)))
    assert [len(c) for c in backend.calls] == [2, 2, 1] and all(t.correct for t in trajs)
    assert rounds == [(1, 2), (2, 2), (3, 1)]


class ProbeHooks(Hooks):
    hidden_layers = [0, 2]

    def __init__(self):
        self.seen = []

    def pre_generation(self, task, state):
        self.seen.append(tuple(state.hidden.shape))
        return "\\boxed{" if task.id == 1 else None


def test_pre_generation_reads_hidden_states_once_and_prefills():
    hooks = ProbeHooks()
    tasks = [calc_task(1, "4+4", "8"), calc_task(2, "6+6", "12")]
    trajs, backend = run({"4+4": ["8}"], "6+6": ["\\boxed{12}"]}, tasks, hooks)
    assert backend.prefill_calls == 1 and hooks.seen == [(2, 4), (2, 4)]
    t1, t2 = trajs
    assert t1.turns[0].prefill_text == "\\boxed{" and t1.final_response == "\\boxed{8}" and t1.correct
    assert t2.turns[0].prefill_text == "" and t2.correct
    assert t1.decisions[0] == Decision(hook="pre_generation", round=0, decision="\\boxed{")


def test_pre_call_skip_returns_noop_message_and_does_not_execute():
    (t,), _ = run({"8+8": [CALL % "8+8", "\\boxed{16}"]}, [calc_task(1, "8+8", "16")], SkipHooks())
    assert t.tool_calls == 0 and t.skipped_calls == 1 and t.calls[0].status == "skipped"
    assert json.loads(t.messages[3]["content"].split("\n")[1]) == P.SKIPPED_CALL_RESULT
    assert t.correct


class ContinueHooks(Hooks):
    def on_answer(self, episode, answer_text):
        return "continue"


def test_on_answer_continue_injects_verification_and_fixes_answer():
    (t,), _ = run({"12*12": ["\\boxed{124}", CALL % "12*12", "\\boxed{144}"]}, [calc_task(1, "12*12", "144")],
                  ContinueHooks(), max_continues=1)
    assert t.correct and t.tool_calls == 1
    assert t.messages[3]["content"] == P.VERIFY_PROMPT
    assert [d.decision for d in t.decisions if d.hook == "on_answer"] == ["continue"]


def test_on_answer_no_progress_commits_same_answer():
    (t,), _ = run({"13*13": ["\\boxed{169}", "\\boxed{169}"]}, [calc_task(1, "13*13", "169")], ContinueHooks(),
                  max_continues=3)
    assert t.correct and t.rounds == 2
    assert t.decisions[-1].decision == "stop_no_progress"


def test_on_answer_duplicate_call_stops_verification():
    script = [CALL % "2*3", "\\boxed{6}", CALL % "2*3", "\\boxed{7}"]
    (t,), _ = run({"2*3": script}, [calc_task(1, "2*3", "6")], ContinueHooks(), max_continues=2)
    assert t.ended == "duplicate_call" and t.final_response == "\\boxed{6}" and t.correct
    assert t.tool_calls == 1


def test_verification_cap_on_extra_rounds():
    (t,), _ = run({"2*5": ["\\boxed{11}", "let me think"]}, [calc_task(1, "2*5", "10")], ContinueHooks(),
                  max_rounds=1, verify_rounds=2)
    assert t.rounds == 3 and t.ended == "max_rounds" and t.final_response == "\\boxed{11}"


def test_list_env_gets_format_contract_and_sorted_tools():
    task = Task.from_dict({
        "id": 9, "instruction": "Single operation only. Initial [3, 1]. Apply reverse(). Return final list.",
        "difficulty": "easy", "environments": [{"name": "ListManipulationEnv",
                                                "tools": ["append", "remove", "insert", "reverse"], "parameters": {}}],
        "expected": {"answer": "[1, 3]"}}, split="test")
    call = '<tool_call>{"name": "reverse", "arguments": {"values": [3, 1]}}</tool_call>'
    (t,), backend = run({"Initial [3, 1]": [call, "\\boxed{[1, 3]}"]}, [task])
    first = json.loads(backend.calls[0][0])
    assert first["tools"] == ["append", "insert", "remove", "reverse"]
    assert P.LIST_FORMAT_CONTRACT in first["messages"][0]["content"]
    assert t.correct and t.calls[0].result["data"]["current_list"] == [1, 3]


def test_native_format_feeds_tool_role():
    (t,), _ = run({"20+1": [CALL % "20+1", "\\boxed{21}"]}, [calc_task(1, "20+1", "21")], call_format="native")
    assert t.messages[-2]["role"] == "tool" and t.correct


def test_auto_call_format_is_the_prompts_rule(monkeypatch):
    assert P.auto_call_format("meta-llama/Llama-3.1-8B-Instruct") == "native"
    assert P.auto_call_format("HuggingFaceTB/SmolLM2-135M-Instruct") == "xml"
    asked = []
    monkeypatch.setattr(P, "auto_call_format", lambda model_id: asked.append(model_id) or "native")
    assert Agent(ScriptedBackend({}), AgentConfig(call_format="auto")).call_format == "native"
    assert Agent(ScriptedBackend({}), AgentConfig(call_format="xml")).call_format == "xml"
    assert asked == ["scripted"]


def test_bad_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown prompt mode"):
        AgentConfig(mode="sometimes")
