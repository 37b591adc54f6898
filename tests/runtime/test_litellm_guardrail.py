"""The gates as a LiteLLM guardrail (runtime/litellm_guardrail.py): a real ``litellm`` proxy process started with a
``guardrails:`` config in front of the scripted upstream, driven with the official ``openai`` client. Skips
without ``.[litellm]``."""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("litellm.proxy.proxy_cli")      # litellm[proxy]
openai = pytest.importorskip("openai")

import recipes  # noqa: E402
from data_builders.agent import prompts as P  # noqa: E402
from data_builders.environments.base import serialize  # noqa: E402
from runtime.serve.testing import ForcedGates, ScriptedUpstream, free_port, serve_in_thread  # noqa: E402

REPO = recipes.CONFIG_DIR.rsplit("/", 1)[0]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]


FORCED = {"gates_factory": "runtime.serve.testing:ForcedGates",
          # forced decisions in the proxy's process: skip the first call, send the first answer back once
          "gates_kwargs": {"tool_actions": ["skip"], "answer_actions": ["continue"]}}


def proxy_config(upstream_url: str, gates: dict) -> dict:
    return {"model_list": [{"model_name": "scripted",
                            "litellm_params": {"model": "openai/scripted", "api_base": f"{upstream_url}/v1",
                                               "api_key": "unused"}}],
            "guardrails": [{"guardrail_name": "toolwise", "litellm_params": {
                "guardrail": "runtime.litellm_guardrail.ToolwiseGuardrail", "mode": "post_call", "default_on": True,
                **gates}}]}


@contextlib.contextmanager
def litellm_proxy(root: Path, gates: dict, fake: ScriptedUpstream):
    """(base URL, master key, the scripted upstream, the proxy's log file) of a real proxy process with the
    toolwise guardrail configured by ``gates`` (its litellm_params)."""
    with serve_in_thread(fake.app) as upstream_url:
        (root / "config.yaml").write_text(json.dumps(proxy_config(upstream_url, gates)))    # JSON is YAML
        key, port = f"sk-{secrets.token_hex(24)}", free_port()
        env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "LITELLM_LOG": "INFO", "PYTHONPATH": REPO}
        log = root / "proxy.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "litellm.proxy.proxy_cli", "--config",
                                     str(root / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)],
                                    cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the litellm proxy did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
            yield url, key, fake, log
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    with litellm_proxy(tmp_path_factory.mktemp("litellm"), FORCED, ScriptedUpstream()) as running:
        yield running


