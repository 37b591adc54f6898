"""``upstream=local``: the endpoint with toolwise's backend in-process, Probe&Prefill on a conversation's first turn.

The tiny random Llama is the policy: its greedy text is gibberish but deterministic, so the endpoint's first turn
can be compared token for token with toolwise's own agent loop on the same task and probe."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import recipes  # noqa: E402
from data_builders.agent import prompts as P  # noqa: E402
from controllers import LinearProbe, make_contract  # noqa: E402
from data_builders.agent.loop import Agent, AgentConfig  # noqa: E402
from data_builders.backends.base import Generation  # noqa: E402
from data_builders.backends.chat import ChatText  # noqa: E402
from data_builders.gates import gate_of_kind  # noqa: E402
from data_builders.protocol import CALL_PREFILL  # noqa: E402
from data_builders.tasks.schema import Task  # noqa: E402
from runtime.api import Gates  # noqa: E402
from data_builders.gates.probe_prefill import prefill_text  # noqa: E402
from runtime.controller_hooks import GateHook  # noqa: E402
from data_builders.agent.openai_messages import call_format_of, to_openai  # noqa: E402
from runtime.serve import create_app  # noqa: E402
from runtime.serve.__main__ import build  # noqa: E402
from runtime.serve.local import LocalUpstream  # noqa: E402
from runtime.serve.testing import ForcedGates, free_port, serve_in_thread, wait_healthy  # noqa: E402

MAX_TOKENS = 12
REPO = recipes.CONFIG_DIR.rsplit("/", 1)[0]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}]


def calc_task(tid: str, expr: str) -> Task:
    return Task.from_dict({
        "id": tid, "instruction": f"Answer with only the number: {expr}", "difficulty": "easy",
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression", "get_last_result",
                                                              "clear_last_result"], "parameters": {}}],
        "expected": {"answer": "0"}, "tags": ["calculator"]}, split="test")


@pytest.fixture(scope="module")
def probes(tiny_backend, tmp_path_factory):
    """Two exported probes on the tiny policy: one that always says "use", one that always says "skip"."""
    root = tmp_path_factory.mktemp("probes")
    shape = [tiny_backend.n_layers + 1, tiny_backend.config.hidden_size]
    out = {}
    for action, bias in (("use", 20.0), ("skip", -20.0)):
        probe = LinearProbe(contract=make_contract(gate_of_kind("probe").featurizer.id, tiny_backend.fingerprint, shape))
        with torch.no_grad():
            for p in probe.parameters():
                p.zero_()
            probe.linear.bias.fill_(bias)
        probe.save_pretrained(root / action)
        out[action] = str(root / action)
    return out


def local_client(backend, gates, *overrides, style="hard", on_error="open", **upstream):
    cfg = recipes.compose("serve", ["upstream=local", f"gates.prefill_style={style}",
                                    f"gates.on_error={on_error}", *overrides])
    upstream = LocalUpstream(backend, call_format=call_format_of(backend.fingerprint), max_tokens=MAX_TOKENS,
                             **upstream)
    return TestClient(create_app(cfg, gates, upstream))


def loop_first_turn(backend, task, probe_path, style):
    """The first assistant message toolwise's own loop writes on ``task`` with the probe, and the OpenAI messages
    and tools that lead to it."""
    gates = Gates.load(probe_prefill=probe_path)
    hook = GateHook("probe_prefill", gates.probe_prefill, None, {"style": style, "call_format": gates.call_format})
    agent = Agent(backend, AgentConfig(mode="default", max_rounds=1, max_new_tokens=MAX_TOKENS), hook)
    traj = agent.run([task])[0]
    tools = agent._start(task, -1).tools
    oa = to_openai(traj.messages, traj.turns, call_format=gates.call_format)
    first = next(i for i, m in enumerate(oa) if m["role"] == "assistant")
    return oa[:first], tools, oa[first]["content"], gates


@pytest.mark.parametrize("action,slice_tokens", [("use", 32), ("skip", 32), ("use", 5), ("skip", 3)])
def test_first_turn_equals_the_agent_loops_with_the_probes_prefill(tiny_backend, probes, action, slice_tokens):
    """Token for token, also when the generation is sliced (it resumes from its own tokens, never re-read text)."""
    task = calc_task("c1", "17*23")
    messages, tools, loop_text, gates = loop_first_turn(tiny_backend, task, probes[action], "hard")
    with local_client(tiny_backend, gates, slice_tokens=slice_tokens) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "messages": messages,
                                                       "tools": tools, "max_tokens": MAX_TOKENS})
    assert r.status_code == 200, r.text
    body = r.json()
    content = body["choices"][0]["message"]["content"]
    assert content.startswith(prefill_text(action, "hard", gates.call_format))
    assert content == loop_text                          # same prompt, same prefill, same greedy continuation
    [d] = body["toolwise"]["decisions"]
    assert d["gate"] == "probe_prefill" and d["action"] == d["applied"] == action and d["round"] == 0
    assert d["probability"] == pytest.approx(1.0 if action == "use" else 0.0, abs=1e-6)
    assert body["usage"]["completion_tokens"] <= MAX_TOKENS and body["usage"]["prompt_tokens"] > 0


def test_a_soft_prefill_steers_the_generation_but_is_never_in_the_reply(tiny_backend, probes):
    """The soft prefill is a sentence put before the policy's generation: the reply is what the policy wrote after
    it (the agent loop's text less the sentence), the decision record names the sentence."""
    task = calc_task("c2", "6*7")
    messages, tools, loop_text, gates = loop_first_turn(tiny_backend, task, probes["use"], "soft")
    sentence = prefill_text("use", "soft")
    assert loop_text.startswith(sentence)
    with local_client(tiny_backend, gates, style="soft") as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "messages": messages,
                                                       "tools": tools, "max_tokens": MAX_TOKENS})
    assert r.status_code == 200, r.text
    body = r.json()
    [d] = body["toolwise"]["decisions"]
    assert d["action"] == "use" and d["prefill"] == sentence
    content = body["choices"][0]["message"]["content"] or ""
    assert sentence.strip() not in content
    assert content == loop_text[len(sentence):]          # the same greedy continuation, without the sentence


