"""The factorized framework's agent interventions (the tool-use-tax paper, arXiv 2605.00136): prompt mode ``cot``, ``tool_access``
(real | noop | hidden), ``max_tool_calls`` and ``reasoning_check``, on the scripted backend of test_loop."""
from __future__ import annotations

import json

import pytest

from data_builders.agent import prompts as P
from data_builders.agent.loop import Agent, AgentConfig
from tests.doubles import CALL, SkipHooks, calc_task, run

CALC_TOOLS = ["clear_last_result", "evaluate_expression", "get_last_result"]


def first_prompt(backend) -> dict:
    return json.loads(backend.calls[0][0])


def test_defaults_change_nothing():
    cfg = AgentConfig()
    assert (cfg.tool_access, cfg.max_tool_calls, cfg.reasoning_check) == ("real", None, True)
    (t,), backend = run({"20+20": [CALL % "20+20", "\\boxed{40}"]}, [calc_task(1, "20+20", "40")], mode="force")
    assert not {"tool_access", "max_tool_calls", "reasoning_check"} & set(t.to_dict())   # records keep their keys
    assert first_prompt(backend)["tools"] == CALC_TOOLS and t.calls[0].status == "executed"
    # the G-STEP mode one-hot is over MODES, which cot does not join
    assert "cot" not in P.MODES and P.ALL_MODES == P.MODES + ("cot",)
    assert P.continue_prompt("default", False) == P.continue_prompt("default", False, True)


def test_hidden_keeps_the_tool_prompt_but_renders_no_schema_and_rejects_calls():
    (t,), backend = run({"3+3": [CALL % "3+3", "\\boxed{6}"]}, [calc_task(1, "3+3", "6")], mode="force",
                        tool_access="hidden")
    first = first_prompt(backend)
    assert first["tools"] == []
    assert first["messages"][0]["content"] == P.system_prompt("xml")            # <tool_call> format text kept
    assert first["messages"][1]["content"] == P.user_prompt(calc_task(1, "3+3", "6").instruction, "force", False)
    assert t.tool_calls == 0 and t.rejected_calls == 1 and t.format_errors == 0 and t.correct
    assert [c.to_dict() for c in t.calls] == [{"round": 0, "name": "evaluate_expression",
                                               "args": {"expression": "3+3"}, "status": "rejected",
                                               "reason": "tools_hidden"}]
    assert t.messages[3] == {"role": "user", "content": P.TOOLS_UNAVAILABLE}
    assert t.tool_access == "hidden"


def test_noop_runs_the_protocol_but_computes_nothing():
    (t,), backend = run({"6*7": [CALL % "6*7", "\\boxed{42}"]}, [calc_task(1, "6*7", "42")], mode="force",
                        tool_access="noop")
    assert first_prompt(backend)["tools"] == CALC_TOOLS
    assert t.tool_calls == 1 and t.rejected_calls == 0 and t.correct
    call = t.calls[0]
    assert call.status == "noop" and call.result == P.NOOP_CALL_RESULT and call.ok and call.error_kind is None
    assert json.loads(t.messages[3]["content"].split("\n")[1]) == P.NOOP_CALL_RESULT
    assert P.NOOP_CALL_RESULT["result"] is None and "42" not in t.messages[3]["content"]
    assert [d.hook for d in t.decisions] == ["pre_generation", "pre_call", "on_answer"]   # pre_call was asked
    assert t.tool_access == "noop"


def test_noop_still_honours_a_skip_decision():
    (t,), _ = run({"8+8": [CALL % "8+8", "\\boxed{16}"]}, [calc_task(1, "8+8", "16")], SkipHooks(), tool_access="noop")
    assert t.calls[0].status == "skipped" and t.skipped_calls == 1 and t.tool_calls == 0


def test_max_tool_calls_rejects_calls_past_the_budget():
    script = [CALL % "2+2", CALL % "4+4", "\\boxed{8}"]
    (t,), _ = run({"2+2": script}, [calc_task(1, "2+2", "8")], max_tool_calls=1, max_rounds=5)
    assert t.tool_calls == 1 and t.rejected_calls == 1 and t.correct
    assert [c.status for c in t.calls] == ["executed", "rejected"]
    assert t.calls[1].reason == "max_tool_calls"
    assert t.messages[5] == {"role": "user", "content": P.TOOL_BUDGET_USED}
    assert P.TOOL_BUDGET_USED.startswith("Tool budget used up. Answer directly")
    assert t.max_tool_calls == 1
    (t0,), _ = run({"2+2": script}, [calc_task(1, "2+2", "8")], max_tool_calls=0, max_rounds=5)
    assert t0.tool_calls == 0 and t0.rejected_calls == 2
    # no-op calls count against the budget too
    (tn,), _ = run({"2+2": script}, [calc_task(1, "2+2", "8")], max_tool_calls=1, tool_access="noop", max_rounds=5)
    assert [c.status for c in tn.calls] == ["noop", "rejected"]


