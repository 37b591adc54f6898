"""The gated OpenAI-compatible endpoint (runtime/serve): gates steering an upstream's turns, the
official ``openai`` client driving an episode through it, and every bad request getting its documented status
while the server keeps serving. Upstream and gates are test doubles (serve/testing.py): no model, no network
beyond loopback."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402
from fastapi import Response  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import recipes  # noqa: E402
from data_builders.agent import prompts as P  # noqa: E402
from data_builders.environments.base import serialize  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.auth import check_bind, is_loopback, load_api_keys  # noqa: E402
from runtime.serve.testing import (ForcedGates, ScriptedUpstream, agent_reply, free_port,  # noqa: E402
                                   serve_in_thread)

REPO = recipes.CONFIG_DIR.rsplit("/", 1)[0]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
KEY = "sk-test-0123456789"


@pytest.fixture(autouse=True)
def _no_keys_from_the_environment(monkeypatch):
    monkeypatch.delenv("TOOLWISE_API_KEYS", raising=False)


def config(*overrides: str):
    return recipes.compose("serve", ["upstream.base_url=http://upstream.test/v1", *overrides])


def served(gates=None, *overrides: str, fake: ScriptedUpstream | None = None, transport=None):
    """A TestClient on the endpoint in front of ``fake`` (in process, through ASGITransport) or ``transport``."""
    fake = fake or ScriptedUpstream()
    cfg = config(*overrides)
    upstream = Upstream.from_config(cfg.upstream, transport=transport or httpx.ASGITransport(fake.app))
    app = create_app(cfg, gates, upstream)
    return TestClient(app), fake, app


def ask(client, messages=None, tools=TOOLS, **extra):
    body = {"model": "scripted", "messages": messages or [{"role": "user", "content": "What is 6*7?"}], **extra}
    if tools is not None:
        body["tools"] = tools
    return client.post("/v1/chat/completions", json=body)


def metric(client, name: str, **labels: str) -> float:
    """A sample of /metrics, read with prometheus_client's own parser."""
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise AssertionError(f"{name}{labels} not in /metrics")


# ---------------------------------------------------------------------------------------------- config
def test_config_composes_typed_with_the_documented_defaults():
    cfg = recipes.compose("serve")
    assert type(cfg).__name__ == "DictConfig" and cfg.gates.on_error == "open" and cfg.host == "127.0.0.1"
    with pytest.raises(Exception, match="port"):
        recipes.compose("serve", ["port=eighty"])
    with pytest.raises(Exception, match="gates.on_error='maybe': choose one of open, closed"):
        served(None, "gates.on_error=maybe")     # refused when the config is composed, before any app is built


# ---------------------------------------------------------------------------------------------- routes
def test_health_models_and_plain_proxy():
    client, fake, _ = served(None)
    with client:
        assert client.get("/health").json()["status"] == "ok"
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["scripted"]
        r = ask(client)
        assert r.status_code == 200
        body = r.json()
        assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
        assert body["toolwise"]["decisions"] == [] and body["toolwise"]["upstream_calls"] == 1
        assert len(fake.requests) == 1 and "logprobs" not in fake.requests[0]   # no G-STEP: none asked for