def test_a_request_without_tools_makes_no_probe_decision(tiny_backend, probes):
    """With no tools offered there is no tool decision to make: no probe read, no prefill, nothing recorded."""
    gates = Gates.load(probe_prefill=probes["use"])
    with local_client(tiny_backend, gates, style="soft") as client:
        r = client.post("/v1/chat/completions", json={
            "model": tiny_backend.model_id, "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": "Say hello in French."}]})
        assert r.status_code == 200, r.text
        assert r.json()["toolwise"]["decisions"] == []
        content = r.json()["choices"][0]["message"]["content"] or ""
        assert not any(content.startswith(prefill_text(a, "soft")) for a in ("use", "skip"))
        assert 'toolwise_gate_decisions_total{action="use",gate="probe_prefill"}' not in client.get("/metrics").text


def test_later_turns_are_not_probed_and_metrics_count_the_probe(tiny_backend, probes):
    gates = Gates.load(probe_prefill=probes["skip"])
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    with local_client(tiny_backend, gates, style="soft") as client:
        first = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "messages": msgs,
                                                           "tools": TOOLS, "logprobs": True})
        assert first.status_code == 200, first.text
        turn = first.json()["choices"][0]
        [d] = first.json()["toolwise"]["decisions"]
        assert d["prefill"] == prefill_text("skip", "soft")
        lps = turn["logprobs"]["content"]
        assert len(lps) == first.json()["usage"]["completion_tokens"] and all(t["logprob"] <= 0 for t in lps)
        later = client.post("/v1/chat/completions", json={
            "model": tiny_backend.model_id, "tools": TOOLS,
            "messages": msgs + [{"role": "assistant", "content": turn["message"]["content"] or "4"},
                                {"role": "user", "content": "Are you sure?"}]})
        assert later.status_code == 200 and later.json()["toolwise"]["decisions"] == []
        metrics = client.get("/metrics").text
    assert 'toolwise_gate_decisions_total{action="skip",gate="probe_prefill"} 1.0' in metrics
    assert 'toolwise_gate_latency_seconds_count{gate="probe_prefill"} 1.0' in metrics