def test_cot_mode_has_no_tool_wording_allows_reasoning_and_rejects_calls():
    task = calc_task(1, "9*9", "81")
    reasoned = "Nine times nine: 9*9 is 81, since 9*10 = 90 and 90 - 9 = 81. \\boxed{81}"
    (t,), backend = run({"9*9": [reasoned]}, [task], mode="cot")
    first = first_prompt(backend)
    assert first["tools"] == []
    assert first["messages"] == [{"role": "system", "content": P.COT_SYSTEM},
                                 {"role": "user", "content": f"{task.instruction}\n\n{P.COT_INSTRUCTION}"}]
    assert "tool" not in json.dumps(first["messages"]).lower()
    assert P.COT_INSTRUCTION == "Think step by step, then give the final answer in \\boxed{...}."
    assert t.correct and t.format_errors == 0 and t.mode == "cot"

    (t,), _ = run({"9*9": [CALL % "9*9", "let me think", reasoned]}, [task], mode="cot", max_rounds=5)
    assert t.tool_calls == 0 and t.rejected_calls == 1 and t.calls[0].reason == "cot" and t.correct
    assert t.messages[3]["content"] == P.TOOLS_UNAVAILABLE
    assert t.messages[5]["content"] == P.continue_prompt("cot", False) == f"Continue. {P.COT_INSTRUCTION}"


def test_reasoning_check_off_accepts_free_text_before_calls_and_answers():
    task = calc_task(1, "1+1", "2")
    script = ["I will compute this with the tool first. " + CALL % "1+1", "The tool says two, so \\boxed{2}"]
    (on,), _ = run({"1+1": script}, [task], max_rounds=4)
    assert on.rejected_calls == 1 and on.calls[0].reason == P.NO_REASONING_CALL
    (off,), _ = run({"1+1": script}, [task], reasoning_check=False)
    assert off.tool_calls == 1 and off.rejected_calls == 0 and off.format_errors == 0 and off.correct
    assert off.reasoning_check is False
    (t,), _ = run({"1+1": ["I think the answer is clearly two. \\boxed{2}"]}, [task], reasoning_check=False)
    assert t.format_errors == 0 and t.rounds == 1 and t.correct
    # the nudge after a turn with neither no longer demands "no reasoning text"
    (t,), _ = run({"1+1": ["hmm", "\\boxed{2}"]}, [task], reasoning_check=False)
    assert t.messages[3]["content"] == P.continue_prompt("default", False, False)
    assert "no reasoning" not in t.messages[3]["content"]


@pytest.mark.parametrize("bad", [{"tool_access": "sometimes"}, {"max_tool_calls": -1}, {"max_tool_calls": 1.5},
                                 {"mode": "chain"}])
def test_bad_settings_are_clear_errors(bad):
    with pytest.raises(ValueError, match=next(iter(bad)) if "mode" not in bad else "unknown prompt mode"):
        AgentConfig(**bad)


def test_hidden_and_cot_render_no_schema_with_a_real_chat_template(tiny_backend):
    task = calc_task(1, "2+3", "5")
    real = Agent(tiny_backend, AgentConfig(mode="force")).initial_prompt(task)
    hidden_agent = Agent(tiny_backend, AgentConfig(mode="force", tool_access="hidden"))
    hidden = hidden_agent.initial_prompt(task)
    noop = Agent(tiny_backend, AgentConfig(mode="force", tool_access="noop")).initial_prompt(task)
    cot = Agent(tiny_backend, AgentConfig(mode="cot")).initial_prompt(task)
    assert "evaluate_expression" in real
    assert real == noop
    assert "evaluate_expression" not in hidden
    assert P.system_prompt(hidden_agent.call_format) in hidden and "You must use a tool" in hidden
    assert "evaluate_expression" not in cot
    assert "tool" not in cot.lower() and P.COT_SYSTEM in cot