def test_the_guardrail_gates_a_tool_episode_through_a_litellm_proxy(proxy):
    url, key, fake, log = proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    question = [{"role": "user", "content": "What is 6*7?"}]
    out = client.chat.completions.create(model="scripted", messages=question, tools=TOOLS)
    tw = out.model_extra["toolwise"]
    # the proposed call was skipped: the model was re-asked with the skipped-call result and answered; G-STEP sent
    # that answer back once for verification, and the scripted model's next turn, a call, was let through
    assert [(d["gate"], d["applied"]) for d in tw["decisions"]] == [("toolgate", "skip"), ("g_step", "continue"),
                                                                   ("toolgate", "execute")]
    assert out.choices[0].message.tool_calls[0].function.name == "calculator"
    assert out.choices[0].finish_reason == "tool_calls"
    assert len(fake.requests) == 3 and tw["upstream_calls"] == 3
    reasked = fake.requests[1]["messages"]
    assert reasked[-2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert reasked[-1] == {"role": "tool", "tool_call_id": "call_0", "content": serialize(P.SKIPPED_CALL_RESULT)}
    assert fake.requests[2]["messages"][-1] == {"role": "user", "content": P.VERIFY_PROMPT}
    # what the server added, as the model saw it (LiteLLM drops a null content when it re-sends the turn)
    assert [m["role"] for m in tw["injected"]] == [m["role"] for m in fake.requests[2]["messages"][1:]]
    assert tw["injected"][1] == fake.requests[2]["messages"][2] and tw["injected"][3]["content"] == P.VERIFY_PROMPT
    assert out.usage.prompt_tokens == 10 + 30 + 50          # the three calls the request cost
    # every decision is in the proxy's log
    deadline = time.monotonic() + 5
    while log.read_text().count("toolwise ") < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    text = log.read_text()
    assert text.count("toolwise toolgate") == 2 and "toolwise g_step" in text and "applied=continue" in text
    # the client runs its tool and sends the result: the answer is committed (no forced decision left), as is
    out = client.chat.completions.create(model="scripted", tools=TOOLS, messages=[
        *question, *tw["injected"], out.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": out.choices[0].message.tool_calls[0].id, "content": "42"}])
    assert out.choices[0].message.content.endswith("\\boxed{42}")
    assert [d["applied"] for d in out.model_extra["toolwise"]["decisions"]] == ["commit"]
    assert len(fake.requests) == 4


# three skip-then-continue episodes in a row on one proxy: a non-streamed reference, then two streamed ones
STREAM_FORCED = {"gates_factory": "runtime.serve.testing:ForcedGates",
                 "gates_kwargs": {"tool_actions": ["skip", "execute"] * 3, "answer_actions": ["continue"] * 3}}


def without_latency(toolwise: dict) -> dict:
    """``toolwise`` less what differs between two runs of the same decisions (timings)."""
    return {**{k: v for k, v in toolwise.items() if k != "upstream_ms"},
            "decisions": [{k: v for k, v in d.items() if k != "latency_ms"} for d in toolwise["decisions"]]}


def decision_lines(log: Path, call_id: str) -> list[str]:
    """The proxy's log lines of ``call_id``'s decisions, from the gate name on (the id written as ``<id>``)."""
    return [line[line.index("toolwise "):].replace(call_id, "<id>") for line in log.read_text().splitlines()
            if f"call={call_id} " in line and "toolwise " in line]


def streamed(client, **request) -> tuple[dict, str]:
    """A streamed completion as a client puts it together from the chunks the official client parsed (content,
    tool calls by index, finish reason, usage, the ``toolwise`` extra field and which chunk had it), and the
    proxy's call id."""
    raw = client.chat.completions.with_raw_response.create(stream=True, **request)
    out: dict = {"content": None, "tool_calls": {}, "finish_reason": None, "usage": None, "toolwise": None,
                 "toolwise_at": [], "chunks": 0}
    for n, chunk in enumerate(raw.parse()):
        out["chunks"] += 1
        if "toolwise" in (chunk.model_extra or {}):
            out["toolwise"], out["toolwise_at"] = chunk.model_extra["toolwise"], [*out["toolwise_at"], n]
        if chunk.usage is not None:
            out["usage"] = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                out["content"] = (out["content"] or "") + delta.content
            for call in delta.tool_calls or []:
                slot = out["tool_calls"].setdefault(call.index, {"id": None, "type": "function",
                                                                 "function": {"name": "", "arguments": ""}})
                slot["id"] = call.id or slot["id"]
                slot["function"]["name"] += (call.function and call.function.name) or ""
                slot["function"]["arguments"] += (call.function and call.function.arguments) or ""
            out["finish_reason"] = choice.finish_reason or out["finish_reason"]
    out["tool_calls"] = [out["tool_calls"][i] for i in sorted(out["tool_calls"])] or None
    return out, raw.headers["x-litellm-call-id"]


def test_the_guardrail_gates_a_streamed_tool_episode_through_a_litellm_proxy(tmp_path):
    """``stream=True`` through the real proxy: the turn is buffered and gated as a non-streamed one (the skipped
    call and the answer sent back for verification never reach the client; the same upstream requests, decisions
    and log lines), then sent as chunks whose last one carries ``toolwise``."""
    with litellm_proxy(tmp_path, STREAM_FORCED, ScriptedUpstream()) as (url, key, fake, log):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        question = [{"role": "user", "content": "What is 6*7?"}]
        raw = client.chat.completions.with_raw_response.create(model="scripted", messages=question, tools=TOOLS)
        ref, ref_id = raw.parse(), raw.headers["x-litellm-call-id"]
        ref_tw, ref_requests = ref.model_extra["toolwise"], list(fake.requests)
        assert [(d["gate"], d["applied"]) for d in ref_tw["decisions"]] == [
            ("toolgate", "skip"), ("g_step", "continue"), ("toolgate", "execute")] and len(ref_requests) == 3

        for client_usage in (False, True):
            before = len(fake.requests)
            out, call_id = streamed(client, model="scripted", messages=question, tools=TOOLS,
                                    **({"stream_options": {"include_usage": True}} if client_usage else {}))
            tw = out["toolwise"]
            # the turn the client assembles is the non-streamed one: the calculator call the gates let through
            # after the skip and the verification round, not the skipped call_0
            assert out["tool_calls"] == [c.model_dump(exclude_none=True) for c in ref.choices[0].message.tool_calls]
            assert out["tool_calls"][0]["function"]["name"] == "calculator" and out["tool_calls"][0]["id"] != "call_0"
            assert out["content"] == ref.choices[0].message.content is None
            assert out["finish_reason"] == ref.choices[0].finish_reason == "tool_calls"
            assert without_latency(tw) == without_latency(ref_tw)
            assert [(d["gate"], d["applied"]) for d in tw["decisions"]] == [
                ("toolgate", "skip"), ("g_step", "continue"), ("toolgate", "execute")]
            # exactly the upstream calls the gating needs: the client's (streamed) call, the re-ask after the skip
            # and the verification round (non-streamed, through the router); none made and thrown away
            requests = fake.requests[before:]
            assert len(requests) == 3 and tw["upstream_calls"] == 3
            assert requests[0]["stream"] is True and not any(r.get("stream") for r in requests[1:])
            assert [{k: v for k, v in r.items() if k not in ("stream", "stream_options")} for r in requests] == \
                ref_requests
            assert requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0",
                                                   "content": serialize(P.SKIPPED_CALL_RESULT)}
            assert requests[2]["messages"][-1] == {"role": "user", "content": P.VERIFY_PROMPT}
            # the last chunk alone carries toolwise, with the usage of the three calls: the finish chunk, or the
            # usage chunk when the client asked for one
            assert out["toolwise_at"] == [out["chunks"] - 1]
            assert out["usage"]["prompt_tokens"] == ref.usage.prompt_tokens == 10 + 30 + 50
            # the decisions are in the proxy's log, the same lines as for the non-streamed request
            deadline = time.monotonic() + 5
            while len(decision_lines(log, call_id)) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert decision_lines(log, call_id) == decision_lines(log, ref_id) and len(decision_lines(log, ref_id)) == 3

        # the client runs its tool and sends the result: the answer streams, committed (no forced decision left)
        before = len(fake.requests)
        call = out["tool_calls"][0]
        out, call_id = streamed(client, model="scripted", tools=TOOLS, messages=[
            *question, *tw["injected"], {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "42"}])
        assert out["content"] == "The tool says 42. \\boxed{42}" and out["finish_reason"] == "stop"
        assert [d["applied"] for d in out["toolwise"]["decisions"]] == ["commit"]
        assert len(fake.requests) == before + 1
        time.sleep(1)       # LiteLLM's deferred post-stream guardrails have run too: still no extra upstream call
        assert len(fake.requests) == 3 * 3 + 1 and "toolwise ungated" not in log.read_text()


class ProxyLog(logging.Handler):
    """The messages LiteLLM's proxy logger (the guardrail's) emits while in a ``with`` block."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> list[str]:
        from litellm._logging import verbose_proxy_logger

        self.level = verbose_proxy_logger.level
        verbose_proxy_logger.addHandler(self)
        verbose_proxy_logger.setLevel(logging.INFO)
        return self.lines

    def __exit__(self, *exc) -> None:
        from litellm._logging import verbose_proxy_logger

        verbose_proxy_logger.removeHandler(self)
        verbose_proxy_logger.setLevel(self.level)


def guardrail(**options):
    """The guardrail in this process over forced gates (``options``: ForcedGates' fields, then the guardrail's)."""
    from runtime.litellm_guardrail import ToolwiseGuardrail

    forced = {k: options.pop(k) for k in list(options) if k in ForcedGates.__dataclass_fields__}
    return ToolwiseGuardrail(guardrail_name="toolwise", default_on=True,
                             gates_factory="runtime.serve.testing:ForcedGates", gates_kwargs=forced, **options)


CALLS = [{"id": "call_a", "type": "function", "function": {"name": "calculator", "arguments": '{"x": 1}'}},
         {"id": "call_b", "type": "function", "function": {"name": "calculator", "arguments": '{"x": 2}'}}]


def chunks_of(message: dict, logprobs: list[float] | None = None) -> list:
    """``message`` as LiteLLM streams it to its hooks: a role chunk, a chunk per content word (with its log-prob),
    each call's head then its arguments, the finish chunk."""
    from litellm.types.utils import ModelResponseStream

    words = message["content"].split(" ") if message.get("content") else []
    deltas = [({"role": "assistant", "content": ""}, None)]
    deltas += [({"content": w if i == 0 else f" {w}"},
                {"content": [{"token": w, "logprob": logprobs[i], "top_logprobs": []}]} if logprobs else None)
               for i, w in enumerate(words)]
    for i, c in enumerate(message.get("tool_calls") or []):
        deltas += [({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                     "function": {"name": c["function"]["name"], "arguments": ""}}]}, None),
                   ({"tool_calls": [{"index": i, "function": {"arguments": c["function"]["arguments"]}}]}, None)]
    head = {"id": "chatcmpl-t", "created": 1, "model": "scripted"}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return [ModelResponseStream(**head, choices=[{"index": 0, "delta": d, "logprobs": lp}]) for d, lp in deltas] + \
        [ModelResponseStream(**head, choices=[{"index": 0, "delta": {}, "finish_reason": finish}])]


