"""recipe=tool_sft on a tiny random Llama: data hygiene, loss masking, and a few real optimizer steps."""
from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from safetensors.torch import load_file

from recipes import CONFIG_DIR


def recipe_cfg(tmp_path, model_dir, *overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("fit", overrides=["recipe=tool_sft", f"recipe.model={model_dir}",
                                        f"recipe.output_dir={tmp_path / 'adapter'}", "recipe.data.builtin_per_cell=1",
                                        *overrides])
    recipe = cfg.recipe
    OmegaConf.set_struct(recipe, False)
    recipe.report_to = []
    recipe.command = "pytest"
    return recipe


def test_masks_cover_assistant_turns_only(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from trainers.policy.sft import build_data

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    data = build_data(recipe_cfg(tmp_path, tiny_model_dir), tok)
    assert len(data.train) > 0 and len(data.val) > 0
    assert not set(data.train["task_id"]) & set(data.val["task_id"])  # split by task
    for row in data.train.select(range(min(10, len(data.train)))):
        ids, mask = row["input_ids"], row["assistant_masks"]
        learned = tok.decode([i for i, m in zip(ids, mask) if m])
        assert "<|im_end|>" in learned and "\\boxed{" in learned
        assert "<tool_response>" not in learned and "Response policy" not in learned
        assert ("<tool_call>" in learned) == (row["kind"] == "tool")
    assert {"tool", "direct"} <= set(data.train["kind"]) | set(data.val["kind"])
    assert set(data.train.filter(lambda r: r["kind"] == "direct")["mode"]) == {"no_tool"}


def test_a_few_steps_change_the_adapter_and_write_a_model_card(tiny_model_dir, tmp_path):
    from trainers.policy.sft import fit

    cfg = recipe_cfg(tmp_path, tiny_model_dir, "recipe.train.max_steps=3", "recipe.train.grad_accum=1",
                     "recipe.train.eval_steps=2")
    out = fit(cfg)
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # B starts at zero: nonzero means it trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 3 and metrics["eval_loss"] > 0
    card = (out / "README.md").read_text()
    assert "Reproduce: `pytest`" in card and '"train_rows"' in card


def test_loading_the_adapter_gives_a_different_policy(tiny_model_dir, tmp_path):
    from data_builders.backends.loading import load_backend
    from trainers.policy.sft import fit

    out = fit(recipe_cfg(tmp_path, tiny_model_dir, "recipe.train.max_steps=2", "recipe.train.grad_accum=1",
                         "recipe.train.lr=0.05", "recipe.data.val_fraction=0"))
    bare = load_backend(str(tiny_model_dir))
    tuned = load_backend(str(tiny_model_dir), adapter=str(out))
    assert tuned.fingerprint.endswith(f"+{out}") and bare.fingerprint != tuned.fingerprint
    p = dict(bare.model.named_parameters())
    changed = [n for n, w in tuned.model.named_parameters() if not (w == p[n]).all()]
    assert changed, "merged adapter left every weight unchanged"
