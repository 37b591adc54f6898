"""What the two policy recipes (``tool_sft``, ``pte_grpo``) share, so they read as the same script:

- ``load_policy``: the policy named by the ``model`` group (``cfg.model``) as a trainable peft model: the
  start adapter (``model.adapter``) loaded trainable, or a fresh LoRA from ``recipe.lora``;
- ``trainer_args``: the TRL arguments both recipes set the same way (trainer state with the run's outputs,
  tracking, device, precision, gradient checkpointing, schedule);
- ``train_tasks``: the train split of the ``tasks`` group, the task selection every command reads;
- ``train``: the timed ``trainer.train()`` and its summary metrics;
- ``export_adapter``: the adapter, its metrics, the resolved config and a Hugging Face model card.

Under ``accelerate launch`` (``recipes/accelerate/``) every rank runs the recipe: ``shared_run`` starts the process
group and gives every rank rank 0's run and export directories; ``export_adapter`` gathers the weights on every
rank (ZeRO-3/FSDP shard them) and rank 0 alone writes.
"""
from __future__ import annotations

import json
import re
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list
from huggingface_hub import ModelCard, ModelCardData
from omegaconf import DictConfig, OmegaConf
from peft import PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig, get_peft_config

from data_builders.backends.loading import (EMBEDDED_ALIASES, EMBEDDED_ID, model_directory, resolve_adapter,
                                            resolve_device, resolve_dtype)
from data_builders.tasks import Task, tasks_from_config
from trainers.recipe import RunInfo
from trainers.tracking import set_run_group


# ---------------------------------------------------------------------------- the policy
@dataclass
class Policy:
    model: PeftModel              # the base with one trainable LoRA adapter ("default")
    tokenizer: Any
    base_id: str                  # what cards and adapter_config.json name as the base: hub id or the path given
    start_adapter: str | None     # ``model.adapter`` as given; None: a fresh LoRA from ``recipe.lora``
    use_cpu: bool                 # the resolved ``model.device`` is the CPU (else accelerate places it on a GPU)
    path: str | None = None       # the local directory the base and tokenizer were loaded from


def base_model_id(model: DictConfig) -> str:
    """The base as a reader can find it: the hub id of the embedded default, else the name (and GGUF file)
    the user gave, never a cache path of this machine."""
    if model.name in EMBEDDED_ALIASES:
        return EMBEDDED_ID
    return str(Path(model.name) / model.gguf_file) if model.gguf_file else str(model.name)


def lora_config(lora: DictConfig):
    """A fresh LoRA from ``recipe.lora`` (r, alpha, dropout, target_modules) via TRL's own mapping."""
    targets = lora.target_modules
    targets = targets if isinstance(targets, str) else list(targets)
    args = ModelConfig(use_peft=True, lora_r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                       lora_target_modules=targets)
    # ModelConfig unwraps a one-element list into a string (for its CLI), which peft would read as a regex
    # that must match a module's full name; keep the list the recipe wrote.
    args.lora_target_modules = targets
    return get_peft_config(args)


def place(device: str) -> bool:
    """Where the trainer runs, from ``model.device``; True for the CPU (TRL's ``use_cpu``).

    The trainer moves the model itself (to accelerate's device), so placement is chosen here, not by ``.to()``.
    Under ``accelerate launch`` (``WORLD_SIZE`` > 1) accelerate gives each process its own GPU (its local rank):
    only ``cpu`` is honoured then, and a ``cuda:N`` is left to the launcher. In one process ``cuda:N`` becomes
    the current CUDA device, which accelerate's ``cuda`` device means."""
    device = resolve_device(device)
    kind = torch.device(device).type
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"model.device={device}: no CUDA device is visible to this process")
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"model.device={device}: choose auto, cpu, cuda or cuda:N")
    if kind == "cuda" and torch.device(device).index is not None and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        torch.cuda.set_device(torch.device(device))
    return kind == "cpu"


