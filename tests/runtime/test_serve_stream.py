"""``stream: true`` through the gated endpoint (runtime/serve/streaming.py): the same decisions and final messages as
a non-streamed episode, what is held for a gate and what streams live, usage and decisions in the last chunk, a
client that leaves cancelling the upstream, an upstream failing mid-stream ending the stream with an error event,
and openai-agents' streamed runner completing a tool episode. Upstream and gates are test doubles."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
import httpx  # noqa: E402

import recipes  # noqa: E402
from data_builders.agent import prompts as P  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.testing import ForcedGates, ScriptedUpstream, serve_in_thread  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
QUESTION = [{"role": "user", "content": "What is 6*7?"}]


class Endpoint:
    """The endpoint on a loopback port in front of ``fake`` (also on a port: streaming is over real sockets)."""

    def __init__(self, gates, fake: ScriptedUpstream | None = None, *overrides: str):
        self.fake = fake or ScriptedUpstream()
        self.gates, self.overrides = gates, overrides

    def __enter__(self) -> "Endpoint":
        self._up = serve_in_thread(self.fake.app)
        upstream_url = self._up.__enter__()
        cfg = recipes.compose("serve", [f"upstream.base_url={upstream_url}/v1", *self.overrides])
        self.app = create_app(cfg, self.gates, Upstream.from_config(cfg.upstream))
        self._ep = serve_in_thread(self.app)
        self.url = self._ep.__enter__()
        self.client = openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused-on-loopback", max_retries=0)
        return self

    def __exit__(self, *exc) -> None:
        self._ep.__exit__(*exc)
        self._up.__exit__(*exc)


def collect(stream) -> tuple[dict, list, dict]:
    """(the message the chunks add up to, the chunks, the last chunk's ``toolwise``), as a client assembles them."""
    chunks = list(stream)
    content, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                call = calls.setdefault(part.index, {"id": None, "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                call["id"] = part.id or call["id"]
                call["function"]["name"] += part.function.name or ""
                call["function"]["arguments"] += part.function.arguments or ""
            finish = choice.finish_reason or finish
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    assert finish is not None
    return message, chunks, (chunks[-1].model_extra or {}).get("toolwise")


def episode(client, stream: bool) -> tuple[list[dict], list[dict]]:
    """The openai client through a tool episode: it runs its own tools and splices ``toolwise.injected`` in.
    Returns (the transcript, every decision)."""
    messages, decisions = list(QUESTION), []
    for _ in range(4):
        if stream:
            msg, _, tw = collect(client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS,
                                                                stream=True))
        else:
            out = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
            msg, tw = out.choices[0].message.model_dump(exclude_none=True), out.model_extra["toolwise"]
            msg = {"role": "assistant", "content": msg.get("content"),
                   **({"tool_calls": msg["tool_calls"]} if msg.get("tool_calls") else {})}
        messages += tw["injected"]
        messages.append(msg)
        decisions += [{k: d[k] for k in ("gate", "action", "applied", "round")} for d in tw["decisions"]]
        if not msg.get("tool_calls"):
            return messages, decisions
        for call in msg["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps({"result": 42})})
    raise AssertionError("the episode did not end")


def test_streamed_tool_episode_equals_the_non_streamed_one():
    runs = {}
    for stream in (False, True):
        # turn 1: the call runs; turn 2: the answer gets a verification round whose call runs; turn 3: committed
        gates = ForcedGates(tool_actions=["execute", "execute"], answer_actions=["continue", "commit"])
        with Endpoint(gates, None, "gates.logprobs=true") as ep:
            runs[stream] = episode(ep.client, stream), ep.fake.requests
    (messages, decisions), requests = runs[True]
    assert (messages, decisions) == runs[False][0]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool",
                                             "assistant"]
    assert messages[4]["content"] == P.VERIFY_PROMPT and messages[-1]["content"].endswith("\\boxed{42}")
    assert [d["applied"] for d in decisions] == ["execute", "continue", "execute", "commit"]
    # every upstream call was streamed, with usage asked for (the endpoint sums it), and saw what the non-streamed
    # episode's calls saw
    assert all(r["stream"] is True and r["stream_options"]["include_usage"] is True for r in requests)
    assert [r["messages"] for r in requests] == [r["messages"] for r in runs[False][1]]


def test_a_held_answer_is_never_the_one_sent_back_for_verification():
    answers = iter(["First draft \\boxed{41}", "Checked: \\boxed{42}"])
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": next(answers)})
    with Endpoint(ForcedGates(answer_actions=["continue", "commit"]), fake) as ep:
        msg, chunks, tw = collect(ep.client.chat.completions.create(model="scripted", messages=QUESTION,
                                                                    stream=True))
    assert msg["content"] == "Checked: \\boxed{42}"
    assert all("41" not in (c.choices[0].delta.content or "") for c in chunks if c.choices)
    assert tw["injected"] == [{"role": "assistant", "content": "First draft \\boxed{41}"},
                              {"role": "user", "content": P.VERIFY_PROMPT}]
    assert [d["applied"] for d in tw["decisions"]] == ["continue", "commit"]


@pytest.mark.slow
def test_text_no_gate_needs_streams_as_it_arrives_and_a_held_one_waits_for_its_decision():
    words = " ".join(f"w{i}" for i in range(10))
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": words}, token_delay_s=0.05)
    timings = {}
    for name, gates in (("live", ForcedGates(default_answer=None)), ("held", ForcedGates())):
        with Endpoint(gates, fake) as ep:
            start = time.perf_counter()
            stream = ep.client.chat.completions.create(model="scripted", messages=QUESTION, stream=True)
            arrivals = [time.perf_counter() - start for c in stream if c.choices and c.choices[0].delta.content]
            timings[name] = arrivals
    # ~0.55 s of generation: live, the first word arrives with the upstream's first chunk and the words trickle in;
    # held, the whole answer arrives at once after the upstream has finished and G-STEP has decided
    live, held = timings["live"], timings["held"]
    print(f"\ntime to first content: live {live[0] * 1000:.0f} ms, held (G-STEP) {held[0] * 1000:.0f} ms")
    assert len(live) == 10 and live[-1] - live[0] > 0.3 and live[0] < 0.3
    assert len(held) == 1 and held[0] > 0.45


def test_a_call_is_held_until_gated_and_a_skipped_one_streams_the_reasked_turn():
    fake = ScriptedUpstream(token_delay_s=0.01)
    gates = ForcedGates(tool_actions=["skip"], default_answer=None)     # ToolGate only
    with Endpoint(gates, fake) as ep:
        msg, chunks, tw = collect(ep.client.chat.completions.create(model="scripted", messages=QUESTION,
                                                                    tools=TOOLS, stream=True))
        assert [d["applied"] for d in tw["decisions"]] == ["skip"]
        assert "tool_calls" not in msg and msg["content"].endswith("\\boxed{42}")
        assert all(not c.choices[0].delta.tool_calls for c in chunks if c.choices)   # the skipped call never went
        assert chunks[0].choices[0].delta.role == "assistant" and len({c.id for c in chunks}) == 1
        # an executed call goes out whole, once gated, in one delta per call
        msg, chunks, tw = collect(ep.client.chat.completions.create(model="scripted", messages=QUESTION,
                                                                    tools=TOOLS, stream=True))
    assert msg["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"x": 0}'}
    assert sum(bool(c.choices and c.choices[0].delta.tool_calls) for c in chunks) == 1
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_usage_is_summed_in_its_own_last_chunk_with_the_decisions():
    gates = ForcedGates(tool_actions=["skip"])
    with Endpoint(gates) as ep:
        msg, chunks, tw = collect(ep.client.chat.completions.create(
            model="scripted", messages=QUESTION, tools=TOOLS, stream=True, stream_options={"include_usage": True}))
        gates.tool_actions.append("skip")       # the same episode, not streamed
        plain = ep.client.chat.completions.create(model="scripted", messages=QUESTION, tools=TOOLS)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.model_dump(exclude_none=True) == plain.usage.model_dump(exclude_none=True)
    assert last.usage.prompt_tokens == 10 + 30          # the skip's re-ask is counted
    assert tw["upstream_calls"] == 2 and chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-2].model_extra.get("toolwise") is None          # the decisions ride on the last chunk only


def read_until_first_event(url: str, body: dict) -> None:
    """Opens a stream, reads its first event, and leaves (closing the connection)."""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                return


@pytest.mark.parametrize("gates", [ForcedGates(default_answer=None), ForcedGates()], ids=["live", "held"])
def test_a_client_that_disconnects_cancels_the_upstream_stream(gates):
    long = " ".join(["word"] * 200)
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": long}, token_delay_s=0.05)
    body = {"model": "scripted", "messages": QUESTION, "stream": True}
    with Endpoint(gates, fake) as ep:
        if gates.default_answer is None:
            read_until_first_event(ep.url, body)        # live: it leaves after the first word
        else:
            with pytest.raises(httpx.ReadTimeout):      # held: nothing is sent; it leaves while waiting
                with httpx.stream("POST", f"{ep.url}/v1/chat/completions", json=body, timeout=0.5) as r:
                    r.read()
        deadline = time.monotonic() + 5
        while not fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        # 200 words at 50 ms would take 10 s: the upstream stream was closed as soon as the client left
        assert fake.cancelled == ["chatcmpl-0"]
        assert ep.client.chat.completions.create(model="scripted", messages=QUESTION).choices[0].message.content


def test_a_client_leaving_mid_stream_is_noticed_under_any_asgi_version():
    """Under a server of ASGI spec 2.4, starlette stops watching for the client's disconnect once a stream has
    started (it counts on a failed send, which a held turn may not make for its whole generation): the endpoint
    awaits ``http.disconnect`` itself, so the gating and its upstream stream end when the client leaves, not when
    the answer is done. The app is driven as such a server would (its ``send`` never fails)."""
    long = " ".join(["word"] * 200)
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": long}, token_delay_s=0.05)
    raw = json.dumps({"model": "scripted", "messages": QUESTION, "stream": True}).encode()
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080),
             "headers": [(b"host", b"test"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())]}

    async def client(app) -> list[bytes]:
        gone, got, sent_body = asyncio.Event(), [], False

        async def receive() -> dict:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body" and b"data:" in message.get("body", b""):
                got.append(message["body"])
                gone.set()          # the client leaves after its first event

        await asyncio.wait_for(app(scope, receive, send), timeout=5.0)
        return got

    with serve_in_thread(fake.app) as upstream_url:
        cfg = recipes.compose("serve", [f"upstream.base_url={upstream_url}/v1"])
        app = create_app(cfg, None, Upstream.from_config(cfg.upstream))
        start = time.monotonic()
        got = asyncio.run(client(app))
        assert time.monotonic() - start < 3.0 and 1 <= len(got) < 10, got
        deadline = time.monotonic() + 5
        while not fake.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.cancelled == ["chatcmpl-0"]


