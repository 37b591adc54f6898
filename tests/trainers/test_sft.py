"""recipe=tool_sft on a tiny random Llama: data hygiene, loss masking, and a few real optimizer steps."""
from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from data_builders.backends.fingerprint import adapter_digest
from recipes import compose
from trainers.recipe import RunInfo


def composed(tmp_path, model_dir, *overrides, tasks=("tasks.n_per_cell=1",)):
    """The fit config as ``python -m trainers.fit recipe=tool_sft model=hf model.name=<dir> ...`` composes it
    (one built-in train task per cell unless ``tasks`` says otherwise), and the run state trainers.fit would pass."""
    cfg = compose("fit", ["recipe=tool_sft", "model=hf", f"model.name={model_dir}", "logger=none",
                          f"recipe.output_dir={tmp_path / 'adapter'}", *tasks, *overrides])
    return cfg, RunInfo(dir=tmp_path / "run", command="pytest")


def test_masks_cover_assistant_turns_only(tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from trainers.policy.sft import build_data

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    data = build_data(composed(tmp_path, tiny_model_dir)[0], tok)
    assert len(data.train) > 0 and len(data.val) > 0
    assert not set(data.train["task_id"]) & set(data.val["task_id"])  # split by task
    for row in data.train.select(range(min(10, len(data.train)))):
        ids, mask = row["input_ids"], row["assistant_masks"]
        learned = tok.decode([i for i, m in zip(ids, mask) if m])
        assert "<|im_end|>" in learned and "\\boxed{" in learned
        assert "<tool_response>" not in learned and "Response policy" not in learned
        assert ("<tool_call>" in learned) == (row["kind"] == "tool")
    assert {"tool", "direct"} <= set(data.train["kind"]) | set(data.val["kind"])
    # v2 mixture: direct answers where the prompt says no tools (any difficulty) and in default mode (easy only)
    direct = data.train.filter(lambda r: r["kind"] == "direct")
    assert set(direct["mode"]) == {"no_tool", "hard_no_tool", "default"}
    assert set(direct.filter(lambda r: r["mode"] == "default")["difficulty"]) == {"easy"}
    assert {"medium", "hard"} <= set(direct.filter(lambda r: r["mode"] != "default")["difficulty"])
    assert set(data.train.filter(lambda r: r["kind"] == "tool")["mode"]) == {"default", "force"}
    # one prompt, one reply: a task answered directly in default mode is demonstrated with a call in force only
    default_direct = set(direct.filter(lambda r: r["mode"] == "default")["task_id"])
    tool_default = set(data.train.filter(lambda r: r["kind"] == "tool" and r["mode"] == "default")["task_id"])
    assert default_direct and not default_direct & tool_default
    assert data.stats["train_kind_mode"]["direct:default"] == len(default_direct)


@pytest.mark.slow
def test_a_few_steps_train_the_models_own_adapter_and_write_a_model_card(tiny_model_dir, tmp_path):
    from trainers.policy.sft import fit

    cfg, run = composed(tmp_path, tiny_model_dir, "recipe.train.max_steps=2",
                        "recipe.train.gradient_accumulation_steps=1", "recipe.train.eval_steps=2")
    fitted = fit(cfg.recipe, cfg, run)
    out = fitted.export_dir
    weights = load_file(str(out / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # B starts at zero: nonzero means it trained
    # the base is the model group's (the tiny Llama), not the embedded SmolLM2
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    card = ModelCard.load(out / "README.md")
    assert card.data.base_model == str(tiny_model_dir) and "sft" in card.data.tags
    assert "Reproduce: `pytest`" in card.text and '"train_rows"' in card.text and "SmolLM2" not in card.text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 2 and metrics["eval_loss"] > 0
    assert fitted.objective_name == "eval_loss" and fitted.objective == metrics["eval_loss"]
    # the export is the adapter and its papers; optimizer state never goes there
    assert {f.name for f in out.iterdir()} == {"adapter_config.json", "adapter_model.safetensors", "README.md",
                                               "metrics.json", "train_config.yaml"}


@pytest.mark.slow
def test_it_trains_on_the_train_tasks_of_the_tasks_group(tiny_model_dir, tmp_path):
    """``python -m trainers.fit recipe=tool_sft tasks=when2tool tasks.path=<dir> recipe.train.max_steps=1``: the
    tasks group is honoured (it was composed, then ignored for recipe.data's built-in tasks), test tasks never used."""
    from tests.recipes.test_configs import write_when2tool_dir
    from trainers.policy.sft import fit

    w2t = write_when2tool_dir(tmp_path / "w2t", train_ids=(11001, 11002, 11003), test_ids=(11901, 11902))
    cfg, run = composed(tmp_path, tiny_model_dir, "recipe.train.max_steps=1", tasks=("tasks=when2tool",
                                                                                     f"tasks.path={w2t}"))
    metrics = json.loads((fit(cfg.recipe, cfg, run).export_dir / "metrics.json").read_text())
    assert sorted(metrics["task_ids"]) == ["11001", "11002", "11003", "161001"]   # When2Tool's train files only
    assert metrics["train_steps"] == 1 and set(metrics["data"]["train_env"]) == {"CalculatorEnv"}


@pytest.mark.slow
def test_loading_the_adapter_gives_a_different_policy(tiny_model_dir, tmp_path):
    from data_builders.backends.loading import load_backend
    from trainers.policy.sft import fit

    cfg, run = composed(tmp_path, tiny_model_dir, "recipe.train.max_steps=2",
                        "recipe.train.gradient_accumulation_steps=1", "recipe.train.learning_rate=0.05",
                        "recipe.data.val_fraction=0")
    fitted = fit(cfg.recipe, cfg, run)
    assert fitted.objective_name == "train_loss" and fitted.objective > 0   # no validation split
    out = fitted.export_dir
    bare = load_backend(str(tiny_model_dir))
    tuned = load_backend(str(tiny_model_dir), adapter=str(out))
    assert tuned.fingerprint == f"{bare.fingerprint}+adapter:{adapter_digest(out)}"
    p = dict(bare.model.named_parameters())
    changed = [n for n, w in tuned.model.named_parameters() if not (w == p[n]).all()]
    assert changed, "merged adapter left every weight unchanged"


# ---------------------------------------------------------------------------- precision and placement
def test_precision_and_checkpointing_come_from_the_recipe_in_both_policy_recipes(tmp_path):
    from trl import GRPOConfig, SFTConfig

    from trainers.policy.common import Policy, trainer_args

    on_cpu = Policy(model=None, tokenizer=None, base_id="base", start_adapter=None, use_cpu=True)
    run = RunInfo(dir=tmp_path / "run", command="pytest")
    # as before they were settings: TRL's bf16 default (autocast, on the CPU too), no gradient checkpointing
    shipped = {"tool_sft": (True, False, False), "pte_grpo": (True, False, False)}
    for recipe, config in (("tool_sft", SFTConfig), ("pte_grpo", GRPOConfig)):
        t = compose("fit", [f"recipe={recipe}"]).recipe.train
        args = trainer_args(run, tmp_path / "export", t, on_cpu)
        assert (args["bf16"], args["fp16"], args["gradient_checkpointing"]) == shipped[recipe], recipe
        built = config(**args)                        # TRL accepts them as the recipe ships them (on the CPU)
        assert (built.bf16, built.gradient_checkpointing) == shipped[recipe][::2]
        t = compose("fit", [f"recipe={recipe}", "recipe.train.bf16=false", "recipe.train.gradient_checkpointing=true"]
                    ).recipe.train
        args = trainer_args(run, tmp_path / "export", t, on_cpu)
        assert (args["bf16"], args["gradient_checkpointing"]) == (False, True)
        both = compose("fit", [f"recipe={recipe}", "recipe.train.bf16=true", "recipe.train.fp16=true"]).recipe.train
        with pytest.raises(ValueError, match="bf16 and fp16 are both true"):
            trainer_args(run, tmp_path / "export", both, on_cpu)


def test_the_policy_loads_in_the_resolved_model_dtype_and_device(tiny_model_dir, tmp_path):
    import torch

    from data_builders.backends.loading import resolve_dtype
    from trainers.policy.common import load_policy

    assert compose("fit", ["recipe=tool_sft"]).model.dtype == "auto"
    assert resolve_dtype("auto", "cpu") == "float32" and resolve_dtype("bfloat16", "cpu") == "bfloat16"
    with pytest.raises(ValueError, match="model.dtype='fp8': choose auto or one of float32, bfloat16, float16"):
        resolve_dtype("fp8")
    cfg, _ = composed(tmp_path, tiny_model_dir, "model.device=cpu")
    policy = load_policy(cfg.model, cfg.recipe.lora)                  # auto on the CPU: float32, as before
    assert policy.use_cpu and policy.model.get_base_model().dtype == torch.float32
    cfg, _ = composed(tmp_path, tiny_model_dir, "model.device=cpu", "model.dtype=bfloat16")
    assert load_policy(cfg.model, cfg.recipe.lora).model.get_base_model().dtype == torch.bfloat16
    if not torch.cuda.is_available():
        cfg, _ = composed(tmp_path, tiny_model_dir, "model.device=cuda:1")
        with pytest.raises(ValueError, match="model.device=cuda:1: no CUDA device is visible"):
            load_policy(cfg.model, cfg.recipe.lora)
