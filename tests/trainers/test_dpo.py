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


def flip_points(directory, tasks, backend="tiny"):
    """A flip dataset by hand, the state columns as a flip build writes them: a harmful call, a helpful call of a
    right episode (label 1) and an unchanged one (no preference), cycling over the tasks."""
    import torch

    from data_builders.agent.prompts import tool_call_text
    from data_builders.gates import gate_of_kind
    from data_builders.points.preferences import flip_state_columns
    from data_builders.points.store import PointStore

    gate = gate_of_kind("flip")
    store = PointStore(directory, {"kind": "flip", "task_hash": "h", "backend": backend, "shard_size": len(tasks),
                                   "featurizer": gate.featurizer.id, "label_rule": "r", "builder": {}})
    rows = []
    for k, task in enumerate(tasks):
        flip = ("harmful", "helpful", "unchanged")[k % 3]
        state = flip_state_columns([{"role": "user", "content": task.instruction}],
                                   tool_call_text("evaluate_expression", {"expression": "1+1"}, "xml"),
                                   f"\\boxed{{{task.answer}}}")
        rows.append({"point_id": f"{task.id}:0", "task_id": str(task.id), "split": "train", "env": task.env.name,
                     "category": task.category, "difficulty": task.difficulty, "multi_step": task.multi_step,
                     "label": int(flip == "helpful"), "flip_class": flip} | state)
    store.write_shard(0, rows, {"embedding": torch.zeros(len(rows), 4), "structural": torch.zeros(len(rows), 2)})
    store.finalize({"points": len(rows)})
    return rows


def test_flip_points_of_another_policy_are_refused(tmp_path):
    from data_builders.tasks import tasks_from_config
    from trainers.policy.dpo import own_flip_points

    cfg = compose("fit", ["recipe=tool_dpo", "tasks.n_per_cell=1", "tasks.envs=[CalculatorEnv]"])
    rows = flip_points(tmp_path / "flip", tasks_from_config(cfg, "train"), backend="other")
    assert len(own_flip_points(str(tmp_path / "flip"), {"backend": "other"})) == len(rows)
    with pytest.raises(ValueError, match="flip_dir=.*backend other.*the probe points with tiny"):
        own_flip_points(str(tmp_path / "flip"), {"backend": "tiny"})


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
        f"recipe.pairs.flip_dir={tmp_path / 'flip'}", "recipe.pairs.categories=[answer_known,tool_needed,harmful_call]",
        "tasks.n_per_cell=1", "tasks.envs=[CalculatorEnv,HashEnv]", "recipe.pairs.first_turn_tokens=8",
        "recipe.train.max_steps=2", "recipe.train.batch_size=2", "recipe.train.gradient_accumulation_steps=1",
        "recipe.train.learning_rate=0.01", "recipe.train.bf16=false", "recipe.train.trainable_layers=1",
        "recipe.train.sft_weight=0.5"])
    rows = probe_points(tmp_path / "points", tasks_from_config(cfg, "train"))
    flips = flip_points(tmp_path / "flip", tasks_from_config(cfg, "train"))
    fitted = fit(cfg.recipe, cfg, RunInfo(dir=tmp_path / "run", command="pytest"))
    out = fitted.export_dir
    m = json.loads((out / "metrics.json").read_text())
    # every probe point gave a pair (the tiny model writes no call: the call side is the oracle's), split as its
    # point; every harmful flip point one more, the unchanged ones none, the helpful ones none here (their category
    # is not among recipe.pairs.categories)
    n_val = sum(r["split"] == "val" for r in rows)
    n_flip = {c: sum(r["flip_class"] == c for r in flips) for c in ("harmful", "helpful", "unchanged")}
    assert m["pairs"] == {"train": len(rows) - n_val + n_flip["harmful"], "val": n_val}
    assert m["left_out"] == {"flip: flip class unchanged (no preference)": n_flip["unchanged"],
                             "category helpful_call not in recipe.pairs.categories": n_flip["helpful"]}
    assert m["composition"]["harmful_call"]["pairs"] == n_flip["harmful"] and "helpful_call" not in m["composition"]
    comp = m["composition"]
    assert comp["answer_known"]["label"] == {"0": sum(r["label"] == 0 for r in rows)}
    assert comp["tool_needed"]["label"] == {"1": sum(r["label"] == 1 for r in rows)}
    assert comp["tool_needed"]["chosen_from"] == {"oracle": comp["tool_needed"]["pairs"]}
    assert m["train_steps"] == 2 and "eval_loss" in m and fitted.objective_name == "eval_loss"
    # the export continues the start adapter, with changed weights, and its card shows the composition
    before = load_file(str(start / "adapter_model.safetensors"))
    after = load_file(str(out / "adapter_model.safetensors"))
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    # only the top layer's LoRA trained (trainable_layers=1): backward stops there
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(".layers.1." in k for k in changed)
    assert not (out / "ref").exists()        # TRL's frozen reference copy is not part of the export
    card = ModelCard.load(out / "README.md")
    assert "dpo" in card.data.tags and '"answer_known"' in card.text and "Reproduce: `pytest`" in card.text
    assert "loss 1 × `sigmoid` + 0.5 × `sft`" in card.text


def test_an_sft_weight_adds_trls_nll_loss_on_the_preferred_side_beside_the_dpo_loss():
    from trainers.policy.config import DPOTrain
    from trainers.policy.dpo import losses

    assert losses(DPOTrain()) == (["sigmoid"], [1.0])
    assert losses(DPOTrain(loss_type="ipo", sft_weight=0.25)) == (["ipo", "sft"], [1.0, 0.25])
