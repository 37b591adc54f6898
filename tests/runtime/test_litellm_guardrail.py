"""The gates as a LiteLLM guardrail (runtime/litellm_guardrail.py): a real ``litellm`` proxy process started with a
``guardrails:`` config in front of the scripted upstream, driven with the official ``openai`` client. Skips
without ``.[litellm]``."""
from __future__ import annotations

import contextlib
import json
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
from runtime.serve.testing import ScriptedUpstream, free_port, serve_in_thread  # noqa: E402

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