@pytest.mark.parametrize("on_error,prefix", [("open", ""), ("closed", "\\boxed{")])
def test_a_failing_probe_is_recorded_and_resolved_by_on_error(tiny_backend, probes, on_error, prefix):
    gates = Gates.load(probe_prefill=probes["use"])

    def broken(*a, **k):
        raise RuntimeError("probe exploded")

    gates.probe_first_prompt = broken
    with local_client(tiny_backend, gates, on_error=on_error) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "tools": TOOLS,
                                                       "messages": [{"role": "user", "content": "1+1?"}]})
        assert r.status_code == 200, r.text
        [d] = r.json()["toolwise"]["decisions"]
        assert d["action"] == "error" and "probe exploded" in d["error"]
        assert d["applied"] == ("none" if on_error == "open" else "skip")
        assert r.json()["choices"][0]["message"]["content"].startswith(prefix)
        assert 'toolwise_gate_errors_total{gate="probe_prefill"} 1.0' in client.get("/metrics").text


def test_an_unknown_prefill_style_fails_when_the_app_is_built(tiny_backend):
    """The response prefill is the gating layer's (``gates.prefill_style``): a style it cannot write is refused
    when the config is composed, and (a config edited afterwards) when the app is built, before any request, not
    on the first probed turn."""
    with pytest.raises(Exception, match="gates.prefill_style='loud': choose one of soft, hard"):
        recipes.compose("serve", ["upstream=local", "gates.prefill_style=loud"])
    cfg = recipes.compose("serve", ["upstream=local"])
    cfg.gates.prefill_style = "loud"
    upstream = LocalUpstream(tiny_backend, call_format=call_format_of(tiny_backend.fingerprint))
    with pytest.raises(ValueError, match="prefill style 'loud'"):
        create_app(cfg, None, upstream)


def test_bad_messages_get_a_400_naming_the_problem(tiny_backend):
    with local_client(tiny_backend, None) as client:
        r = client.post("/v1/chat/completions", json={
            "model": tiny_backend.model_id,
            "messages": [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "x", "content": "1"}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_messages"
        assert "answers no pending call" in r.json()["error"]["message"]
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "stop": 5,
                                                       "messages": [{"role": "user", "content": "q"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
        assert client.get("/v1/models").json()["data"][0]["id"] == tiny_backend.model_id


@pytest.mark.slow
def test_config_builds_a_local_upstream_and_refuses_a_probe_over_http(tiny_model_dir, probes):
    cfg = recipes.compose("serve", ["upstream=local", "model=hf", f"model.name={tiny_model_dir}",
                                    f"gates.probe_prefill={probes['use']}", "gates.strict=false"])
    gates, upstream, _ = build(cfg)
    assert isinstance(upstream, LocalUpstream) and gates.probe_prefill is not None
    assert upstream.base_url == f"local:{upstream.backend.fingerprint}"
    with pytest.raises(ValueError, match="needs upstream=local"):
        build(recipes.compose("serve", [f"gates.probe_prefill={probes['use']}"]))


# ------------------------------------------------------------------ the protocol in local mode (scripted turns)
class ScriptedPolicy(ChatText):
    """The tiny policy's tokenizer and chat template with scripted turns: ``generate`` returns the next text of
    ``texts`` (cut to the token budget) and records the prompt it was given."""

    def __init__(self, tiny, texts):
        self.tokenizer, self.model_id, self.fingerprint = tiny.tokenizer, tiny.model_id, tiny.fingerprint
        self.config = tiny.config
        self.texts, self.prompts, self.constraints = list(texts), [], []

    def generate(self, prompts, params, *, prefill_state=None, return_logprobs=False, cache_keys=None,
                 constraints=None):
        self.prompts.append(prompts[0])
        self.constraints.append(constraints)
        ids = self.tokenizer(self.texts.pop(0), add_special_tokens=False).input_ids
        cut = ids[:params.max_new_tokens]
        return [Generation(text=self.tokenizer.decode(cut), token_ids=cut, prompt_tokens=self.count_tokens(prompts[0]),
                           finish_reason="length" if len(cut) < len(ids) else "eos")]

    def release(self, keys):
        pass


def scripted_ask(tiny_backend, texts, gates=None, constrained_calls=None, **body):
    policy = ScriptedPolicy(tiny_backend, texts)
    gates = ForcedGates() if gates is None else gates
    with local_client(policy, gates, slice_tokens=10_000,      # one scripted text, one generate
                      constrained_calls=constrained_calls) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "tools": TOOLS,
                                                       "messages": [{"role": "user", "content": "What is 6*7?"}],
                                                       "max_tokens": 200, **body})
        metrics = client.get("/metrics").text
    return r, policy, gates, metrics


def test_a_local_call_comes_back_as_tool_calls_without_its_markup_in_the_content(tiny_backend):
    r, _, _, _ = scripted_ask(tiny_backend, ['Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": '
                                             '{"x": "6*7"}}\n</tool_call>'])
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me compute."
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"x": "6*7"}'}
    r, _, _, _ = scripted_ask(tiny_backend, ['<tool_call>\n{"name": "calculator", "arguments": {}}\n</tool_call>'])
    assert r.json()["choices"][0]["message"]["content"] is None          # nothing but the call


def test_a_malformed_call_alone_comes_back_as_text_never_as_nothing(tiny_backend):
    """A turn that is nothing but a malformed call: no call, and the reply is its text (recorded as malformed),
    since an empty reply with no call ends a client's agent with an empty output."""
    markup = '<tool_call>\n{"name": calculator, "arguments": {x: 1}}\n</tool_call>'
    r, _, gates, metrics = scripted_ask(tiny_backend, [markup])
    choice = r.json()["choices"][0]
    assert r.status_code == 200 and choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == markup
    assert r.json()["toolwise"]["malformed_calls"] == [{"round": 0, "text": markup}]
    assert gates.seen == []         # not an answer for G-STEP either


def test_a_malformed_local_call_is_recorded_not_returned_as_the_answer(tiny_backend):
    """An opened call nobody can parse is not a call (finish_reason stop, no tool_calls) and not an answer either:
    the reply is the text before it, the markup is in toolwise.malformed_calls (and counted), G-STEP is not asked."""
    r, _, gates, metrics = scripted_ask(tiny_backend, ['I will call it. <tool_call>\n{"name": calculator'])
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == "I will call it."
    assert body["toolwise"]["malformed_calls"] == [{"round": 0, "text": '<tool_call>\n{"name": calculator'}]
    assert "toolwise_malformed_calls_total 1.0" in metrics
    assert [s["gate"] for s in gates.seen] == [] and body["toolwise"]["decisions"] == []


def test_tool_choice_none_offers_no_tools_and_returns_no_call(tiny_backend):
    r, policy, _, _ = scripted_ask(tiny_backend, ['<tool_call>\n{"name": "calculator", "arguments": {}}\n</tool_call>'],
                                   tool_choice="none")
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] == "stop"
    assert "calculator" not in policy.prompts[0]                          # the policy was shown no tools
    auto = ScriptedPolicy(tiny_backend, ["x"])
    with local_client(auto, ForcedGates()) as client:
        client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "tools": TOOLS,
                                                  "messages": [{"role": "user", "content": "What is 6*7?"}]})
    assert "calculator" in auto.prompts[0]