@pytest.mark.parametrize("break_with,expected", [("error", "scripted failure mid-stream"),
                                                 ("close", "ended its stream before a finish_reason")])
def test_an_upstream_failing_mid_stream_ends_the_stream_with_an_error_event(break_with, expected):
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": "one two three four five"},
                            break_after=3, break_with=break_with)
    with Endpoint(None, fake) as ep:        # no gate: the first words are out before the upstream fails
        got = []
        with pytest.raises(openai.APIError, match=expected):
            for chunk in ep.client.chat.completions.create(model="scripted", messages=QUESTION, stream=True):
                got.append(chunk.choices[0].delta.content)
        assert "".join(filter(None, got)) == "one two "
        # with G-STEP the turn is held, so the failure comes before anything was sent: an ordinary HTTP error
    with Endpoint(ForcedGates(), ScriptedUpstream(reply=fake.reply, break_after=3, break_with=break_with)) as ep:
        with pytest.raises(openai.APIStatusError, match=expected) as e:
            list(ep.client.chat.completions.create(model="scripted", messages=QUESTION, stream=True))
        assert e.value.status_code == 502


def test_openai_agents_streamed_runner_completes_a_tool_episode():
    agents = pytest.importorskip("agents")
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    calls = []

    @function_tool
    def calculator(x: int) -> str:
        """Arithmetic."""
        calls.append(x)
        return json.dumps({"result": 42})

    gates = ForcedGates()
    with Endpoint(gates) as ep:
        client = openai.AsyncOpenAI(base_url=f"{ep.url}/v1", api_key="unused-on-loopback", max_retries=0)
        agent = Agent(name="calc", instructions="Use the calculator.", tools=[calculator],
                      model=OpenAIChatCompletionsModel(model="scripted", openai_client=client))

        async def run():
            result = Runner.run_streamed(agent, "What is 6*7?")
            kinds = [event.type async for event in result.stream_events()]
            return result, kinds

        result, kinds = asyncio.run(run())
    assert calls == [0]                                   # the executed call ran in the agent, once
    assert result.final_output.endswith("\\boxed{42}")
    assert "raw_response_event" in kinds
    assert all(r["stream"] is True for r in ep.fake.requests) and len(ep.fake.requests) == 2
    assert [s["gate"] for s in gates.seen] == ["toolgate", "g_step"]