def test_execute_returns_the_call_to_the_client_with_the_decision():
    gates = ForcedGates(tool_actions=["execute"])
    client, fake, _ = served(gates)
    with client:
        body = ask(client).json()
    assert body["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0"
    (d,) = body["toolwise"]["decisions"]
    assert d["gate"] == "toolgate" and d["action"] == d["applied"] == "execute" and d["call_id"] == "call_0"
    assert d["probability"] == 0.1 and d["tau"] == 0.5 and d["latency_ms"] >= 0
    assert len(fake.requests) == 1
    # the gate saw the conversation before the proposed turn, and the call itself
    assert gates.seen[0]["messages"] == [{"role": "user", "content": "What is 6*7?"}]
    assert gates.seen[0]["call"]["function"]["name"] == "calculator" and gates.seen[0]["tools"] == TOOLS


def test_forced_skip_reasks_with_the_skipped_call_message():
    gates = ForcedGates(tool_actions=["skip"])
    client, fake, _ = served(gates)
    with client:
        body = ask(client).json()
        assert metric(client, "toolwise_skipped_calls_total") == 1
    assert len(fake.requests) == 2
    reasked = fake.requests[1]["messages"]
    assert reasked[-2]["tool_calls"][0]["id"] == "call_0"
    assert reasked[-1] == {"role": "tool", "tool_call_id": "call_0", "content": serialize(P.SKIPPED_CALL_RESULT)}
    # the re-asked turn (an answer, since the scripted policy saw a tool message) is what the client gets
    assert body["choices"][0]["message"]["content"].endswith("\\boxed{42}")
    assert body["toolwise"]["injected"] == reasked[1:]
    assert [(d["gate"], d["applied"]) for d in body["toolwise"]["decisions"]] == [("toolgate", "skip"),
                                                                                ("g_step", "commit")]
    assert body["toolwise"]["usage"]["prompt_tokens"] == 10 + 30     # both upstream calls counted


def test_reasks_are_bounded_then_the_turn_goes_back_as_it_is():
    always_call = lambda body: {"role": "assistant", "content": None, "tool_calls": [  # noqa: E731
        {"id": f"c{len(body['messages'])}", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}
    client, fake, _ = served(ForcedGates(default_tool="skip"), "gates.max_reasks=2",
                             fake=ScriptedUpstream(reply=always_call))
    with client:
        body = ask(client).json()
    assert len(fake.requests) == 3
    assert body["choices"][0]["message"]["tool_calls"]
    last = body["toolwise"]["decisions"][-1]
    assert last["action"] == "skip" and last["applied"] == "execute" and last["reason"] == "reask_limit"


def test_a_skipped_call_next_to_an_executed_one_is_dropped():
    two_calls = lambda body: {"role": "assistant", "content": None, "tool_calls": [  # noqa: E731
        {"id": f"c{i}", "type": "function", "function": {"name": "calculator", "arguments": "{}"}} for i in (1, 2)]}
    client, fake, _ = served(ForcedGates(tool_actions=["skip", "execute"]), fake=ScriptedUpstream(reply=two_calls))
    with client:
        body = ask(client).json()
    assert [c["id"] for c in body["choices"][0]["message"]["tool_calls"]] == ["c2"]
    assert len(fake.requests) == 1


def test_forced_continue_adds_one_verification_round():
    gates = ForcedGates(answer_actions=["continue"])
    client, fake, _ = served(gates, "gates.logprobs=true")
    with client:
        body = ask(client, tools=None).json()
        assert metric(client, "toolwise_continues_total") == 1
    assert len(fake.requests) == 2 and all(r["logprobs"] is True for r in fake.requests)
    assert fake.requests[1]["messages"][-1] == {"role": "user", "content": P.VERIFY_PROMPT}
    assert fake.requests[1]["messages"][-2] == {"role": "assistant", "content": "\\boxed{42}"}
    assert [d["applied"] for d in body["toolwise"]["decisions"]] == ["continue", "commit"]
    assert gates.seen[0]["logprobs"] == pytest.approx([-0.1])      # the answer's token log-probs reach G-STEP
    assert gates.seen[0]["usage"]["completion_tokens"] == 1 and gates.seen[0]["finish_reason"] == "stop"
    assert body["choices"][0]["logprobs"] is None                 # asked for the gate, not by the client


def test_verification_rounds_are_bounded_per_conversation():
    client, fake, _ = served(ForcedGates(default_answer="continue"), "gates.max_continues=1")
    with client:
        body = ask(client, tools=None).json()
        assert len(fake.requests) == 2
        assert body["toolwise"]["decisions"][-1]["reason"] == "continue_limit"
        # a verification prompt already in the client's history uses the round up
        history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "\\boxed{1}"},
                   {"role": "user", "content": P.VERIFY_PROMPT}]
        body = ask(client, messages=history, tools=None, logprobs=True).json()
    assert len(fake.requests) == 3 and body["toolwise"]["decisions"][0]["applied"] == "commit"
    assert body["choices"][0]["logprobs"]["content"]                  # the client asked: kept


def test_usage_counts_every_upstream_call_of_the_request():
    """A skip's re-ask and a verification round are upstream calls the request made: ``usage`` bills all of them."""
    client, fake, _ = served(ForcedGates(tool_actions=["skip"], answer_actions=["continue"]))
    with client:
        body = ask(client).json()
    assert body["toolwise"]["upstream_calls"] == len(fake.requests) == 3
    prompt = sum(10 * len(r["messages"]) for r in fake.requests)     # the scripted upstream's prompt count
    usage = body["usage"]
    assert usage["prompt_tokens"] == prompt and usage["completion_tokens"] >= 3
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage == {k: body["toolwise"]["usage"][k] for k in usage}


@pytest.mark.parametrize("gate,on_error,applied,upstream_calls", [
    # open lets the turn through as the policy wrote it (the call runs, the answer stands); closed takes the
    # cautious action (the call is skipped and the model re-asked; the answer is sent back for verification)
    ("toolgate", "open", "execute", 1), ("toolgate", "closed", "skip", 2),
    ("g_step", "open", "commit", 1), ("g_step", "closed", "continue", 2)])
def test_a_failing_gate_is_recorded_and_resolved_by_on_error(gate, on_error, applied, upstream_calls):
    forced = ForcedGates(tool_actions=["raise"]) if gate == "toolgate" else ForcedGates(answer_actions=["raise"])
    client, fake, _ = served(forced, f"gates.on_error={on_error}")
    with client:
        r = ask(client, tools=TOOLS if gate == "toolgate" else None)
        assert r.status_code == 200
        assert metric(client, "toolwise_gate_errors_total", gate=gate) == 1
    d = r.json()["toolwise"]["decisions"][0]
    assert d["gate"] == gate and d["action"] == "error" and d["applied"] == applied
    assert f"forced {gate} failure" in d["error"]
    assert len(fake.requests) == upstream_calls


@pytest.mark.parametrize("key,value", [("gates.on_error", "opne"), ("gates.prefill_style", "firm")])
def test_a_mistyped_gate_option_fails_when_the_config_is_composed(key, value):
    with pytest.raises(Exception, match=rf"{key}.*{value}|{value}.*{key}"):
        config(f"{key}={value}")


def test_metrics_count_requests_latencies_and_errors():
    client, _, _ = served(ForcedGates(tool_actions=["skip"]))
    with client:
        ask(client)
        ask(client, model="nope")
        assert metric(client, "toolwise_requests_total", route="/v1/chat/completions", status="200") == 1
        assert metric(client, "toolwise_errors_total", status="404", code="model_not_found") == 1
        assert metric(client, "toolwise_upstream_latency_seconds_count") == 2      # the skip's re-ask too
        assert metric(client, "toolwise_gate_latency_seconds_count", gate="toolgate") == 1
        assert metric(client, "toolwise_gate_decisions_total", gate="toolgate", action="skip") == 1
        assert metric(client, "toolwise_gate_decisions_total", gate="g_step", action="commit") == 1


@pytest.mark.slow
def test_the_committed_gates_decide_through_the_endpoint():
    """The real runtime API (runtime/api.py) behind the endpoint, with the reference ToolGate and
    G-STEP (MiniLM, the embedded policy's tokenizer): real decisions, no gate error."""
    from runtime.serve.__main__ import load_gates

    ref = recipes.compose("rollout").checkpoints
    cfg = config(f"gates.toolgate={ref.toolgate}", f"gates.g_step={ref.g_step}")
    client, fake, _ = served(load_gates(cfg.gates), f"gates.toolgate={ref.toolgate}", f"gates.g_step={ref.g_step}")
    with client:
        call = ask(client).json()["toolwise"]
        answer = ask(client, tools=None).json()["toolwise"]
    d = call["decisions"][0]
    assert d["gate"] == "toolgate" and d["action"] in ("execute", "skip") and 0 <= d["probability"] <= 1
    assert answer["decisions"][0]["gate"] == "g_step" and answer["decisions"][0]["action"] in ("commit", "continue")
    assert fake.requests[-1]["logprobs"] is True              # gates.g_step set: log-probs asked for


def test_gates_taus_set_each_gates_operating_point():
    from runtime.serve.__main__ import load_gates

    ref = recipes.compose("rollout").checkpoints
    gates = load_gates(config(f"gates.toolgate={ref.toolgate}", "gates.taus.toolgate=0.45").gates)
    assert gates.taus == {"toolgate": 0.45} and gates.toolgate.tau != 0.45
    assert load_gates(config(f"gates.toolgate={ref.toolgate}").gates).taus == {}     # unset: calibrated τ
    with pytest.raises(Exception, match="gates.taus.toolgate"):
        config(f"gates.toolgate={ref.toolgate}", "gates.taus.toolgate=1.5")


@pytest.mark.slow
@pytest.mark.parametrize("text", ["Bonjour !", "The answer is 42.", "\\boxed{42}"])
def test_the_committed_g_step_decides_on_plain_answers_too(text):
    """A client that does not use the boxed protocol gets a real G-STEP decision on the answer it receives, not a
    gate error (which on_error=closed turned into a verification round for every plain answer)."""
    from runtime.serve.__main__ import load_gates

    ref = recipes.compose("rollout").checkpoints
    overrides = (f"gates.g_step={ref.g_step}", "gates.on_error=closed", "gates.max_continues=0")
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": text})
    client, fake, _ = served(load_gates(config(*overrides).gates), *overrides, fake=fake)
    with client:
        body = ask(client, tools=None, messages=[{"role": "user", "content": "Say hello in French."}]).json()
        assert 'toolwise_gate_errors_total{gate="g_step"}' not in client.get("/metrics").text
    [d] = body["toolwise"]["decisions"]
    assert d["gate"] == "g_step" and d["action"] in ("commit", "continue") and 0 <= d["probability"] <= 1
    assert body["choices"][0]["message"]["content"] == text and body["toolwise"]["upstream_calls"] == 1


@pytest.mark.slow
def test_own_mcp_tools_are_gated_by_gates_fit_on_them_as_the_runtime_api_decides():
    """A team's own tools through the endpoint: the worked example's MCP server lists its tools (the client sends
    them as OpenAI tools), the upstream proposes calls to them, and the ToolGate and G-STEP fit on that server's
    points decide. Each decision is the runtime API's on the same messages (ToolGate's columns read the offered
    tool's own schema and description, which only the request's ``tools`` carries)."""
    from runtime.api import Gates
    from runtime.serve.__main__ import load_gates
    from tests.doubles import OWN_TOOL_CALLS, UNIT_TOOLS_GATES, own_tool_call, own_tools_reply, unit_tools_specs

    tools = unit_tools_specs()
    assert {t["function"]["name"] for t in tools} == {"convert_units", "lookup", "search"}
    overrides = [f"gates.{k}={v}" for k, v in UNIT_TOOLS_GATES.items()]
    direct = Gates.load(**UNIT_TOOLS_GATES)
    client, fake, _ = served(load_gates(config(*overrides).gates), *overrides, "gates.max_reasks=0",
                             "gates.max_continues=0", fake=ScriptedUpstream(reply=own_tools_reply))
    with client:
        for question in OWN_TOOL_CALLS:
            messages = [{"role": "user", "content": question}]
            body = ask(client, messages=messages, tools=tools).json()
            d = body["toolwise"]["decisions"][0]
            want = direct.tool_call(messages, tools, own_tool_call(question))
            assert (d["gate"], d["action"]) == ("toolgate", want.action)
            assert d["probability"] == pytest.approx(want.probability, abs=1e-6)
            # the probability moves with the question and the call: the gate reads them, not a constant
        probabilities = {round(direct.tool_call([{"role": "user", "content": q}], tools,
                                                own_tool_call(q)).probability, 6) for q in OWN_TOOL_CALLS}
        assert len(probabilities) == len(OWN_TOOL_CALLS)


# ---------------------------------------------------------------------------------------------- openai client
def test_openai_client_drives_a_multi_turn_tool_episode():
    openai = pytest.importorskip("openai")
    fake = ScriptedUpstream()
    # turn 1: the call runs (client side); turn 2: the answer gets one verification round, whose call runs too;
    # turn 3: the re-answer is committed
    gates = ForcedGates(tool_actions=["execute", "execute"], answer_actions=["continue", "commit"])
    with serve_in_thread(fake.app) as upstream_url:
        cfg = config(f"upstream.base_url={upstream_url}/v1", "gates.logprobs=true")
        app = create_app(cfg, gates, Upstream.from_config(cfg.upstream))
        with serve_in_thread(app) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused-on-loopback", max_retries=0)
            messages = [{"role": "user", "content": "What is 6*7?"}]
            finals = []
            for _ in range(4):
                out = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
                extra = out.model_extra["toolwise"]
                msg = out.choices[0].message
                messages += extra["injected"]            # what the server added before this turn
                messages.append(msg.model_dump(exclude_none=True))
                if not msg.tool_calls:
                    finals.append(msg.content)
                    break
                for call in msg.tool_calls:              # the client runs its own tools
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"result": 42})})
    assert finals and finals[0].endswith("\\boxed{42}")
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    assert messages[4]["content"] == P.VERIFY_PROMPT
    assert len(fake.requests) == 4                       # 3 client turns + 1 verification re-ask
    assert fake.requests[-1]["messages"] == messages[:-1]


