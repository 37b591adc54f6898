"""The OpenAI-messages converter: the loop's state from chat messages, and a clear error for bad input."""
from __future__ import annotations

import json

import pytest

from data_builders.agent import prompts as P
from data_builders.agent.openai_messages import (answer_episode, assistant_text, call_format_of, episode_from_openai,
                              split_user_prompt, to_openai, call_episode)

TOOLS = [{"type": "function", "function": {"name": "evaluate_expression", "parameters": {}}}]


def call(expr, cid="c1"):
    return {"id": cid, "type": "function",
            "function": {"name": "evaluate_expression", "arguments": json.dumps({"expression": expr})}}


def episode(fmt="xml"):
    """A toolwise-prompted episode: system, user (with the response policy), a call, its result."""
    msgs = [{"role": "system", "content": P.system_prompt(fmt)},
            {"role": "user", "content": P.user_prompt("What is 6*7?", "sparse", True)},
            {"role": "assistant", "content": "A tool helps.", "tool_calls": [call("6*7")],
             "usage": {"prompt_tokens": 100, "completion_tokens": 20}, "logprobs": [-0.123456, -1.0]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"success": True, "result": 42})}]
    return msgs


def test_the_loops_state_is_rebuilt_from_messages():
    conv = episode_from_openai(episode(), TOOLS, task={"difficulty": "easy", "category": "A"})
    v = conv.view
    assert v.task.instruction == "What is 6*7?" and v.mode == "sparse" and conv.reasoning
    assert (v.task.difficulty, v.task.category, v.round) == ("easy", "A", 1)
    assert v.messages[2] == {"role": "assistant", "content": "A tool helps.\n" + P.tool_call_text(
        "evaluate_expression", {"expression": "6*7"}, "xml")}
    assert v.messages[3] == P.tool_response_message(json.dumps({"success": True, "result": 42}), "xml")
    (c,) = v.calls
    assert (c.round, c.name, c.args, c.status, c.result, c.ok) == (0, "evaluate_expression", {"expression": "6*7"},
                                                                   "executed", {"success": True, "result": 42}, True)
    (t,) = v.turns
    assert (t.kind, t.prefill_tokens, t.context_len, t.decode_tokens, t.new_tokens) == ("call", 100, 100, 20, 100)
    assert t.logprobs == [-0.1235, -1.0]       # stored at 4 decimals, as the loop stores them


def test_native_format_writes_calls_and_results_as_the_llama_policy_does():
    v = episode_from_openai(episode("native"), TOOLS, call_format="native").view
    # a native call turn is the JSON alone (the loop reads no text before it as a call)
    assert v.messages[2]["content"] == json.dumps({"name": "evaluate_expression", "parameters": {"expression": "6*7"}})
    assert v.turns[0].kind == "call"
    assert v.messages[3] == {"role": "tool", "content": json.dumps({"success": True, "result": 42})}
    assert call_format_of("meta-llama/Llama-3.1-8B@abc") == "native"
    assert call_format_of("HuggingFaceTB/SmolLM2-135M-Instruct@cf3+adapter:0123456789abcdef") == "xml"


def test_call_format_of_asks_the_loops_rule(monkeypatch):
    asked = []
    monkeypatch.setattr(P, "auto_call_format", lambda model_id: asked.append(model_id) or "native")
    assert call_format_of("some/model@abc") == "native" and asked == ["some/model"]


def test_raw_text_that_already_holds_the_call_is_kept_verbatim():
    raw = 'Sure.<tool_call>{"name":"evaluate_expression","arguments":{"expression":"1+1"}}</tool_call>'
    from data_builders.agent.parsing import parse_tool_call
    assert assistant_text(raw, parse_tool_call(raw), "xml") == raw


def test_skipped_noop_and_rejected_calls_are_told_apart():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("1", "a")]},
            {"role": "tool", "tool_call_id": "a", "content": json.dumps(P.SKIPPED_CALL_RESULT)},
            {"role": "assistant", "content": None, "tool_calls": [call("2", "b")]},
            {"role": "tool", "tool_call_id": "b", "content": json.dumps(P.NOOP_CALL_RESULT)},
            {"role": "assistant", "content": None, "tool_calls": [call("3", "c")]},
            {"role": "user", "content": P.TOOL_BUDGET_USED},
            {"role": "assistant", "content": "thinking"},
            {"role": "user", "content": "go on"}]
    v = episode_from_openai(msgs, TOOLS).view
    assert [c.status for c in v.calls] == ["skipped", "noop", "rejected"]
    assert v.calls[2].reason == "max_tool_calls"
    assert [t.kind for t in v.turns] == ["call", "call", "call", "content"]
    assert v.mode == "default" and v.task.instruction == "q"


