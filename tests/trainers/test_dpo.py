"""recipe=tool_dpo: pairs from the policy's probe points, and a tiny-model run of TRL's DPOTrainer on them."""
from __future__ import annotations

import json

import pytest

from recipes import compose
from trainers.recipe import RunInfo


def test_the_recipe_is_registered_and_composes():
    from trainers.fit import resolve
    from trainers.policy import dpo

    assert resolve("tool_dpo") is dpo.fit
    cfg = compose("fit", ["recipe=tool_dpo"])
    # the start policy: the model group's committed tool_sft adapter; pairs from the train split's probe points
    assert cfg.model.adapter.startswith("checkpoints/tool_sft/") and list(cfg.recipe.points.build.splits) == ["train"]
    assert cfg.recipe.train.beta == 0.1


def probe_points(directory, tasks):
    """A probe dataset by hand: the first half of the tasks answered right without a tool (label 0), the rest
    wrong (label 1); one in four in the val split."""
    import torch

    from data_builders.gates import gate_of_kind
    from data_builders.points.store import PointStore

    gate = gate_of_kind("probe")
    store = PointStore(directory, {"kind": "probe", "task_hash": "h", "backend": "tiny", "shard_size": len(tasks),
                                   "featurizer": gate.featurizer.id, "label_rule": "r", "builder": {}})
    rows = []
    for k, task in enumerate(tasks):
        right = k < len(tasks) // 2
        rows.append({"point_id": str(task.id), "task_id": str(task.id), "split": "val" if k % 4 == 3 else "train",
                     "env": task.env.name, "category": task.category, "difficulty": task.difficulty,
                     "multi_step": task.multi_step, "label": int(not right),
                     "no_tool_answer": f"\\boxed{{{task.answer if right else 'no idea'}}}"})
    store.write_shard(0, rows, {"hidden": torch.zeros(len(rows), 3, 8)})
    store.finalize({"points": len(rows)})
    return rows


@pytest.mark.slow
def test_tool_dpo_trains_the_start_adapter_on_pairs_from_the_probe_labels(tiny_model_dir, tmp_path):
    import torch
    from huggingface_hub import ModelCard
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from data_builders.tasks import tasks_from_config
    from trainers.policy.dpo import fit

    torch.manual_seed(1)
    start = tmp_path / "start"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                   LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)).save_pretrained(start)
    cfg = compose("fit", [
        "recipe=tool_dpo", "model=hf", f"model.name={tiny_model_dir}", f"model.adapter={start}", "logger=none",
        f"recipe.output_dir={tmp_path / 'adapter'}", f"recipe.points.dir={tmp_path / 'points'}",
        "tasks.n_per_cell=1", "tasks.envs=[CalculatorEnv,HashEnv]", "recipe.pairs.first_turn_tokens=8",
        "recipe.train.max_steps=2", "recipe.train.batch_size=2", "recipe.train.gradient_accumulation_steps=1",
        "recipe.train.learning_rate=0.01", "recipe.train.bf16=false"])
    rows = probe_points(tmp_path / "points", tasks_from_config(cfg, "train"))
    fitted = fit(cfg.recipe, cfg, RunInfo(dir=tmp_path / "run", command="pytest"))
    out = fitted.export_dir
    m = json.loads((out / "metrics.json").read_text())
    # every point gave a pair (the tiny model writes no call: the call side is the oracle's), split as its point
    n_val = sum(r["split"] == "val" for r in rows)
    assert m["pairs"] == {"train": len(rows) - n_val, "val": n_val} and m["left_out"] == {}
    comp = m["composition"]
    assert comp["answer_known"]["label"] == {"0": sum(r["label"] == 0 for r in rows)}
    assert comp["tool_needed"]["label"] == {"1": sum(r["label"] == 1 for r in rows)}
    assert comp["tool_needed"]["chosen_from"] == {"oracle": comp["tool_needed"]["pairs"]}
    assert m["train_steps"] == 2 and "eval_loss" in m and fitted.objective_name == "eval_loss"
    # the export continues the start adapter, with changed weights, and its card shows the composition
    before = load_file(str(start / "adapter_model.safetensors"))
    after = load_file(str(out / "adapter_model.safetensors"))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    card = ModelCard.load(out / "README.md")
    assert "dpo" in card.data.tags and '"answer_known"' in card.text and "Reproduce: `pytest`" in card.text