#: (tool_choice, call format) -> (the opening forced on the policy, the rest it writes), without a grammar
OPENINGS = {("required", "xml"): ("<tool_call>\n", '{"name": "calculator", "arguments": {"x": "1"}}\n</tool_call>'),
            ("named", "xml"): ('<tool_call>\n{"name": "calculator", "arguments": ', '{"x": "1"}}\n</tool_call>'),
            ("required", "native"): ('{"name": "', 'calculator", "parameters": {"x": "1"}}'),
            ("named", "native"): ('{"name": "calculator", "parameters": ', '{"x": "1"}}')}
NAMED = {"type": "function", "function": {"name": "calculator"}}
TWO_TOOLS = [*TOOLS, {"type": "function", "function": {"name": "search", "description": "web search",
                                                         "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("choice", ["required", NAMED])
def test_tool_choice_required_or_named_opens_the_call_for_the_policy(tiny_backend, choice):
    """Without a grammar (upstream.constrained_calls=false, or no xgrammar) the call is opened as far as
    tool_choice decides it and the policy writes the rest."""
    kind = "required" if choice == "required" else "named"
    opening, rest = OPENINGS[kind, call_format_of(tiny_backend.fingerprint)]
    r, policy, _, _ = scripted_ask(tiny_backend, [rest], tool_choice=choice, constrained_calls=False)
    assert r.status_code == 200, r.text
    assert policy.prompts[0].endswith(opening) and policy.constraints == [None]
    message = r.json()["choices"][0]["message"]
    assert message["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"x": "1"}'}
    assert message["content"] is None


@pytest.mark.parametrize("choice,allowed", [("required", ["calculator", "search"]), (NAMED, ["calculator"])])
def test_a_forced_call_is_decoded_under_the_grammar_of_the_tools_it_allows(tiny_backend, choice, allowed):
    """With xgrammar, the forced call is opened and held to the allowed tools' grammar, in one generate call (a
    grammar's state does not survive a slice), and the forced call is not the ToolGate's to skip."""
    pytest.importorskip("xgrammar")
    fmt = call_format_of(tiny_backend.fingerprint)
    text = P.tool_call_text("calculator", {"x": "1"}, fmt)[len(CALL_PREFILL[fmt]):]
    gates = ForcedGates(tool_actions=["skip"])
    r, policy, _, _ = scripted_ask(tiny_backend, [text], gates=gates, tool_choice=choice, tools=TWO_TOOLS)
    assert r.status_code == 200, r.text
    assert policy.prompts[0].endswith(CALL_PREFILL[fmt])
    [[constraint]] = policy.constraints
    assert [t["name"] for t in constraint.tools] == allowed and constraint.opened == CALL_PREFILL[fmt]
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert gates.seen == [] and r.json()["toolwise"]["decisions"] == []


def test_a_forced_call_on_the_real_policy_is_the_named_call_with_valid_arguments(tiny_backend):
    """The tiny random policy, which writes no call of its own: under the grammar its forced turn is a call to the
    named tool whose arguments parse against the tool's schema."""
    pytest.importorskip("xgrammar")
    with local_client(tiny_backend, None, max_context=1024) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "tools": TOOLS,
                                                       "tool_choice": NAMED, "max_tokens": 96,
                                                       "messages": [{"role": "user", "content": "What is 6*7?"}]})
    assert r.status_code == 200, r.text
    [call] = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "calculator"
    assert isinstance(json.loads(call["function"]["arguments"]), dict)


def test_a_forced_call_the_model_did_not_make_is_a_clear_error(tiny_backend):
    """No grammar and a policy that answers instead: a 502 that says what tool_choice demanded and what the model
    did, not an empty answer."""
    r, _, _, _ = scripted_ask(tiny_backend, ["I would rather not. \\boxed{42}"], tool_choice=NAMED,
                              constrained_calls=False)
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "tool_choice_not_followed" and error["param"] == "tool_choice"
    assert "a call to 'calculator'" in error["message"] and "made no call" in error["message"]


@pytest.mark.parametrize("choice,tools,says", [
    ({"type": "function", "function": {"name": "search"}}, TOOLS, "'search' is not among the request's tools"),
    ("required", None, "'required' needs tools"), ("sometimes", TOOLS, "tool_choice")])
def test_a_tool_choice_that_cannot_be_honoured_is_a_400(tiny_backend, choice, tools, says):
    with local_client(ScriptedPolicy(tiny_backend, []), None) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "tools": tools,
                                                       "tool_choice": choice,
                                                       "messages": [{"role": "user", "content": "q"}]})
    assert r.status_code == 400 and r.json()["error"]["param"].startswith("tool_choice")
    assert says in r.json()["error"]["message"]


