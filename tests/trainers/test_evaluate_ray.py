"""``trainers.evaluate`` with ``executor=ray`` gives the metrics of ``executor=local``: a prompt-mode arm, Probe&Prefill
(its prefill arms and the probe-probability pass) and G-STEP (a controller hook that loads in the worker), on a
tiny random Llama, the arms cut into shards of 2 tasks over 2 workers. One local Ray cluster (2 CPUs)."""
from __future__ import annotations

import logging

import pytest
import torch
from omegaconf import OmegaConf

from controllers import GStepMLP, LinearProbe, make_contract
from data_builders.backends.loading import backend_from_config
from data_builders.gates import gate_of_kind
from data_builders.features.gstep import N_FEATURES
from recipes import compose
from trainers.evaluate.run import run

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield
    ray.shutdown()


def eval_cfg(tiny_model_dir, tmp_path, name, *over):
    return compose("evaluate", ["logger=none", "tasks=builtin", "tasks.n_per_cell=1", "limit=4", "model=hf",
                                f"model.name={tiny_model_dir}", f"cache_dir={tmp_path / name / 'cache'}",
                                f"out_dir={tmp_path / name / 'out'}", "agent.max_rounds=2", "agent.max_new_tokens=8",
                                "arms.modes=[default]", "arms.toolgate=null", "arms.cascade=false", *over])


@pytest.fixture()
def checkpoints(tiny_model_dir, tmp_path):
    cfg = eval_cfg(tiny_model_dir, tmp_path, "x")
    engine = backend_from_config(cfg.model, cfg.backend)
    policy, n_states = engine.fingerprint, engine.n_layers + 1
    torch.manual_seed(0)
    probe = LinearProbe(contract=make_contract(gate_of_kind("probe").featurizer.id, policy, [n_states, 64]), tau=0.5)
    gstep = GStepMLP(contract=make_contract(gate_of_kind("commit").featurizer.id, policy, [N_FEATURES]), tau=0.5, hidden=4, depth=1)
    out = {}
    for name, c in (("probe", probe), ("g_step", gstep)):
        c.save_pretrained(tmp_path / name)
        out[name] = str(tmp_path / name)
    return {"probe_prefill": {"checkpoint": out["probe"], "styles": ["soft"], "taus": [0.3, "calibrated"]},
            "g_step": {"checkpoint": out["g_step"], "taus": ["calibrated"]}}


def metrics(results):
    """Every metric of every arm, less the wall-clock latency."""
    arms = OmegaConf.to_container(OmegaConf.create(results["arms"]))
    for groups in arms.values():
        for m in groups.values():
            m.pop("latency_s_per_task", None)
    return arms


@pytest.mark.slow
def test_ray_evaluation_equals_local(cluster, tiny_model_dir, tmp_path, checkpoints):
    local = run(OmegaConf.merge(eval_cfg(tiny_model_dir, tmp_path, "local"), {"arms": checkpoints}))
    distributed = run(OmegaConf.merge(eval_cfg(tiny_model_dir, tmp_path, "ray", "executor=ray", "executor.workers=2",
                                               "executor.shard_size=2"), {"arms": checkpoints}))
    assert set(local["arms"]) == {"default", "probe_soft@0.30", "probe_soft@0.50", "g_step@0.50"}
    assert metrics(distributed) == metrics(local)
    for key in ("tasks", "policy", "backend", "gamma", "decoding", "deltas", "curves"):
        assert distributed[key] == local[key], key
    assert distributed["cache"]["misses"] == local["cache"]["misses"] == 4 * 4   # 4 rollout arms x 4 tasks
    assert (tmp_path / "ray" / "out" / "results.json").exists()