def stream_through(gr, chunks: list, **request) -> list:
    """What the guardrail's streaming hook yields for ``chunks`` of a streamed request."""
    async def upstream():
        for chunk in chunks:
            yield chunk

    async def run():
        data = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6*7?"}], "tools": TOOLS,
                "stream": True, "litellm_call_id": "t", **request}
        return [c async for c in gr.async_post_call_streaming_iterator_hook(None, upstream(), data)]

    return asyncio.run(run())


def test_a_gate_error_on_a_stream_follows_on_error():
    gr = guardrail(tool_actions=["raise"], on_error="open")
    with ProxyLog() as lines:
        out = stream_through(gr, chunks_of({"content": None, "tool_calls": CALLS[:1]}))
    # open: the call goes through as if no gate were there, and the failure is recorded and logged
    assert [c["id"] for c in out[1].choices[0].delta.tool_calls] == ["call_a"]
    assert out[-1].choices[0].finish_reason == "tool_calls"
    (d,) = out[-1].toolwise["decisions"]
    assert (d["action"], d["applied"]) == ("error", "execute") and out[-1].toolwise["upstream_calls"] == 1
    assert [line for line in lines if line.startswith("toolwise ")] == [
        "toolwise toolgate call=t round=0 action=error applied=execute p=nan tau=nan "
        "error=RuntimeError: forced toolgate failure"]