# ------------------------------------------------------------------ no request can stall the local policy
class Counting:
    """The tiny policy, counting its ``generate`` calls (one per slice)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, *args, **kwargs):
        self.calls += 1
        return self.inner.generate(*args, **kwargs)


def local_app(backend, *overrides, **upstream):
    cfg = recipes.compose("serve", ["upstream=local", *overrides])
    return create_app(cfg, None, LocalUpstream(backend, call_format=call_format_of(backend.fingerprint), **upstream))


def test_slicing_changes_no_token_nor_log_prob(tiny_backend):
    msgs = [{"role": "user", "content": "Count: 1, 2, 3 ... and say 日本語 🙂"}]
    out = {}
    for slice_tokens in (1000, 7, 1):
        with TestClient(local_app(tiny_backend, slice_tokens=slice_tokens)) as client:
            r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "messages": msgs,
                                                           "max_tokens": 40, "logprobs": True}).json()
        out[slice_tokens] = (r["choices"][0]["message"]["content"], r["usage"],
                             [t["logprob"] for t in r["choices"][0]["logprobs"]["content"]])
    assert out[1000][1]["completion_tokens"] == 40
    assert out[7][:2] == out[1][:2] == out[1000][:2]
    assert out[7][2] == pytest.approx(out[1000][2], abs=1e-4) and out[1][2] == pytest.approx(out[1000][2], abs=1e-4)


def test_a_chunked_prefill_changes_no_token_and_takes_turns_chunk_by_chunk(tiny_backend):
    """A prompt prefilled in chunks of 16 tokens generates what one forward pass over it generates (log-probs to
    rounding), in one backend call per chunk before the slices: each a point where a waiting request gets the
    policy, or a cancelled one stops."""
    msgs = [{"role": "user", "content": "Repeat after me: " + " ".join(f"w{i}" for i in range(60))}]
    out = {}
    for chunk in (0, 16):
        policy = Counting(tiny_backend)
        with TestClient(local_app(policy, prefill_chunk_tokens=chunk, slice_tokens=1000)) as client:
            r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "messages": msgs,
                                                           "max_tokens": 24, "logprobs": True}).json()
        out[chunk] = (r["choices"][0]["message"]["content"], r["usage"],
                      [t["logprob"] for t in r["choices"][0]["logprobs"]["content"]], policy.calls)
    prompt_tokens = out[0][1]["prompt_tokens"]
    assert prompt_tokens > 100 and out[16][:2] == out[0][:2]
    assert out[16][2] == pytest.approx(out[0][2], abs=1e-4)
    assert out[0][3] == 1 and out[16][3] == 1 + (prompt_tokens - 1) // 16     # the chunks, then one slice


def test_a_prompt_over_the_context_is_refused_before_any_generation(tiny_backend):
    policy = ScriptedPolicy(tiny_backend, ["never"])
    with TestClient(local_app(policy, max_context=64)) as client:
        for content in ("word " * 80, "x" * 900_000):       # the second is refused by its length, untokenized
            r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id,
                                                           "messages": [{"role": "user", "content": content}]})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "context_length_exceeded" and "holds 64" in r.json()["error"]["message"]
    assert policy.prompts == []


def test_max_tokens_past_the_context_is_capped_to_the_room_left(tiny_backend):
    with TestClient(local_app(tiny_backend, max_context=160)) as client:
        r = client.post("/v1/chat/completions", json={"model": tiny_backend.model_id, "max_tokens": 10**9,
                                                       "messages": [{"role": "user", "content": "Go on."}]})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert r.json()["choices"][0]["finish_reason"] == "length" and usage["total_tokens"] == 160


@pytest.mark.slow
def test_a_huge_generation_neither_stalls_a_good_request_nor_outlives_its_client(tiny_backend):
    """max_tokens=10**9 on a long prompt (capped to the 4,096-token context: ~13 s of the tiny policy here): a
    good request sent meanwhile is answered within 5 s (the two take turns slice by slice), and when the huge
    request's client gives up, its generation stops at the next slice."""
    policy = Counting(tiny_backend)
    app = local_app(policy)
    long_prompt = [{"role": "user", "content": "Tell me everything about numbers. " * 60}]
    outcome = {}

    def huge():
        try:
            httpx.post(f"{url}/v1/chat/completions", timeout=4.0, json={
                "model": tiny_backend.model_id, "messages": long_prompt, "max_tokens": 10**9})
            outcome["huge"] = "answered"
        except httpx.TimeoutException:
            outcome["huge"] = "gave up"     # the client closes its connection

    with serve_in_thread(app) as url:
        thread = threading.Thread(target=huge)
        thread.start()
        while policy.calls < 2:             # the huge generation is under way
            time.sleep(0.05)
        start = time.monotonic()
        r = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
            "model": tiny_backend.model_id, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})
        waited = time.monotonic() - start
        assert r.status_code == 200 and waited < 5.0, (r.status_code, waited)
        thread.join(timeout=30)
        assert outcome.get("huge") == "gave up"
        time.sleep(1.0)                     # the slice in progress when the client left
        stopped_at = policy.calls
        time.sleep(1.0)
        assert policy.calls == stopped_at, "the generation went on after its client left"
        assert stopped_at < 4096 // 32      # far from the ~126 slices the whole generation takes
        metrics = httpx.get(f"{url}/metrics").text
    assert 'toolwise_errors_total{code="client_closed",status="499"} 1.0' in metrics