def load_policy(model: DictConfig, lora: DictConfig) -> Policy:
    """The base of the ``model`` group (embedded alias → its cached safetensors copy; a GGUF file → a
    de-quantized copy, as every backend loads it) with ``model.adapter`` loaded *trainable*, or a fresh
    LoRA from ``lora`` when the group has no adapter. Weights in ``model.dtype`` resolved for ``model.device``
    (``auto``: bf16 on a GPU with native bf16, fp32 on the CPU), as the backends load them."""
    use_cpu = place(model.device)
    dtype = resolve_dtype(model.dtype, "cpu" if use_cpu else "cuda")
    path, _ = model_directory(model.name, gguf_file=model.gguf_file, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    base = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    start = resolve_adapter(model.adapter)
    peft_model = (PeftModel.from_pretrained(base, start, is_trainable=True) if start
                  else get_peft_model(base, lora_config(lora)))
    base_id = base_model_id(model)
    # peft records the path the weights were read from (the embedded model's cache directory) or, for a
    # start adapter, whatever base that adapter recorded; the export names the real base instead.
    peft_model.peft_config["default"].base_model_name_or_path = base_id
    return Policy(peft_model, tokenizer, base_id, model.adapter or None, use_cpu=use_cpu, path=str(path))


# ---------------------------------------------------------------------------- processes
def shared_run(run: RunInfo, export_dir: Path, cfg: DictConfig, *, use_cpu: bool) -> tuple[RunInfo, Path]:
    """Starts accelerate's process state (the one TRL's trainer then uses; gloo on the CPU) and returns rank 0's
    run directory and export directory on every rank. Each rank composed its own config, so timestamped
    directories (``${now:...}``) can differ by a second between ranks; rank 0's are the run's. Also names the
    W&B group every rank reports to (``set_run_group``). One process: the arguments unchanged."""
    state = PartialState(cpu=use_cpu)
    if state.num_processes > 1:
        paths = [str(run.dir), str(export_dir)]
        broadcast_object_list(paths, from_process=0)
        run, export_dir = replace(run, dir=Path(paths[0])), Path(paths[1])
    set_run_group(cfg, export_dir.name)
    return run, export_dir


# ---------------------------------------------------------------------------- trainer arguments
def trainer_args(run: RunInfo, export_dir: Path, train: DictConfig, policy: Policy) -> dict:
    """The ``SFTConfig``/``GRPOConfig`` fields both recipes set alike; ``recipe.train`` names them as TRL does
    and they pass through. Optimizer and scheduler state stay with the run's outputs (``run.dir``); the export
    holds the adapter only. ``train.bf16``/``train.fp16``: mixed-precision autocast of the update (over weights in
    ``model.dtype``); ``train.gradient_checkpointing``: recompute activations in backward (less memory, more
    compute); ``train.warmup_steps``: steps, or a float in [0, 1) as a ratio of the total steps."""
    if train.bf16 and train.fp16:
        raise ValueError("recipe.train: bf16 and fp16 are both true; choose one mixed precision")
    return dict(output_dir=str(run.dir / "trainer_state"), run_name=export_dir.name, report_to=list(run.report_to),
                seed=train.seed, max_steps=train.max_steps, learning_rate=train.learning_rate,
                lr_scheduler_type=train.lr_scheduler_type, warmup_steps=train.warmup_steps,
                use_cpu=policy.use_cpu, save_strategy="no",
                bf16=train.bf16, fp16=train.fp16, gradient_checkpointing=train.gradient_checkpointing,
                # DDP: every trainable (LoRA) weight is used in each forward (frozen ones are not trainable), so
                # skip DDP's per-step search for unused parameters, which transformers turns on for peft models
                ddp_find_unused_parameters=False,
                dataloader_num_workers=0, disable_tqdm=False)


# ---------------------------------------------------------------------------- data
def train_tasks(cfg: DictConfig) -> list[Task]:
    """Train tasks only: the train split of the run's ``tasks`` group (``tasks=when2tool tasks.path=<dir>``,
    ``tasks=mixture``, ...), as every command selects its tasks; a selection of no task is an error naming
    the filters. Test tasks never enter policy training."""
    return tasks_from_config(cfg, split="train")


# ---------------------------------------------------------------------------- train
def train(trainer) -> dict:
    """Runs the trainer; returns the metrics every policy export reports."""
    start = time.perf_counter()
    result = trainer.train()
    return {"train_loss": result.training_loss, "train_steps": result.global_step,
            "train_runtime_s": round(time.perf_counter() - start, 1)}


# ---------------------------------------------------------------------------- export
def adapter_card(*, recipe: DictConfig, cfg: DictConfig, run: RunInfo, policy: Policy, tags: list[str], body: str,
                 data_stats: dict, metrics: dict) -> ModelCard:
    """The model card of a policy adapter: hub metadata naming the real base model, what the recipe did
    (``body``), how to reproduce and load it, its data, config and metrics."""
    data = ModelCardData(library_name="peft", base_model=policy.base_id,
                         tags=["toolwise", "tool-use", "lora", "trl", *tags])
    config = OmegaConf.to_yaml({"model": OmegaConf.to_container(cfg.model, resolve=True),
                                "recipe": OmegaConf.to_container(recipe, resolve=True)})
    start = f"`{policy.start_adapter}` (trained further)" if policy.start_adapter else "a fresh LoRA"
    return ModelCard(f"""---
{data.to_yaml()}
---

# toolwise {recipe.name} adapter

LoRA adapter for `{policy.base_id}`, starting from {start}.

{body.strip()}

Reproduce: `{run.command}`

Load: `model=hf model.name={cfg.model.name} model.adapter=<this directory>` in any toolwise config.

## Data
```json
{json.dumps(data_stats, indent=2, default=str)}
```

## Config
```yaml
{config}```

## Metrics
```json
{json.dumps(metrics, indent=2, default=str)}
```
""")


def export_adapter(trainer, export_dir: Path, card: ModelCard, cfg: DictConfig, metrics: dict) -> None:
    """``adapter_config.json`` + ``adapter_model.safetensors`` (no base weights), ``README.md`` (the card),
    ``metrics.json`` and the resolved config ``train_config.yaml``.

    Every rank must call it: the full state dict is a collective under ZeRO-3 and FSDP (accelerate gathers the
    shards; a no-op copy otherwise). Rank 0 alone writes; the others wait until it has, so no rank exits (and
    tears the process group down) while rank 0 still saves."""
    accelerator = trainer.accelerator
    state_dict = accelerator.get_state_dict(trainer.model_wrapped)
    if accelerator.is_main_process:
        export_dir.mkdir(parents=True, exist_ok=True)
        model: PeftModel = accelerator.unwrap_model(trainer.model)
        # peft picks the adapter's tensors out of the full state dict and writes only those; only the trained one
        # (TRL DPO adds a frozen "ref" copy, which peft would write to a subdirectory)
        model.save_pretrained(str(export_dir), state_dict=state_dict, selected_adapters=["default"])
        _write_papers(export_dir, card, cfg, metrics)
    accelerator.wait_for_everyone()


def _write_papers(export_dir: Path, card: ModelCard, cfg: DictConfig, metrics: dict) -> None:
    card.save(export_dir / "README.md")
    (export_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    (export_dir / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))


def freeze_lower_layers(model, top: int | None, adapter: str = "default") -> int:
    """Train only the LoRA weights of the top ``top`` decoder layers (None: all). Autograd then stops
    below the lowest trainable layer, which removes most of the backward pass: on 2 CPU cores the policy
    update, a forward and backward over every episode's whole context (~900 tokens), not generation, is
    the dominant cost of a GRPO or DPO step. Returns the number of trainable tensors."""
    n_layers = model.config.num_hidden_layers
    lowest = 0 if top is None else max(n_layers - int(top), 0)
    trainable = 0
    for name, p in model.named_parameters():
        if "lora_" not in name or f".{adapter}." not in name:    # another adapter (TRL DPO's frozen "ref")
            continue
        m = re.search(r"\.layers\.(\d+)\.", name)
        p.requires_grad = m is None or int(m.group(1)) >= lowest
        trainable += int(p.requires_grad)
    if not trainable:
        raise ValueError(f"train.trainable_layers={top} leaves no LoRA weight trainable")
    return trainable