# ---------------------------------------------------------------------------------------------- bad requests
GOOD = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}


def with_(**changes):
    return json.dumps({**GOOD, **changes})


def msg(**m):
    return with_(messages=[m])


BAD_BODIES = [  # (id, raw body, status, error code)
    ("malformed_json", '{"model": "scripted", "messages": [', 400, "invalid_json"),
    ("empty_body", "", 400, "invalid_json"),
    ("json_array", "[1, 2]", 400, "invalid_json"),
    ("json_string", '"hello"', 400, "invalid_json"),
    ("not_utf8", b'{"model": "\xff\xfe"}', 400, "invalid_json"),
    ("missing_model", json.dumps({"messages": GOOD["messages"]}), 400, "invalid_request"),
    ("missing_messages", json.dumps({"model": "scripted"}), 400, "invalid_request"),
    ("empty_messages", with_(messages=[]), 400, "invalid_request"),
    ("messages_not_a_list", with_(messages="hi"), 400, "invalid_request"),
    ("message_without_role", msg(content="hi"), 400, "invalid_request"),
    ("unknown_role", msg(role="wizard", content="hi"), 400, "invalid_request"),
    ("user_without_content", msg(role="user"), 400, "invalid_request"),
    ("tool_without_call_id", msg(role="tool", content="3"), 400, "invalid_request"),
    ("model_not_a_string", with_(model=7), 400, "invalid_request"),
    ("temperature_not_a_number", with_(temperature="hot"), 400, "invalid_request"),
    ("negative_temperature", with_(temperature=-1), 400, "invalid_request"),
    ("temperature_1e308", with_(temperature=1e308), 400, "invalid_request"),
    ("negative_top_p", with_(top_p=-5), 400, "invalid_request"),
    ("top_p_above_one", with_(top_p=1.5), 400, "invalid_request"),
    ("penalty_out_of_range", with_(presence_penalty=9), 400, "invalid_request"),
    ("seed_not_an_integer", with_(seed="lucky"), 400, "invalid_request"),
    ("nan_is_not_json", '{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
     400, "invalid_json"),
    ("nested_past_the_depth_limit", '{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "x": '
     + "[" * 100 + "]" * 100 + "}", 400, "invalid_json"),
    ("max_tokens_zero", with_(max_tokens=0), 400, "invalid_request"),
    ("tool_of_wrong_type", with_(tools=[{"type": "retrieval", "function": {"name": "x"}}]), 400, "invalid_request"),
    ("call_arguments_not_a_string", msg(role="assistant", tool_calls=[
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]), 400, "invalid_request"),
    ("n_above_one", with_(n=2), 400, "invalid_request"),
    ("stream_not_a_bool", with_(stream="yes please"), 400, "invalid_request"),
    ("too_many_messages", with_(messages=[{"role": "user", "content": "hi"}] * 9), 400, "too_many_messages"),
    ("unknown_model", with_(model="gpt-9"), 404, "model_not_found"),
    ("huge_body", with_(messages=[{"role": "user", "content": "x" * 5000}]), 413, "request_too_large"),
]