def test_a_stream_the_guardrail_cannot_gate_goes_out_as_it_came(monkeypatch):
    import runtime.litellm_guardrail as G

    gr = guardrail(tool_actions=["skip"])
    chunks = chunks_of({"content": None, "tool_calls": CALLS[:1]})
    with ProxyLog() as lines:
        assert stream_through(gr, []) == []                             # no chunk
        assert stream_through(gr, [b"event: x", b"data: {}"]) == [b"event: x", b"data: {}"]   # not chat chunks

        def broken(**_):
            raise ValueError("no way")
        monkeypatch.setattr(G, "stream_chunk_builder", broken)
        assert stream_through(gr, chunks) == chunks                     # the very chunks, unchanged
    assert gr.gates.seen == []          # no gate asked, so no re-ask made
    assert [line.split(": ", 1)[1] for line in lines if line.startswith("toolwise ungated call=t")] == [
        "the stream had no chunk", "bytes chunks are not chat completion chunks",
        f"assembly failed: ValueError: no way; its {len(chunks)} chunks pass unchanged"]


def test_the_success_hook_leaves_streamed_requests_to_the_streaming_hook():
    """LiteLLM also runs the post-call success hook once a stream is over, on the response it assembled for its
    logs: the guardrail must not gate (nor re-ask) there."""
    from litellm.types.utils import ModelResponse

    gr = guardrail(tool_actions=["skip"])
    response = ModelResponse(choices=[{"index": 0, "finish_reason": "tool_calls",
                                       "message": {"role": "assistant", "content": None, "tool_calls": CALLS[:1]}}])
    data = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6*7?"}], "stream": True}
    assert asyncio.run(gr.async_post_call_success_hook(data, None, response)) is None and gr.gates.seen == []
    # LiteLLM finds the streaming hook only in the registered class's own attributes: a subclass has it there too
    from runtime.litellm_guardrail import ToolwiseGuardrail

    class Audited(ToolwiseGuardrail):
        pass
    assert "async_post_call_streaming_iterator_hook" in Audited.__dict__


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_skipped_beside_an_executed_one_never_reaches_the_client(stream):
    from litellm.types.utils import ModelResponse

    gr = guardrail(tool_actions=["skip", "execute"])
    message = {"role": "assistant", "content": None, "tool_calls": CALLS}
    if stream:
        out = stream_through(gr, chunks_of(message))
        calls, toolwise = [c.id for c in out[1].choices[0].delta.tool_calls], out[-1].toolwise
    else:
        data = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6*7?"}], "tools": TOOLS}
        response = ModelResponse(choices=[{"index": 0, "finish_reason": "tool_calls", "message": message}])
        out = asyncio.run(gr.async_post_call_success_hook(data, None, response))
        calls, toolwise = [c.id for c in out.choices[0].message.tool_calls], out.toolwise
    assert calls == ["call_b"] and toolwise["upstream_calls"] == 1
    assert [(d["call_id"], d["applied"]) for d in toolwise["decisions"]] == [("call_a", "skip"), ("call_b", "execute")]