def test_parallel_calls_of_an_agent_are_calls_of_one_round():
    msgs = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call("1", "a"), call("2", "b")]},
            {"role": "tool", "tool_call_id": "b", "content": json.dumps({"success": True, "result": 2})},
            {"role": "tool", "tool_call_id": "a", "content": json.dumps({"success": True, "result": 1})}]
    v = episode_from_openai(msgs, TOOLS).view
    assert v.messages[0] == {"role": "system", "content": "be brief"}
    assert [(c.round, c.args["expression"], c.result["result"]) for c in v.calls] == [(0, "1", 1), (0, "2", 2)]
    assert [t.kind for t in v.turns] == ["call"]


def test_plain_text_tool_results_become_a_result_payload():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call("1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "forty-two"}]
    assert episode_from_openai(msgs, TOOLS).view.calls[0].result == {"result": "forty-two"}


def test_pending_call_view_is_taken_before_the_proposing_message():
    msgs = episode()
    view, parsed = call_episode(msgs, TOOLS, call("42+0", "c2"))
    assert len(view.messages) == len(msgs) and view.round == 1 and len(view.turns) == 2
    assert [c.args["expression"] for c in view.calls] == ["6*7"] and parsed.arguments == {"expression": "42+0"}
    # the same question with the proposing message already in the history
    proposing = {"role": "assistant", "content": None, "tool_calls": [call("42+0", "c2")]}
    again, _ = call_episode(msgs + [proposing], TOOLS, call("42+0", "c2"))
    assert again.messages == view.messages and again.round == view.round


def test_answer_view_holds_the_answer_turn_but_not_its_message():
    view, text = answer_episode(episode(), TOOLS, "\\boxed{42}", [-0.5, -0.25],
                                usage={"prompt_tokens": 140, "completion_tokens": 2}, finish_reason="stop")
    assert text == "\\boxed{42}" and view.round == 1 and len(view.messages) == 4
    t = view.turns[-1]
    assert (t.kind, t.prefill_tokens, t.new_tokens, t.decode_tokens) == ("answer", 140, 20, 2)


def test_a_plain_answer_is_an_answer_turn_like_a_boxed_one():
    """A client that does not use the boxed protocol answers in plain text: G-STEP is asked about that text, in the
    same state as about a boxed answer (the turn is the answer, not a format error)."""
    args = dict(usage={"prompt_tokens": 140, "completion_tokens": 2}, finish_reason="stop")
    plain, text = answer_episode(episode(), TOOLS, "It is 42.", [-0.5, -0.25], **args)
    boxed, _ = answer_episode(episode(), TOOLS, "\\boxed{42}", [-0.5, -0.25], **args)
    assert text == "It is 42." and plain.turns[-1].kind == "answer"
    assert plain.messages == boxed.messages and plain.round == boxed.round and plain.calls == boxed.calls
    assert [t.kind for t in plain.turns] == [t.kind for t in boxed.turns] == ["call", "answer"]


def test_to_openai_round_trips_a_loop_episode():
    from data_builders.agent.trajectory import Turn
    loop_msgs = [{"role": "system", "content": P.system_prompt("xml")},
                 {"role": "user", "content": P.user_prompt("What is 6*7?", "default", False)},
                 {"role": "assistant", "content": P.tool_call_text("evaluate_expression", {"expression": "6*7"},
                                                                   "xml")},
                 P.tool_response_message(json.dumps({"success": True, "result": 42}), "xml")]
    turns = [Turn(round=0, text=loop_msgs[2]["content"], prefill_tokens=50, context_len=50, decode_tokens=9,
                  logprobs=[-0.1] * 9, finish_reason="stop", kind="call")]
    oa = to_openai(loop_msgs, turns)
    assert oa[3] == {"role": "tool", "tool_call_id": "call_0", "content": json.dumps({"success": True, "result": 42})}
    v = episode_from_openai(oa, TOOLS).view
    assert v.messages == loop_msgs and v.turns[0].decode_tokens == 9


def test_user_prompt_split_recovers_instruction_mode_and_reasoning():
    for mode in P.ALL_MODES:
        for reasoning in (False, True):
            instruction, m, r = split_user_prompt(P.user_prompt("Compute 2+2.", mode, reasoning))
            assert instruction == "Compute 2+2." and r == (reasoning and mode != P.COT_MODE)
            assert m == ("no_tool" if mode == "hard_no_tool" else mode)
    assert split_user_prompt("just a question") == ("just a question", None, False)


# ---------------------------------------------------------------- bad input: a ValueError naming index and field
BAD = [
    ("not a list", "messages: expected a non-empty list"),
    ([], "messages: expected a non-empty list"),
    (["hello"], r"messages\[0\]: expected an object"),
    ([{"role": "robot", "content": "x"}], r"messages\[0\]\.role"),
    ([{"role": "user", "content": 5}], r"messages\[0\]\.content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], r"messages\[0\]\.content\[0\]"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None}], r"messages\[1\]\.content"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None, "tool_calls": {}}],
     r"messages\[1\]\.tool_calls"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call("1", "a"), call("2", "a")]}],
     r"messages\[1\]\.tool_calls: several calls need distinct ids"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call("1", "a"), "oops"]}],
     r"messages\[1\]\.tool_calls\[1\]: expected a tool call object"),
    ([{"role": "user", "content": "q"},
      {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}],
     r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: not valid JSON"),
    ([{"role": "user", "content": "q"},
      {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "[1]"}}]}],
     r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: expected a JSON object"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]}],
     r"messages\[1\]\.tool_calls\[0\]\.function\.name"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [{"type": "code", "function": {}}]}],
     r"messages\[1\]\.tool_calls\[0\]\.type"),
    ([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "zz", "content": "{}"}],
     r"messages\[1\]\.tool_call_id: 'zz' answers no pending call"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call("1", "a")]},
      {"role": "assistant", "content": "more"}], r"messages\[2\]: assistant message before the tool result"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call("1", "a")]}],
     r"call\(s\) \['a'\] have no tool message"),
    ([{"role": "system", "content": "s"}], "no user message"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "x", "usage": {"prompt_tokens": -1}}],
     r"messages\[1\]\.usage\.prompt_tokens: expected an integer >= 0"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "x", "logprobs": [-0.1, "a"]}],
     r"messages\[1\]\.logprobs\[1\]"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "x", "prefill": "y"}],
     r"messages\[1\]\.prefill"),
]


