"""``recipe=tool_sft``: a tool-using default policy by TRL SFT + peft LoRA on oracle demonstrations.

Why: the bare SmolLM2-135M never calls tools and writes malformed calls when forced, so there is nothing
for a controller to gate. This recipe teaches the call format and reading results back, on oracle
trajectories of *train* tasks only (built-in generators, plus When2Tool's train files when a path is
given). Each task contributes one tool demonstration, rendered in a prompt mode drawn from
``data.tool_modes``; a seeded ``data.direct_fraction`` of the easy single-hop tasks also contributes a
direct ``\\boxed{gold}`` answer in ``no_tool`` mode, so the fine-tune keeps following "do not use tools".
A held-out share of the tasks (``data.val_fraction``, split by task so no task is in both) gives the
validation loss.
"""
from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class SFTData:
    train: Any   # datasets.Dataset with input_ids / assistant_masks (+ metadata columns)
    val: Any
    stats: dict


def demonstration_rows(cfg: DictConfig) -> tuple[list[dict], list[dict], Counter]:
    """Chat rows for train and validation tasks (split by task), and counts of what was made or dropped."""
    from data_builders.oracle.sft import build_examples
    from data_builders.tasks import load_tasks

    d = cfg.data
    tasks = load_tasks("builtin", split="train", n_per_cell=d.builtin_per_cell, seed=d.seed)
    if d.get("when2tool_path"):
        tasks += load_tasks("when2tool", split="train", path=d.when2tool_path, hops=d.get("hops", "both"),
                            per_cell=d.get("when2tool_per_cell"), sample_seed=d.seed)
    rng = random.Random(d.seed)
    order = list(range(len(tasks)))
    rng.shuffle(order)
    val_ids = {str(tasks[i].id) for i in order[:int(round(d.val_fraction * len(tasks)))]}
    # One pass over all tasks with one rng (mode draws, direct-answer draws), then split rows by task.
    rows, made = build_examples(tasks, modes=list(d.tool_modes), call_format=d.call_format,
                                direct_difficulties=list(d.direct_difficulties), direct_mode="no_tool",
                                direct_fraction=d.direct_fraction, rng=rng)
    parts: dict[str, list[dict]] = {"train": [], "val": []}
    for r in rows:
        parts["val" if r["task_id"] in val_ids else "train"].append(r)
    counts = Counter(f"{part}_{r['kind']}" for part, part_rows in parts.items() for r in part_rows)
    counts["dropped_no_teacher_answer"] = made["dropped_tool"]
    return parts["train"], parts["val"], counts


def tokenized(rows: list[dict], tokenizer, max_length: int, counts: Counter, part: str):
    from datasets import Dataset

    from trainers.policy.tokenization import ConversationTooLong, tokenize_conversation

    out = []
    for r in rows:
        try:
            enc = tokenize_conversation(tokenizer, r["messages"], r["tools"], max_length=max_length)
        except ConversationTooLong:
            counts[f"{part}_dropped_too_long"] += 1  # e.g. 13x13 2-D lists; truncating would cut the answer
            continue
        out.append({**enc, "env": r["env"], "difficulty": r["difficulty"], "kind": r["kind"], "mode": r["mode"],
                    "task_id": r["task_id"]})
    return Dataset.from_list(out)


def build_data(cfg: DictConfig, tokenizer) -> SFTData:
    train_rows, val_rows, counts = demonstration_rows(cfg)
    train = tokenized(train_rows, tokenizer, cfg.data.max_length, counts, "train")
    val = tokenized(val_rows, tokenizer, cfg.data.max_length, counts, "val")
    stats = dict(counts) | {
        "train_rows": len(train), "val_rows": len(val),
        "train_tokens": sum(len(x) for x in train["input_ids"]),
        "train_loss_tokens": sum(sum(m) for m in train["assistant_masks"]),
        "train_kind": dict(Counter(train["kind"])), "train_env": dict(Counter(train["env"])),
    }
    return SFTData(train, val, stats)


def model_card(cfg: DictConfig, stats: dict, metrics: dict, command: str, seconds: float) -> str:
    return f"""---
library_name: peft
base_model: HuggingFaceTB/SmolLM2-135M-Instruct
tags: [toolwise, tool-use, lora, sft, trl]
---
# toolwise tool_sft adapter

LoRA adapter that makes SmolLM2-135M-Instruct call When2Tool tools in the xml `<tool_call>` format and
answer in `\\boxed{{}}`. Trained by `trainers/policy/sft.py` with TRL `SFTTrainer` + peft on oracle
demonstrations of **train** tasks only (no test task is ever used).

Reproduce: `{command}`

## Data
```json
{json.dumps(stats, indent=2)}
```

## Training
```yaml
{OmegaConf.to_yaml(cfg.lora)}{OmegaConf.to_yaml(cfg.train)}```
Wall time: {seconds / 60:.1f} min on this machine.

## Metrics
```json
{json.dumps(metrics, indent=2)}
```
Evaluation on held-out test tasks (bare vs SFT policy) is in the repository README.
"""


def fit(cfg: DictConfig, root: DictConfig | None = None) -> Path:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from data_builders.backends.loading import EMBEDDED_ALIASES, embedded_model_dir

    torch.manual_seed(cfg.train.seed)
    base = str(embedded_model_dir()) if cfg.model in EMBEDDED_ALIASES else cfg.model
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    data = build_data(cfg, tokenizer)
    log.info("SFT data: %s", json.dumps(data.stats))
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    lora = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=OmegaConf.to_container(cfg.lora.target_modules)
                      if not isinstance(cfg.lora.target_modules, str) else cfg.lora.target_modules,
                      task_type="CAUSAL_LM")
    out_dir = Path(cfg.output_dir)
    t = cfg.train
    args = SFTConfig(
        # Optimizer/scheduler state stays with the run's outputs; the checkpoint holds only the adapter.
        output_dir=str(Path(cfg.get("run_dir") or out_dir.parent / f".{out_dir.name}-state") / "trainer_state"),
        run_name=out_dir.name, seed=t.seed,
        num_train_epochs=t.epochs, max_steps=t.max_steps, learning_rate=t.lr, lr_scheduler_type=t.scheduler,
        warmup_steps=t.warmup_ratio, per_device_train_batch_size=t.batch_size, per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.grad_accum, logging_steps=t.logging_steps,
        eval_strategy="steps" if len(data.val) else "no", eval_steps=t.eval_steps, save_strategy="no",
        report_to=list(cfg.report_to), max_length=None, use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=bool(t.get("gradient_checkpointing", False)),
        dataloader_num_workers=0, disable_tqdm=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data.train,
                         eval_dataset=data.val if len(data.val) else None, processing_class=tokenizer,
                         peft_config=lora)
    t0 = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - t0
    metrics = {"train_loss": result.training_loss, "train_steps": result.global_step,
               "train_runtime_s": round(seconds, 1)}
    if len(data.val):
        metrics |= {k: v for k, v in trainer.evaluate().items() if k.startswith("eval_")}
    trainer.model.save_pretrained(str(out_dir))  # adapter_config.json + adapter_model.safetensors only
    (out_dir / "README.md").write_text(model_card(cfg, data.stats, metrics, cfg.command, seconds))
    (out_dir / "metrics.json").write_text(json.dumps(metrics | {"data": data.stats}, indent=2))
    log.info("adapter saved to %s; %s", out_dir, json.dumps(metrics))
    print(f"adapter={out_dir} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in metrics.items()))
    return out_dir