def test_upstream_local_streams_the_generated_turn_as_the_non_streamed_one(tiny_backend):
    """The in-process policy generates a turn whole; streamed, the client gets the same text and decisions."""
    from fastapi.testclient import TestClient

    from data_builders.agent.openai_messages import call_format_of
    from runtime.serve.local import LocalUpstream

    cfg = recipes.compose("serve", ["upstream=local"])
    upstream = LocalUpstream(tiny_backend, call_format=call_format_of(tiny_backend.fingerprint), max_tokens=12)
    gates = ForcedGates(default_tool=None)
    body = {"model": tiny_backend.model_id, "messages": QUESTION}
    with TestClient(create_app(cfg, gates, upstream)) as client:
        plain = client.post("/v1/chat/completions", json=body).json()
        with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
            events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:") and
                      "[DONE]" not in line]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == plain["choices"][0]["message"]["content"] and text
    strip = lambda ds: [{k: d[k] for k in ("gate", "action", "applied")} for d in ds]  # noqa: E731
    assert strip(events[-1]["toolwise"]["decisions"]) == strip(plain["toolwise"]["decisions"])
    assert events[-1]["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_shadowed_gate_answers_exactly_as_the_ungated_server(stream):
    """gates.modes.<gate>=shadow: the gates decide on every turn (a skip and a continue, forced) and the decisions
    are recorded (toolwise.decisions with mode shadow, the decision header, toolwise_shadow_decisions_total), but
    none is acted on: the same requests get the ungated server's responses, with the same upstream requests, and a
    stream is not held back."""
    answered = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"x": 0}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": '{"result": 42}'}]
    requests = [QUESTION, answered, QUESTION]

    def run(gates, *overrides) -> tuple[list, list, list, str]:
        with Endpoint(gates, None, *overrides) as ep:
            got, decisions = [], []
            for messages in requests:
                if stream:
                    msg, _, tw = collect(ep.client.chat.completions.create(
                        model="scripted", messages=messages, tools=TOOLS, stream=True))
                    got.append(msg)
                else:
                    raw = ep.client.chat.completions.with_raw_response.create(model="scripted", messages=messages,
                                                                               tools=TOOLS)
                    out = raw.parse()
                    tw = out.model_extra["toolwise"]
                    got.append(out.model_dump(exclude={"created", "toolwise"}))
                    assert json.loads(raw.headers["x-toolwise-decisions"]) == [
                        {k: v for k, v in d.items() if k in ("gate", "action", "applied", "round", "call_id",
                                                             "mode")} | {"p": round(d["probability"], 4),
                                                                          "tau": d["tau"]}
                        for d in tw["decisions"]]
                decisions.append([(d["gate"], d["action"], d["applied"], d.get("mode")) for d in tw["decisions"]])
                assert tw["injected"] == [] and tw["upstream_calls"] == 1
            return got, decisions, list(ep.fake.requests), httpx.get(f"{ep.url}/metrics").text

    plain, none, plain_upstream, _ = run(None)
    shadowed = ForcedGates(tool_actions=["skip"] * 3, answer_actions=["continue"] * 3)
    shadow, decided, shadow_upstream, metrics = run(shadowed, "gates.modes.toolgate=shadow",
                                                    "gates.modes.g_step=shadow")
    assert shadow == plain and none == [[], [], []]
    assert [{k: v for k, v in r.items() if k != "logprobs"} for r in shadow_upstream] == \
        [{k: v for k, v in r.items() if k != "logprobs"} for r in plain_upstream]
    assert decided == [[("toolgate", "skip", "execute", "shadow")], [("g_step", "continue", "commit", "shadow")],
                       [("toolgate", "skip", "execute", "shadow")]]
    assert 'toolwise_shadow_decisions_total{action="skip",gate="toolgate"} 2.0' in metrics
    assert 'toolwise_shadow_decisions_total{action="continue",gate="g_step"} 1.0' in metrics
    assert 'toolwise_skipped_calls_total 0.0' in metrics and 'toolwise_continues_total 0.0' in metrics
