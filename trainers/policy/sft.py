"""``recipe=tool_sft``: a tool-using default policy by TRL SFT + peft LoRA on oracle demonstrations.

Why: the bare SmolLM2-135M never calls tools and writes malformed calls when forced, so there is nothing
for a controller to gate. This recipe teaches the call format and reading results back, on oracle
trajectories of *train* tasks only: the train split of the ``tasks`` group (``tasks=tool_sft``, built-in
generators, unless the command line chooses, e.g. ``tasks=when2tool tasks.path=<dir>``). The mixture (v2)
teaches three things: a call when the prompt forces one or leaves it open (one tool demonstration per task,
in a mode drawn from ``data.tool_modes``); a direct ``\\boxed{gold}`` answer and never a call when the prompt
says not to use tools (``data.direct`` rules: a seeded share of every task, in
``no_tool``/``hard_no_tool``); and a direct answer in ``default`` mode for the easy tasks a small model can learn
to answer, so a default-mode policy does not call on everything (its tool demonstration then comes in
``force`` mode: one prompt, one reply). v1 (``checkpoints/tool_sft/v1``, still loadable by path)
had only the tool demonstrations and a no_tool answer for half the easy tasks.
A held-out share of the tasks (``data.val_fraction``, split by task so no task is in both) gives the
validation loss, the run's objective (the training loss when there is no validation split).

The base is the ``model`` group: the recipe selects the bare embedded model (``model=smollm2_base``); any
other causal LM with ``model=hf model.name=<hub id | directory | file.gguf>``. A ``model.adapter`` is
trained further instead of a fresh LoRA from ``recipe.lora``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from omegaconf import DictConfig
from trl import SFTConfig, SFTTrainer

from data_builders.oracle.sft import DirectRule, build_examples
from trainers.policy.common import (adapter_card, export_adapter, load_policy, shared_run, train, train_tasks,
                                    trainer_args)
from trainers.policy.tokenization import ConversationTooLong, tokenize_conversation
from trainers.recipe import Fitted, RunInfo

log = logging.getLogger(__name__)


@dataclass
class SFTData:
    train: Any   # datasets.Dataset with input_ids / assistant_masks (+ metadata columns)
    val: Any
    stats: dict
    task_ids: list[str]   # the train tasks the rows came from (train and validation rows), in load order


def demonstration_rows(d: DictConfig, tasks: list) -> tuple[list[dict], list[dict], Counter]:
    """Chat rows for train and validation tasks (split by task), and counts of what was made or dropped."""
    rng = random.Random(d.seed)
    order = list(range(len(tasks)))
    rng.shuffle(order)
    val_ids = {str(tasks[i].id) for i in order[:int(round(d.val_fraction * len(tasks)))]}
    # One pass over all tasks with one rng (mode draws, direct-answer draws), then split rows by task.
    rules = [DirectRule(modes=tuple(r.modes), difficulties=tuple(r.difficulties), fraction=r.fraction,
                        multi_step=r.multi_step, categories=tuple(r.categories) if r.categories else None)
             for r in d.direct]
    rows, made = build_examples(tasks, modes=list(d.tool_modes), call_format=d.call_format, rng=rng,
                                direct_rules=rules)
    parts: dict[str, list[dict]] = {"train": [], "val": []}
    for r in rows:
        parts["val" if r["task_id"] in val_ids else "train"].append(r)
    counts = Counter(f"{part}_{r['kind']}" for part, part_rows in parts.items() for r in part_rows)
    counts["dropped_no_teacher_answer"] = made["dropped_tool"]
    return parts["train"], parts["val"], counts


def tokenized(rows: list[dict], tokenizer, max_length: int, counts: Counter, part: str) -> Dataset:
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
    """Tokenized demonstrations of the train tasks of ``cfg.tasks``, made as ``cfg.recipe.data`` says."""
    recipe = cfg.recipe
    tasks = train_tasks(cfg)
    train_rows, val_rows, counts = demonstration_rows(recipe.data, tasks)
    train_set = tokenized(train_rows, tokenizer, recipe.data.max_length, counts, "train")
    val_set = tokenized(val_rows, tokenizer, recipe.data.max_length, counts, "val")
    stats = dict(counts) | {
        "train_rows": len(train_set), "val_rows": len(val_set),
        "train_tokens": sum(len(x) for x in train_set["input_ids"]),
        "train_loss_tokens": sum(sum(m) for m in train_set["assistant_masks"]),
        "train_kind": dict(Counter(train_set["kind"])), "train_env": dict(Counter(train_set["env"])),
        "train_kind_mode": dict(Counter(f"{k}:{m}" for k, m in zip(train_set["kind"], train_set["mode"]))),
    }
    return SFTData(train_set, val_set, stats, [str(t.id) for t in tasks])


def example_hash(input_ids) -> str:
    """A short stable id of one tokenized example (its token ids), the same in every process."""
    return hashlib.sha1(",".join(map(str, input_ids)).encode()).hexdigest()[:12]


class LoggedCollator:
    """The trainer's collator, logging at DEBUG which examples this rank trains on (``example_hash`` of each).
    Under ``accelerate launch`` each rank reads its own shard of every global batch; ``hydra.verbose=
    trainers.policy.sft`` shows the shards (``tests/trainers/test_policy_distributed.py`` checks they are disjoint)."""

    def __init__(self, collate, rank: int):
        self.collate, self.rank = collate, rank

    def __call__(self, examples):
        if log.isEnabledFor(logging.DEBUG):
            log.debug("rank %d examples %s", self.rank, " ".join(example_hash(e["input_ids"]) for e in examples))
        return self.collate(examples)


CARD_BODY = """Teaches the When2Tool tool-call format (xml `<tool_call>`) and answers in `\\boxed{{}}`. Trained by
`trainers/policy/sft.py` with TRL `SFTTrainer` + peft on oracle demonstrations of **train** tasks only (no
test task is ever used); the loss covers the assistant turns only. Wall time {minutes:.1f} min on the
training machine. Evaluation on held-out test tasks (bare vs SFT policy) is in docs/results.md of the toolwise repository."""


def fit(recipe: DictConfig, cfg: DictConfig, run: RunInfo) -> Fitted:
    t = recipe.train
    torch.manual_seed(t.seed)
    policy = load_policy(cfg.model, recipe.lora)

    data = build_data(cfg, policy.tokenizer)
    log.info("SFT data: %s", json.dumps(data.stats))
    val = data.val if len(data.val) else None

    run, export_dir = shared_run(run, run.export_dir(recipe.output_dir), cfg, use_cpu=policy.use_cpu)
    # per_device_train_batch_size: conversations per process; a step takes batch_size x
    # gradient_accumulation_steps x processes
    args = SFTConfig(
        **trainer_args(run, export_dir, t, policy), num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.batch_size, per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, logging_steps=t.logging_steps,
        eval_strategy="no" if val is None else "steps", eval_steps=t.eval_steps, max_length=None)
    trainer = SFTTrainer(model=policy.model, args=args, train_dataset=data.train, eval_dataset=val,
                         processing_class=policy.tokenizer)
    trainer.data_collator = LoggedCollator(trainer.data_collator, trainer.accelerator.process_index)

    metrics = train(trainer)
    if val is not None:
        metrics |= {k: v for k, v in trainer.evaluate().items() if k.startswith("eval_")}

    card = adapter_card(recipe=recipe, cfg=cfg, run=run, policy=policy, tags=["sft"],
                        body=CARD_BODY.format(minutes=metrics["train_runtime_s"] / 60), data_stats=data.stats,
                        metrics=metrics)
    export_adapter(trainer, export_dir, card, cfg, metrics | {"data": data.stats, "task_ids": data.task_ids})
    objective = "eval_loss" if "eval_loss" in metrics else "train_loss"
    log.info("adapter saved to %s; %s", export_dir, json.dumps(metrics))
    return Fitted(export_dir, objective=metrics[objective], objective_name=objective, metrics=metrics)