@pytest.mark.parametrize("messages, error", BAD)
def test_bad_messages_are_refused_naming_index_and_field(messages, error):
    with pytest.raises(ValueError, match=error):
        episode_from_openai(messages, TOOLS)


def test_bad_tools_call_answer_and_task_are_refused():
    with pytest.raises(ValueError, match=r"tools\[0\]"):
        episode_from_openai(episode(), [{"name": "f"}])
    with pytest.raises(ValueError, match="call: expected an OpenAI tool call"):
        call_episode(episode(), TOOLS, "evaluate_expression(1)")
    with pytest.raises(ValueError, match="answer.usage.prompt_tokens: G-STEP reads each turn's token counts"):
        answer_episode([{"role": "user", "content": "q"}], TOOLS, "\\boxed{1}", None)
    with pytest.raises(ValueError, match="answer: this text is a tool call"):
        answer_episode([{"role": "user", "content": "q"}], TOOLS,
                       '<tool_call>\n{"name": "evaluate_expression", "arguments": {}}\n</tool_call>', [-0.1],
                       usage={"prompt_tokens": 3, "completion_tokens": 1})
    with pytest.raises(ValueError, match="answer: empty"):
        answer_episode([{"role": "user", "content": "q"}], TOOLS, "  ", [-0.1],
                       usage={"prompt_tokens": 3, "completion_tokens": 1})
    with pytest.raises(ValueError, match=r"task: unknown field\(s\) \['gold'\]"):
        episode_from_openai(episode(), TOOLS, task={"gold": "42"})
    with pytest.raises(ValueError, match="unknown prompt mode"):
        episode_from_openai(episode(), TOOLS, mode="sometimes")
    # earlier turns without counts are fine for ToolGate, refused for G-STEP, naming the message
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "hmm"},
            {"role": "user", "content": "go"}]
    call_episode(msgs, TOOLS, call("1"))
    with pytest.raises(ValueError, match=r"messages\[1\]\.usage\.prompt_tokens"):
        answer_episode(msgs, TOOLS, "\\boxed{1}", [-0.1], usage={"prompt_tokens": 3, "completion_tokens": 1})
