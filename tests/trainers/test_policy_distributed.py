"""The policy recipes under ``accelerate launch`` (recipes/accelerate/cpu_2proc.yaml: 2 CPU processes, gloo).

tool_sft: the two ranks train on disjoint shards of each global batch, rank 0 alone exports, and the adapter is the
one-process adapter of the same global batch (1 conversation x 2 processes = 1 x grad_accum 2). pte_grpo: each rank
rolls out its own episodes, a GRPO group spans the two ranks, and the PTE normaliser and OTC's fewest-calls estimate
are the whole batch's on both ranks. The group-wide logic itself is checked without processes first.

The launches are the real command line (``accelerate launch ... -m trainers.fit``) in a subprocess.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

import trainers
from recipes import compose
from trainers.fit import rank_overrides
from trainers.policy.rewards import fewest_correct_calls, otc
from trainers.recipe import RunInfo

REPO = Path(trainers.__file__).resolve().parents[1]
EXPORT_FILES = {"adapter_config.json", "adapter_model.safetensors", "README.md", "metrics.json", "train_config.yaml"}


# ---------------------------------------------------------------------------- group-wide logic, no processes
def test_otc_uses_the_whole_groups_fewest_calls_when_a_group_spans_ranks():
    # 3 tasks x 2 generations = 6 episodes; rank 0 gets episodes 0-2, rank 1 gets 3-5: task b spans both ranks
    keys, correct, calls = ["a", "a", "b", "b", "c", "c"], [True, True, True, True, True, False], [2, 1, 2, 1, 0, 4]
    one_process = otc(None, None, correct, calls, keys)
    best = fewest_correct_calls(keys, correct, calls)
    assert best == {"a": 1, "b": 1, "c": 0}
    ranks = [slice(0, 3), slice(3, 6)]
    gathered = [r for s in ranks for r in otc(None, None, correct[s], calls[s], keys[s],
                                               otc_best=[best.get(k) for k in keys[s]])]
    assert gathered == pytest.approx(one_process)
    # the estimate from one rank's slice alone is wrong for the spanning group: rank 0 sees only task b's
    # 2-call episode, takes n = 2 and scores it 1 instead of below 1 (n = 1 on rank 1)
    local = [r for s in ranks for r in otc(None, None, correct[s], calls[s], keys[s])]
    assert local[2] == 1.0 and one_process[2] < 1.0 and local[3:] == pytest.approx(one_process[3:])
    with pytest.raises(ValueError, match="otc_best has 1 values for 2 episodes"):
        otc(None, None, [True, True], [1, 2], ["a", "a"], otc_best=[1])


def test_rollout_summary_and_batch_split():
    from trainers.policy.grpo import batch_summary, rank_batch

    rows = [dict(correct=True, tool_calls=2, pte=100.0, format_errors=0),
            dict(correct=False, tool_calls=0, pte=50.0, format_errors=1)]
    assert batch_summary(rows) == {"episodes": 2, "accuracy": 0.5, "tool_calls": 1.0, "pte": 75.0,
                                   "format_errors": 0.5}
    assert rank_batch(12, 1) == 12 and rank_batch(12, 4) == 3
    with pytest.raises(ValueError, match="12 episodes per step cannot be split evenly over 8 processes"):
        rank_batch(12, 8)


def test_only_a_launched_non_zero_rank_changes_hydra_settings(monkeypatch):
    for k in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE", "RANK"):
        monkeypatch.delenv(k, raising=False)
    assert rank_overrides([]) == []                                   # one process
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    assert rank_overrides([]) == []                                   # rank 0 writes the run's files
    monkeypatch.setenv("RANK", "1")
    assert rank_overrides(["recipe=tool_sft"]) == ["hydra.output_subdir=null", "hydra.job.name=fit_rank1"]
    assert rank_overrides(["hydra.job.name=mine"]) == []              # the user's (or a launcher's) choice wins


def test_server_mode_rolls_out_through_the_openai_backend_after_every_rank_has_the_weights(monkeypatch):
    from trl import GRPOConfig

    import trainers.policy.grpo as grpo

    events = []
    monkeypatch.setattr(grpo, "OpenAIBackend", lambda **kw: events.append(("backend", kw)) or "server backend")
    args = GRPOConfig(output_dir="unused", use_cpu=True, vllm_mode="server", vllm_server_host="10.1.2.3",
                      vllm_server_port=8123)
    trainer = SimpleNamespace(use_vllm=True, vllm_mode="server", args=args,
                              accelerator=SimpleNamespace(wait_for_everyone=lambda: events.append(("barrier",))))
    rollout = grpo.ToolRollout({}, None, agent={}, pte_cfg=None, normaliser="auto", model_id="m",
                               tokenizer_path="/models/base")
    with rollout.backend(trainer) as backend:
        assert backend == "server backend"
    assert events == [("barrier",), ("backend", {"base_url": "http://10.1.2.3:8123/v1", "tokenizer": "/models/base",
                                                 "vllm_extras": True})]
    args.vllm_server_base_url = "http://gpu-node:9000/"
    assert grpo.server_url(args) == "http://gpu-node:9000/v1"


def test_the_recipe_passes_the_server_address_to_trl():
    cfg = compose("fit", ["recipe=pte_grpo", "recipe.generation.use_vllm=true", "recipe.generation.vllm_mode=server",
                          "recipe.generation.vllm_server_port=8123"])
    g = cfg.recipe.generation
    assert (g.vllm_mode, g.vllm_server_host, g.vllm_server_port, g.vllm_server_base_url) == \
        ("server", "0.0.0.0", 8123, None)


# ---------------------------------------------------------------------------- 2 processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp_path: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file recipes/accelerate/cpu_2proc.yaml -m trainers.fit <overrides>``, run from
    ``tmp_path`` with this checkout's packages first on the path."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "recipes/accelerate/cpu_2proc.yaml"), "--main_process_port", str(free_port()),
           "-m", "trainers.fit", *overrides]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "offline",
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_PORT"):
        env.pop(k, None)
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done


def one_export(root: Path) -> Path:
    """The single export directory under ``root``, holding exactly the export files."""
    dirs = [p for p in root.rglob("adapter_config.json")]
    assert len(dirs) == 1, dirs
    assert {f.name for f in dirs[0].parent.iterdir()} == EXPORT_FILES
    return dirs[0].parent


@pytest.mark.slow
def test_tool_sft_on_two_processes_trains_disjoint_shards_and_exports_the_one_process_adapter(tiny_model_dir,
                                                                                            tmp_path):
    from transformers import AutoTokenizer

    from trainers.policy.sft import build_data, example_hash, fit

    common = ["recipe=tool_sft", "model=hf", f"model.name={tiny_model_dir}", "model.device=cpu", "logger=none",
              "tasks.n_per_cell=1", "recipe.data.val_fraction=0", "recipe.train.max_steps=3",
              "recipe.train.batch_size=1", "recipe.train.bf16=false", "recipe.train.learning_rate=1.0e-3",
              # no dropout: each rank draws its own dropout masks, which one process cannot reproduce
              "recipe.lora.dropout=0"]
    ddp = tmp_path / "ddp"
    ddp.mkdir()
    done = launch(ddp, *common, "recipe.train.gradient_accumulation_steps=1",
                  "recipe.output_dir=checkpoints/tool_sft/x", "hydra.run.dir=outputs/run",
                  "hydra.verbose=trainers.policy.sft")
    run_dir = ddp / "outputs/run"
    # rank 0 writes the run's record; rank 1 only its own log
    assert (run_dir / "recipe.yaml").is_file() and (run_dir / ".hydra").is_dir()
    assert (run_dir / "fit_rank1.log").is_file() and (run_dir / "fit.log").is_file()
    export = one_export(ddp / "checkpoints")
    assert re.findall(r"^objective train_loss=\S+$", done.stdout, re.M).__len__() == 2

    # each rank logged the examples it collated: disjoint shards of the train rows (3 steps; accelerate's
    # dataloader fetches one batch ahead, so a 4th may be logged without being trained on)
    seen = {r: re.findall(rf"rank {r} examples (\w+)", (run_dir / name).read_text())
            for r, name in ((0, "fit.log"), (1, "fit_rank1.log"))}
    assert 3 <= len(seen[0]) == len(seen[1]) <= 4, seen
    cfg = compose("fit", common)
    data = build_data(cfg, AutoTokenizer.from_pretrained(str(tiny_model_dir)))
    train_hashes = {example_hash(ids) for ids in data.train["input_ids"]}
    assert set(seen[0]) | set(seen[1]) <= train_hashes
    assert not set(seen[0]) & set(seen[1])

    # one process, same global batch (1 conversation x grad_accum 2), same seed: the same adapter
    cfg = compose("fit", [*common, "recipe.train.gradient_accumulation_steps=2",
                          f"recipe.output_dir={tmp_path / 'single'}"])
    single = fit(cfg.recipe, cfg, RunInfo(dir=tmp_path / "single_run", command="pytest")).export_dir
    a, b = load_file(str(single / "adapter_model.safetensors")), load_file(str(export / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    assert any(v.abs().sum() > 0 for k, v in b.items() if "lora_B" in k)        # it trained
    # tolerance: float32 sums of the two ranks' gradients in another order (DDP's all-reduce), over 3 Adam steps
    # of lr 1e-3 (measured: 5e-8). The loss is normalised by the token count of the whole global batch in both
    # runs (transformers' average_tokens_across_devices); a per-rank normalisation, or another global batch
    # (grad_accum 1 in one process: 2.5e-3), would be far outside it
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6, msg=k)
    card = (export / "README.md").read_text()
    assert card.count("# toolwise tool_sft adapter") == 1


@pytest.mark.slow
def test_pte_grpo_on_two_processes_rolls_out_per_rank_with_group_wide_normaliser_and_otc(tiny_model_dir, tmp_path):
    done = launch(tmp_path, "recipe=pte_grpo", "model=hf", f"model.name={tiny_model_dir}", "model.device=cpu",
                  "logger=none", "recipe.output_dir=checkpoints/pte_grpo/x", "hydra.run.dir=outputs/run",
                  "tasks.n_per_cell=1", "tasks.envs=[CalculatorEnv,HashEnv]",
                  "recipe.rollout.max_new_tokens=12", "recipe.rollout.max_rounds=2",
                  # 3 tasks x 2 episodes = 6 per step, 3 per rank: the second task's group spans both ranks
                  "recipe.generation.prompts_per_step=3", "recipe.generation.num_generations=2",
                  "recipe.train.micro_batch=3", "recipe.train.learning_rate=0.01", "recipe.train.max_steps=2",
                  "recipe.reward.kind=otc", "recipe.lora.target_modules=[q_proj,v_proj]")
    export = one_export(tmp_path / "checkpoints")
    m = json.loads((export / "metrics.json").read_text())
    assert m["train_steps"] == 2 and m["lora_tensors_changed"] > 0
    out = done.stdout + done.stderr
    lines = re.findall(r"rollout step (\d+) \(rank (\d): (\d+) episodes of (\[.*?\]), normaliser (\S+), "
                       r"otc n (\{.*?\})\): (\{.*\})", out)
    by_step: dict[int, dict[int, tuple]] = {}
    for step, rank, n, keys, norm, best, summary in lines:
        by_step.setdefault(int(step), {})[int(rank)] = (json.loads(keys), float(norm), json.loads(best),
                                                        json.loads(summary))
    assert sorted(by_step) == [0, 1] and all(sorted(r) == [0, 1] for r in by_step.values()), out[-4000:]
    for ranks in by_step.values():
        (keys0, norm0, best0, sum0), (keys1, norm1, best1, sum1) = ranks[0], ranks[1]
        # each rank rolled out its own 3 episodes; together 3 tasks x 2, one task's group on both ranks
        assert len(keys0) == len(keys1) == 3
        assert sorted(Counter(keys0 + keys1).values()) == [2, 2, 2] and len(set(keys0) & set(keys1)) == 1
        assert norm0 == norm1 and best0 == best1 and sum0 == sum1   # gathered: one value for the whole batch
        assert sum0["episodes"] == 6
    # the history in the export is the gathered one (6 episodes per batch), the normaliser the first batch's mean
    assert [h["episodes"] for h in m["rollouts"]] == [6, 6]
    assert m["pte_normaliser"] == pytest.approx(m["rollouts"][0]["pte"])
    assert m["pte_normaliser"] == pytest.approx(by_step[0][0][1], rel=1e-5)