@pytest.mark.slow
def test_sigterm_stops_the_server_promptly_during_a_long_generation(tiny_model_dir, tmp_path):
    """uvicorn waits for requests in flight on SIGTERM, by default without end: a long generation kept the server
    up past 30 s. The requests it then cancels get OpenAI's error shape (503 server_shutting_down), not uvicorn's
    plain-text 500 and a logged traceback."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "runtime.serve", "upstream=local", "model=hf",
                               f"model.name={tiny_model_dir}", f"port={port}", f"hydra.run.dir={tmp_path}"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    answers: list[httpx.Response] = []
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(server, url)

        def ask(stream: bool) -> None:
            answers.append(httpx.post(f"{url}/v1/chat/completions", timeout=90, json={
                "model": str(tiny_model_dir), "max_tokens": 4050, "stream": stream,
                "messages": [{"role": "user", "content": "Go."}]}))

        asking = [threading.Thread(target=ask, args=(stream,), daemon=True) for stream in (False, False, True)]
        for thread in asking:               # three long generations queued for the one policy
            thread.start()
        time.sleep(1.5)                     # generating
        start = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        # limits.shutdown_timeout_s (5 s) for the requests in flight, then they are cancelled at their next slice;
        # the three generations would take over 20 s more
        assert time.monotonic() - start < 9.0
        for thread in asking:
            thread.join(timeout=10)
        log = server.stdout.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    # each one, the streamed one too (upstream=local sends a turn once it is generated: nothing had gone out)
    assert len(answers) == 3
    for r in answers:
        assert r.status_code == 503 and r.headers["content-type"] == "application/json", r.text
        assert r.json()["error"]["code"] == "server_shutting_down" and r.json()["error"]["type"] == "server_error"
    assert "Exception in ASGI application" not in log and "Traceback" not in log, log[-3000:]


# ------------------------------------------------------------------------------------- any valid body: never a 500
_FLOATS = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, 1e-300, 5e-324, -0.0, 2, 2.000001, 1e308]))
_INTS = st.one_of(st.none(), st.integers(-3, 9), st.integers(2**31 - 2, 2**70), st.integers(-(2**70), -(2**31)))
OPTIONAL_FIELDS = {
    "tools": st.just(TOOLS), "temperature": _FLOATS, "top_p": _FLOATS, "presence_penalty": _FLOATS,
    "frequency_penalty": _FLOATS, "seed": _INTS, "max_tokens": _INTS, "max_completion_tokens": _INTS, "n": _INTS,
    "top_logprobs": _INTS, "logprobs": st.one_of(st.none(), st.booleans()), "stream": st.booleans(),
    "stop": st.one_of(st.none(), st.text(max_size=4), st.lists(st.text(max_size=3), max_size=4), st.integers()),
    "tool_choice": st.sampled_from([None, "none", "auto", "required", "any",
                                    {"type": "function", "function": {"name": "calculator"}},
                                    {"type": "function", "function": {"name": "absent"}}]),
}


def test_no_valid_json_body_gets_a_500_from_the_local_policy(tiny_backend):
    """Sampling parameters at the edges of their ranges and beyond (a temperature of 1e-300, a seed of 2**70, a
    max_tokens past any context, a stop that is not a string): each is answered, or refused with a 4xx that names
    the field, never a 500 from the engine. The context is kept short so a budget past it costs little."""
    client = local_client(tiny_backend, None, max_context=320)
    model = tiny_backend.model_id
    bodies = st.fixed_dictionaries({"model": st.just(model),
                                    "messages": st.just([{"role": "user", "content": "What is 6*7?"}])},
                                   optional=OPTIONAL_FIELDS)
    answered = []

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
              derandomize=True)
    @given(body=bodies)
    def check(body):
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code < 500, (body, r.status_code, r.text[:500])
        answered.append(r.status_code == 200)
        if body.get("stream") and r.status_code == 200:
            assert "Internal Server Error" not in r.text and '"type": "server_error"' not in r.text, (body, r.text)

    with client:
        check()
        assert sum(answered) >= 10, f"{sum(answered)} of {len(answered)} bodies reached the policy"
        for temperature in (1e-300, 5e-324):     # the two the review hit: greedy, as OpenAI and vLLM answer
            r = client.post("/v1/chat/completions", json={"model": model, "temperature": temperature,
                                                          "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200, r.text
        r = client.post("/v1/chat/completions", json={"model": model, "seed": 10**30,
                                                      "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 400 and "seed" in r.text, r.text