def assert_error(r, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and isinstance(err["message"], str) and err["message"] and err["type"]


def assert_still_serving(client, headers=None) -> None:
    r = client.post("/v1/chat/completions", json=GOOD, headers=headers)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "\\boxed{42}"


@pytest.fixture(scope="module")
def limited():
    client, _, _ = served(ForcedGates(), "limits.max_body_bytes=4096", "limits.max_messages=8")
    with client:
        yield client


@pytest.mark.parametrize("raw,status,code", [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
def test_bad_request_gets_its_status_and_the_server_keeps_serving(limited, raw, status, code):
    r = limited.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert_error(r, status, code)
    assert_still_serving(limited)


def test_chunked_body_over_the_limit_is_refused_while_read(limited):
    chunks = (b'{"model": "scripted", "messages": [{"role": "user", "content": "' + b"x" * 1024 for _ in range(8))
    assert_error(limited.post("/v1/chat/completions", content=chunks), 413, "request_too_large")
    assert_still_serving(limited)


def test_unknown_route_and_wrong_method_are_json_errors(limited):
    assert_error(limited.get("/v1/engines"), 404, "unknown_route")
    assert_error(limited.get("/v1/chat/completions"), 405, "method_not_allowed")
    assert_still_serving(limited)


@pytest.mark.parametrize("headers,code", [({}, "missing_api_key"), ({"Authorization": "Bearer sk-wrong"},
                                                                     "invalid_api_key"),
                                          ({"Authorization": f"Basic {KEY}"}, "missing_api_key")],
                         ids=["missing_key", "wrong_key", "wrong_scheme"])
def test_keys_are_required_when_set(monkeypatch, headers, code):
    monkeypatch.setenv("TOOLWISE_API_KEYS", f"sk-other, {KEY}")
    client, _, _ = served(None)
    with client:
        assert_error(client.post("/v1/chat/completions", json=GOOD, headers=headers), 401, code)
        assert_error(client.get("/metrics", headers=headers), 401, code)
        assert client.get("/health").status_code == 200                # probes need no key
        assert_still_serving(client, {"Authorization": f"Bearer {KEY}"})


def test_json_nested_100000_deep_is_a_400_not_a_500():
    """Deeper than Python's recursion limit: the decoder itself gives up (RecursionError), a 400 all the same."""
    client, _, _ = served(ForcedGates())
    deep = '{"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "x": ' + "[" * 100_000 \
        + "]" * 100_000 + "}"
    with client:
        assert_error(client.post("/v1/chat/completions", content=deep,
                                 headers={"content-type": "application/json"}), 400, "invalid_json")
        deep_object = '{"model": "scripted", "messages": [], "x": ' + '{"a":' * 100_000 + "1" + "}" * 100_001
        assert_error(client.post("/v1/chat/completions", content=deep_object), 400, "invalid_json")
        assert_still_serving(client)


def test_health_says_only_alive_without_a_key(monkeypatch):
    """A load balancer's probe needs no key and learns only that the server lives; what is served and from where
    (the upstream's URL; for upstream=local the policy's fingerprint and adapter path) needs a key."""
    monkeypatch.setenv("TOOLWISE_API_KEYS", KEY)
    client, _, _ = served(ForcedGates())
    with client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/health", headers={"Authorization": "Bearer sk-wrong"}).json() == {"status": "ok"}
        details = client.get("/health", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert details["status"] == "ok" and details["upstream"] == "http://upstream.test/v1"


@pytest.mark.parametrize("where", ["env", "file"])
def test_a_key_no_client_could_send_is_refused_at_start(monkeypatch, tmp_path, where):
    """A bearer key travels in an HTTP header (Latin-1): a non-ASCII one could never authenticate, so the server
    must not start with it (it would look up and refuse everyone)."""
    if where == "env":
        monkeypatch.setenv("TOOLWISE_API_KEYS", f"{KEY},sk-clé-secrète")
        overrides, says = (), "$TOOLWISE_API_KEYS, key 2"
    else:
        (tmp_path / "keys").write_text(f"{KEY}\nsk-ключ\n", encoding="utf-8")
        overrides, says = (f"auth.file={tmp_path / 'keys'}",), "line 2"
    with pytest.raises(ValueError, match="printable ASCII") as e:
        served(None, *overrides)
    assert says in str(e.value) and "clé" not in str(e.value) and "ключ" not in str(e.value)


def test_the_command_refuses_to_start_with_a_non_ascii_key(tmp_path):
    env = {**os.environ, "TOOLWISE_API_KEYS": "sk-clé"}
    r = subprocess.run([sys.executable, "-m", "runtime.serve", f"port={free_port()}", f"hydra.run.dir={tmp_path}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "refusing to start: $TOOLWISE_API_KEYS, key 1" in r.stderr


def test_decisions_also_come_as_response_headers():
    """A framework that drops unknown body fields (LangChain) keeps headers: the decisions and injected messages
    are in x-toolwise-* headers too, compact ASCII JSON."""
    from openai import OpenAI

    client, _, _ = served(ForcedGates(tool_actions=["skip"]))
    with client:
        r = ask(client)
    body = r.json()["toolwise"]
    decisions = json.loads(r.headers["x-toolwise-decisions"])
    assert [(d["gate"], d["applied"], d["p"], d["round"]) for d in decisions] == \
        [(d["gate"], d["applied"], d["probability"], d["round"]) for d in body["decisions"]]
    assert decisions[0]["call_id"] == "call_0"
    assert json.loads(r.headers["x-toolwise-injected"]) == body["injected"]
    assert r.headers["x-toolwise-injected-count"] == "2" and r.headers["x-toolwise-upstream-calls"] == "2"
    # the official client reads them through its raw response
    _, _, app = served(ForcedGates(tool_actions=["skip"]))
    with serve_in_thread(app) as url:
        oa = OpenAI(base_url=f"{url}/v1", api_key="sk-any", max_retries=0)
        raw = oa.chat.completions.with_raw_response.create(model="scripted", tools=TOOLS,
                                                            messages=[{"role": "user", "content": "What is 6*7?"}])
        assert json.loads(raw.headers["x-toolwise-decisions"])[0]["gate"] == "toolgate"
    # injected messages too long for a header are left out of it (the body keeps them), never a broken response
    long_answer = ScriptedUpstream(reply=lambda b: {"role": "assistant", "content": "\\boxed{" + "4" * 9000 + "}"})
    client, _, _ = served(ForcedGates(answer_actions=["continue"]), fake=long_answer)
    with client:
        r = ask(client, tools=None)
    assert r.status_code == 200 and "x-toolwise-injected" not in r.headers
    assert r.headers["x-toolwise-injected-count"] == "2" and len(r.json()["toolwise"]["injected"]) == 2


def slow_socket(url: str, first: bytes):
    import socket
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(first)
    return s


def closed_within(s, seconds: float) -> bytes:
    """What the server sent before closing ``s`` (within ``seconds``, else the test fails)."""
    import time
    s.settimeout(seconds)
    got, start = b"", time.monotonic()
    while True:
        chunk = s.recv(4096)        # raises socket.timeout if the server keeps the connection open
        if not chunk:
            return got
        got += chunk
        assert time.monotonic() - start < seconds


SLOW = ("limits.header_timeout_s=0.5", "limits.body_timeout_s=0.5")


def errors_metric(url: str, status: str, code: str) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            if sample.name == "toolwise_errors_total" and sample.labels == {"status": status, "code": code}:
                return sample.value
    return 0.0


def test_slow_bodies_get_408_and_their_connections_close():
    """A body that never completes must not hold a connection forever: read by the endpoint or not (a route that
    takes no body), it gets its response within ``limits.body_timeout_s`` and the connection closes; the server
    keeps serving."""
    _, _, app = served(ForcedGates(), *SLOW)
    body_start = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: 500\r\n\r\n{\"model\": ")
    unread = b"POST /v1/models HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{"
    chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
               b"5\r\n{\"mod\r\n")
    with serve_in_thread(app, limits=config(*SLOW).limits) as url:
        socks = [slow_socket(url, body_start) for _ in range(4)] + [slow_socket(url, chunked)] \
            + [slow_socket(url, unread) for _ in range(2)]
        replies = [closed_within(s, 5.0) for s in socks]
        for reply in replies[:5]:
            assert reply.startswith(b"HTTP/1.1 408") and b"connection: close" in reply, reply
            assert b'"request_timeout"' in reply and b"did not arrive within 0.5 s" in reply
        for reply in replies[5:]:
            assert reply.startswith(b"HTTP/1.1 405") and b"connection: close" in reply, reply
        assert httpx.post(f"{url}/v1/chat/completions", json=GOOD, timeout=10).status_code == 200
        assert errors_metric(url, "408", "request_timeout") == 5
        for s in socks:
            s.close()


def test_a_body_refused_unread_still_reaches_its_client_on_a_kept_alive_connection():
    """A 413 from Content-Length, or a route that takes no body: the rest of a body arriving in time is read and
    dropped before the response, so the client gets its response (closing on a client still sending would have
    its kernel reset the connection) and the connection serves the next request."""
    _, _, app = served(ForcedGates(), "limits.max_body_bytes=4096")
    big = b'{"model": "scripted", "messages": [{"role": "user", "content": "' + b"x" * 3_000_000 + b'"}]}'
    with serve_in_thread(app, limits=config("limits.max_body_bytes=4096").limits) as url:
        with httpx.Client(base_url=url, timeout=10) as client:
            r = client.post("/v1/chat/completions", content=big, headers={"content-type": "application/json"})
            assert_error(r, 413, "request_too_large")
            assert_error(client.post("/v1/models", content=big), 405, "method_not_allowed")
            assert "connection" not in r.headers
            assert client.post("/v1/chat/completions", json=GOOD).status_code == 200


def test_request_heads_are_bounded_in_size_and_a_connection_flood_gets_503():
    """A request head that grows past ``MAX_HEAD_BYTES`` while arriving is a 400 and a closed connection (h11's
    ``h11_max_incomplete_event_size``); past ``max_connections`` open connections a request gets uvicorn's 503
    (``limit_concurrency``), and the server serves again once they close."""
    import time

    from runtime.serve.server import MAX_HEAD_BYTES

    _, _, app = served(ForcedGates())
    with serve_in_thread(app, limits=config().limits, max_connections=4) as url:
        s = slow_socket(url, b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (MAX_HEAD_BYTES // 2))
        time.sleep(0.2)
        s.sendall(b"a" * MAX_HEAD_BYTES)
        assert closed_within(s, 5.0).startswith(b"HTTP/1.1 400")
        s.close()
        held = [slow_socket(url, b"") for _ in range(4)]
        time.sleep(0.2)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 503
        for s in held:
            s.close()
        deadline = time.monotonic() + 5
        while httpx.get(f"{url}/health", timeout=10).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_slow_request_heads_do_not_stall_the_server():
    """Heads trickled byte by byte and connections that send nothing: uvicorn has no deadline for them and no
    ASGI app runs before a head is complete, so bounding them is a reverse proxy's (docs/guide.md, "Gated endpoint
    behind a reverse proxy"). Meanwhile they must not stop the endpoint serving anyone else."""
    _, _, app = served(ForcedGates(), *SLOW)
    with serve_in_thread(app, limits=config(*SLOW).limits) as url:
        socks = [slow_socket(url, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n") for _ in range(8)]
        socks += [slow_socket(url, b"") for _ in range(8)]
        for i, s in enumerate(socks[:8]):
            s.sendall(b"x-%d: y\r\n" % i)
        r = httpx.post(f"{url}/v1/chat/completions", json=GOOD, timeout=10)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "\\boxed{42}"
        for s in socks:
            s.close()


@pytest.mark.slow
def test_a_client_that_leaves_a_non_streamed_request_ends_it_as_a_499():
    """The disconnect is awaited (ASGI ``http.disconnect``), not polled: the request ends as a counted 499 as soon
    as its client is gone, while the upstream would have taken seconds more."""
    import time

    fake = ScriptedUpstream(delay_s=5.0)
    with serve_in_thread(fake.app) as upstream_url:
        cfg = config(f"upstream.base_url={upstream_url}/v1", "upstream.models=[scripted]")
        app = create_app(cfg, ForcedGates(), Upstream.from_config(cfg.upstream))
        with serve_in_thread(app) as url:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{url}/v1/chat/completions", json=GOOD, timeout=0.5)
            left = time.monotonic()
            while errors_metric(url, "499", "client_closed") != 1:
                assert time.monotonic() - left < 2.0, "the request went on after its client left"
                time.sleep(0.02)


# uvicorn's internals that a release may change without notice: the endpoint uses uvicorn.Config's documented
# settings and the ASGI messages only (runtime/serve/server.py)
UVICORN_PRIVATE = ("HTTP_PROTOCOLS", "response_complete", "uvicorn.protocols", "H11Protocol", "HttpToolsProtocol",
                   "RequestResponseCycle", "uvicorn.config", "uvicorn.importer", "uvicorn.server")
UVICORN_PUBLIC = {"Config", "Server", "run", "main"}


def _source_files() -> list[str]:
    """Every Python file of the checkout but the tests (and outputs, builds, environments)."""
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "__pycache__", "outputs", "multirun",
                                                                         "wandb", "build", "dist", "node_modules")
                   and not d.endswith(".egg-info")]
        found += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return found


def test_no_source_file_reaches_into_uvicorn_internals():
    import ast

    files = _source_files()
    assert any(f.endswith(os.path.join("runtime", "serve", "server.py")) for f in files)
    offences = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        offences += [f"{path}: {name}" for name in UVICORN_PRIVATE if name in text]
        for node in ast.walk(ast.parse(text, path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("uvicorn"):
                names = {a.name for a in node.names}
                if node.module != "uvicorn" or not names <= UVICORN_PUBLIC:
                    offences.append(f"{path}:{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
            elif isinstance(node, ast.Import):
                offences += [f"{path}:{node.lineno}: import {a.name}" for a in node.names
                             if a.name.startswith("uvicorn.")]
            elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "uvicorn"
                  and node.attr not in UVICORN_PUBLIC):
                offences.append(f"{path}:{node.lineno}: uvicorn.{node.attr}")
    assert not offences, "uvicorn internals referenced:\n  " + "\n  ".join(offences)


def test_keys_from_a_file_and_the_bind_rule(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text(f"# ops keys\n{KEY}\n\n  # rotated in below\nsk-second#with-hash\n")
    cfg = config(f"auth.file={keys}")
    assert load_api_keys(cfg.auth) == {KEY, "sk-second#with-hash"}     # a '#' inside a key is the key's
    client, _, _ = served(None, f"auth.file={keys}")
    with client:
        assert client.get("/v1/models", headers={"Authorization": "Bearer sk-second#with-hash"}).status_code == 200
        assert client.get("/v1/models", headers={"Authorization": "Bearer sk-second"}).status_code == 401
    keys.write_text(f"{KEY}\nsk-second  # rotated in\n")     # a comment after a key once read as part of no key
    with pytest.raises(ValueError, match=r"auth.file=.*keys, line 2: an API key has no spaces"):
        load_api_keys(cfg.auth)
    with pytest.raises(FileNotFoundError, match="auth.file"):
        load_api_keys(config(f"auth.file={tmp_path / 'absent'}").auth)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")
    check_bind("127.0.0.1", frozenset(), "TOOLWISE_API_KEYS")
    check_bind("0.0.0.0", frozenset({KEY}), "TOOLWISE_API_KEYS")
    with pytest.raises(SystemExit, match="without an API key"):
        check_bind("0.0.0.0", frozenset(), "TOOLWISE_API_KEYS")


def test_the_command_refuses_to_start_on_a_public_address_without_a_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TOOLWISE_API_KEYS"}
    r = subprocess.run([sys.executable, "-m", "runtime.serve", "host=0.0.0.0", f"port={free_port()}",
                        f"hydra.run.dir={tmp_path}"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "refusing to serve on 0.0.0.0 without an API key" in r.stderr


# ---------------------------------------------------------------------------------------------- upstream failures
def mock(handler):
    return httpx.MockTransport(handler)


def raise_(exc):
    def handler(request):
        raise exc
    return handler


UPSTREAM_FAILURES = [  # (id, transport, status, code)
    ("garbage_text", mock(lambda r: httpx.Response(200, text="<html>oops</html>")), 502, "upstream_garbage"),
    ("json_list", mock(lambda r: httpx.Response(200, json=[1, 2])), 502, "upstream_garbage"),
    ("no_choices", mock(lambda r: httpx.Response(200, json={"id": "x", "choices": []})), 502, "upstream_garbage"),
    ("choice_without_message", mock(lambda r: httpx.Response(200, json={"choices": [{"index": 0}]})), 502,
     "upstream_garbage"),
    ("server_error", mock(lambda r: httpx.Response(500, json={"error": {"message": "CUDA OOM"}})), 502,
     "upstream_error"),
    ("upstream_auth", mock(lambda r: httpx.Response(401, json={"error": {"message": "bad key"}})), 502,
     "upstream_error"),
    ("context_too_long", mock(lambda r: httpx.Response(400, json={"error": {"message": "too long"}})), 400,
     "upstream_rejected"),
    ("read_timeout", mock(raise_(httpx.ReadTimeout("slow"))), 504, "upstream_timeout"),
    ("connection_reset", mock(raise_(httpx.RemoteProtocolError("reset"))), 502, "upstream_unreachable"),
]


@pytest.mark.parametrize("transport,status,code", [f[1:] for f in UPSTREAM_FAILURES],
                         ids=[f[0] for f in UPSTREAM_FAILURES])
def test_upstream_failure_gets_a_clear_gateway_error(transport, status, code):
    client, _, _ = served(ForcedGates(), "upstream.models=[scripted]", transport=transport)
    with client:
        assert_error(ask(client, tools=None), status, code)
        assert client.get("/health").status_code == 200


def test_upstream_garbage_from_a_real_server_then_recovery():
    replies = [Response(content=b"\x00garbage", media_type="application/json"), None]
    fake = ScriptedUpstream(reply=lambda body: replies.pop(0) or agent_reply(body))
    client, _, _ = served(ForcedGates(), fake=fake)
    with client:
        assert_error(ask(client, tools=None), 502, "upstream_garbage")
        assert_still_serving(client)


def test_upstream_down_is_502_and_models_too():
    port = free_port()          # nothing listens there
    cfg = config(f"upstream.base_url=http://127.0.0.1:{port}/v1", "upstream.retries=1")
    with TestClient(create_app(cfg, ForcedGates(), Upstream.from_config(cfg.upstream))) as client:
        assert_error(ask(client, tools=None), 502, "upstream_unreachable")
        assert_error(client.get("/v1/models"), 502, "upstream_unreachable")
        assert client.get("/health").status_code == 200


@pytest.mark.slow
def test_upstream_timeout_is_504_over_a_real_socket():
    fake = ScriptedUpstream(delay_s=2.0)
    with serve_in_thread(fake.app) as url:
        cfg = config(f"upstream.base_url={url}/v1", "upstream.timeout_s=0.2", "upstream.models=[scripted]")
        with TestClient(create_app(cfg, ForcedGates(), Upstream.from_config(cfg.upstream))) as client:
            assert_error(ask(client, tools=None), 504, "upstream_timeout")
            fake.delay_s = 0.0
            assert_still_serving(client)


def test_a_plain_proxy_loads_neither_torch_nor_the_training_code():
    """Without gates the endpoint is a proxy with limits: its config (the gate registry's names included) and its
    app load without torch, and no command of the endpoint imports the trainers' modules."""
    code = ("import sys\nimport recipes\nfrom runtime.serve.__main__ import build\nfrom runtime.serve import create_app\n"
            "cfg = recipes.compose('serve', ['upstream.base_url=http://127.0.0.1:9/v1'])\n"
            "gates, upstream, _ = build(cfg)\nassert gates is None\ncreate_app(cfg, gates, upstream)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.split('.')[0] == 'trainers'))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_stream_cut_by_the_shutdown_ends_with_an_error_event():
    """A stream already under way when the shutdown cancels it: a last ``data: {"error": ...}`` event, which the
    openai client raises, instead of a stream that stops mid-answer (no ``[DONE]``)."""
    from runtime.serve.server import ShutdownResponses

    async def streaming_app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b'data: {"choices": []}\n\n', "more_body": True})
        raise asyncio.CancelledError("Task cancelled, timeout graceful shutdown exceeded")

    async def plain_app(scope, receive, send):
        raise asyncio.CancelledError

    async def run(app) -> list[dict]:
        sent: list[dict] = []

        async def send(message):
            sent.append(message)

        await ShutdownResponses(app)({"type": "http"}, None, send)      # the cancellation ends here
        return sent

    sent = asyncio.run(run(streaming_app))
    assert sent[-1]["more_body"] is False and sent[-1]["body"].startswith(b"data: {")
    assert json.loads(sent[-1]["body"][6:])["error"]["code"] == "server_shutting_down"
    start, body = asyncio.run(run(plain_app))
    assert start["status"] == 503 and json.loads(body["body"])["error"]["code"] == "server_shutting_down"
