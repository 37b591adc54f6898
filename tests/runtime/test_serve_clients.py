"""The agent frameworks users put in front of the endpoint, end to end: openai-agents (``Runner.run``,
``Runner.run_streamed``) and LangChain (``ChatOpenAI.bind_tools`` with ``.invoke`` / ``.stream``) each end a tool
episode with a non-empty output, on the scripted upstream (with gates) and on ``upstream=local`` (the tiny policy in
process), including a tool_choice that names the call and a model whose call is malformed — the two ways a reply
used to come back with no content and no call. Skips without openai-agents / langchain-openai (``.[dev]``)."""
from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import recipes  # noqa: E402
from data_builders.agent.openai_messages import call_format_of  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.local import LocalUpstream  # noqa: E402
from runtime.serve.testing import ForcedGates, ScriptedUpstream, agent_reply, serve_in_thread  # noqa: E402

QUESTION = "What is 6*7? Use the calculator."


def malformed_then_agent(body: dict) -> dict:
    """The scripted policy, except that its first call comes out malformed (unquoted keys), as small models'
    calls sometimes do."""
    if not any(m["role"] in ("assistant", "tool") for m in body["messages"]) and body.get("tools"):
        return {"role": "assistant", "content": '<tool_call>\n{"name": calculator, arguments: {x: 6*7}}\n</tool_call>'}
    return agent_reply(body)


class Served:
    """The endpoint on a loopback port: in front of a scripted upstream (``backend`` None) or of the tiny policy."""

    def __init__(self, backend=None, gates=None, reply=agent_reply):
        self.backend, self.gates, self.fake = backend, gates, ScriptedUpstream(reply=reply)

    def __enter__(self) -> "Served":
        self._servers = []
        if self.backend is None:
            self._servers.append(serve_in_thread(self.fake.app))
            cfg = recipes.compose("serve", [f"upstream.base_url={self._servers[0].__enter__()}/v1"])
            upstream, self.model = Upstream.from_config(cfg.upstream), "scripted"
        else:
            cfg = recipes.compose("serve", ["upstream=local"])
            upstream = LocalUpstream(self.backend, call_format=call_format_of(self.backend.fingerprint),
                                     max_tokens=24, max_context=2048)
            self.model = self.backend.model_id
        self._servers.append(serve_in_thread(create_app(cfg, self.gates, upstream)))
        self.url = self._servers[-1].__enter__() + "/v1"
        return self

    def __exit__(self, *exc) -> None:
        for server in reversed(self._servers):
            server.__exit__(*exc)


@pytest.fixture(params=["scripted", "local"])
def served(request):
    """The endpoint: the scripted upstream behind forced gates (the first call of each of two requests skipped,
    then G-STEP's commit), or upstream=local."""
    if request.param == "scripted":
        with Served(gates=ForcedGates(tool_actions=["skip", "skip"])) as ep:     # a skip for each of two asks
            yield ep
    else:
        with Served(backend=request.getfixturevalue("tiny_backend")) as ep:
            yield ep


def run_agent(ep: Served, streamed: bool, tool_choice: str | None = None, max_tokens: int = 24) -> tuple[str, list]:
    """openai-agents' runner on the endpoint: (its final output, the calls its tool ran)."""
    pytest.importorskip("agents")
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    ran = []

    @function_tool
    def calculator(x: int) -> str:
        """Arithmetic."""
        ran.append(x)
        return json.dumps({"result": 42})

    client = openai.AsyncOpenAI(base_url=ep.url, api_key="unused-on-loopback", max_retries=0)
    agent = Agent(name="calc", instructions="Answer the question.", tools=[calculator],
                  model=OpenAIChatCompletionsModel(model=ep.model, openai_client=client),
                  model_settings=ModelSettings(tool_choice=tool_choice, max_tokens=max_tokens))

    async def run():
        if not streamed:
            return (await Runner.run(agent, QUESTION, max_turns=4)).final_output
        result = Runner.run_streamed(agent, QUESTION, max_turns=4)
        async for _ in result.stream_events():
            pass
        return result.final_output

    return asyncio.run(run()), ran


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_runner_ends_with_an_output(served, streamed):
    output, ran = run_agent(served, streamed)
    # the random tiny policy's reply may be all whitespace (here 24 newlines): what it wrote, never nothing
    assert isinstance(output, str) and output
    if served.backend is None:          # the call was skipped: the re-asked model answered, the tool never ran
        assert ran == [] and output.endswith("\\boxed{42}")


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_with_a_named_tool_choice_gets_that_call_on_the_local_policy(tiny_backend, streamed):
    """The tiny policy writes no call of its own: the named tool_choice's call is decoded under its grammar, the
    agent runs it (openai-agents then resets tool_choice) and the policy's next turn is the output."""
    pytest.importorskip("xgrammar")
    with Served(backend=tiny_backend) as ep:
        # room for the call's arguments: the random policy writes a long integer before the grammar closes it
        output, ran = run_agent(ep, streamed, tool_choice="calculator", max_tokens=128)
    assert len(ran) == 1 and isinstance(ran[0], int)
    assert isinstance(output, str) and output


@pytest.mark.slow
@pytest.mark.parametrize("streamed", [False, True])
def test_openai_agents_gets_a_malformed_call_as_text(streamed):
    with Served(reply=malformed_then_agent) as ep:
        output, ran = run_agent(ep, streamed)
    assert ran == [] and output.startswith("<tool_call>")


def chat_model(ep: Served, max_tokens: int = 24):
    pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def calculator(x: int) -> str:
        """Arithmetic."""
        return "42"

    model = ChatOpenAI(model=ep.model, base_url=ep.url, api_key="unused-on-loopback", max_retries=0,
                       max_tokens=max_tokens)
    return model, calculator


def said(message) -> bool:
    """A LangChain message with something in it: text, or a complete tool call."""
    text = message.content if isinstance(message.content, str) else "".join(map(str, message.content))
    return bool(text) or any(c["name"] for c in message.tool_calls)


@pytest.mark.slow
def test_langchain_invoke_and_stream_end_with_an_output(served):
    model, calculator = chat_model(served)
    bound = model.bind_tools([calculator])
    invoked = bound.invoke(QUESTION)
    streamed = None
    for chunk in bound.stream(QUESTION):
        streamed = chunk if streamed is None else streamed + chunk
    assert said(invoked) and said(streamed)
    if served.backend is None:          # the first call skipped, the re-asked model answered
        assert invoked.content.endswith("\\boxed{42}") and streamed.content.endswith("\\boxed{42}")


@pytest.mark.slow
def test_langchain_with_a_named_tool_choice_gets_that_call_on_the_local_policy(tiny_backend):
    pytest.importorskip("xgrammar")
    with Served(backend=tiny_backend) as ep:
        model, calculator = chat_model(ep, max_tokens=128)
        bound = model.bind_tools([calculator], tool_choice="calculator")
        invoked = bound.invoke(QUESTION)
        streamed = None
        for chunk in bound.stream(QUESTION):
            streamed = chunk if streamed is None else streamed + chunk
    for message in (invoked, streamed):
        [call] = message.tool_calls
        assert call["name"] == "calculator" and isinstance(call["args"].get("x"), int)