@pytest.mark.parametrize("stream", [False, True])
def test_a_shadowed_gate_is_logged_and_never_acted_on(stream):
    """modes: a gate in shadow decides (logged with mode=shadow, in toolwise) and the response is the model's own:
    no re-ask, a stream passed through as it came (not held)."""
    from litellm.types.utils import ModelResponse

    gr = guardrail(tool_actions=["skip"], modes={"toolgate": "shadow", "g_step": "shadow"})
    message = {"role": "assistant", "content": None, "tool_calls": CALLS[:1]}
    with ProxyLog() as lines:
        if stream:
            chunks = chunks_of(message)
            assert stream_through(gr, chunks) == chunks            # the very chunks, as they came
        else:
            data = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6*7?"}], "tools": TOOLS}
            response = ModelResponse(choices=[{"index": 0, "finish_reason": "tool_calls", "message": message}])
            out = asyncio.run(gr.async_post_call_success_hook(data, None, response))
            assert out is response and [c.id for c in out.choices[0].message.tool_calls] == ["call_a"]
            assert [(d["action"], d["applied"], d["mode"]) for d in out.toolwise["decisions"]] == [
                ("skip", "execute", "shadow")]
    assert [line.split(" p=")[0] for line in lines if line.startswith("toolwise toolgate")] == [
        f"toolwise toolgate call={'t' if stream else None} round=0 action=skip applied=execute"]
    assert all(line.endswith("mode=shadow") for line in lines if line.startswith("toolwise toolgate"))
    with pytest.raises(ValueError, match="gates.modes"):
        guardrail(modes={"toolgate": "loud"})


def test_the_guardrail_captures_what_it_gated(tmp_path):
    from data_builders.capture.records import read_capture

    gr = guardrail(capture={"dir": str(tmp_path), "redact": ["6\\*7"]})      # the call executes: no re-ask
    stream_through(gr, chunks_of({"content": None, "tool_calls": CALLS[:1]}))
    gr.capture.close()
    [record] = read_capture(tmp_path).records
    assert record["decisions"][0]["action"] == "execute" and record["turns"][0]["message"]["tool_calls"][0]["id"] == "call_a"
    assert record["messages"] == [{"role": "user", "content": "What is [REDACTED]?"}]


def test_a_streamed_answer_reaches_g_step_with_its_token_logprobs():
    gr = guardrail(tool_actions=[], default_tool=None)
    out = stream_through(gr, chunks_of({"content": "It is \\boxed{42}", "tool_calls": None}, [-0.1, -0.2, -0.3]),
                         logprobs=True)
    assert gr.gates.seen[-1]["answer"] == "It is \\boxed{42}" and gr.gates.seen[-1]["logprobs"] == [-0.1, -0.2, -0.3]
    # the client asked for log-probs: they come back with the content
    assert out[0].choices[0].delta.content == "It is \\boxed{42}"
    assert [t.logprob for t in out[0].choices[0].logprobs.content] == [-0.1, -0.2, -0.3]
    assert [d["applied"] for d in out[-1].toolwise["decisions"]] == ["commit"]


@pytest.mark.slow
def test_the_guardrail_gates_a_teams_own_mcp_tools_with_gates_fit_on_them(tmp_path):
    """A team's own tools through the proxy: the worked example's MCP server lists its tools, the client sends
    them, the upstream proposes calls to them, and the guardrail loaded with the ToolGate and G-STEP fit on that
    server's points (its ``toolgate`` / ``g_step`` litellm_params) decides each call as the runtime API does on the
    same messages."""
    from runtime.api import Gates
    from tests.doubles import OWN_TOOL_CALLS, UNIT_TOOLS_GATES, own_tool_call, own_tools_reply, unit_tools_specs

    tools = unit_tools_specs()
    direct = Gates.load(**UNIT_TOOLS_GATES)
    with litellm_proxy(tmp_path, {**UNIT_TOOLS_GATES, "max_reasks": 0, "max_continues": 0},
                       ScriptedUpstream(reply=own_tools_reply)) as (url, key, fake, log):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        for question in OWN_TOOL_CALLS:
            messages = [{"role": "user", "content": question}]
            out = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
            d = out.model_extra["toolwise"]["decisions"][0]
            want = direct.tool_call(messages, tools, own_tool_call(question))
            assert (d["gate"], d["action"]) == ("toolgate", want.action)
            assert d["probability"] == pytest.approx(want.probability, abs=1e-6)
