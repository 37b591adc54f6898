"""``recipe=tool_dpo``: the policy learns when to call from its own probe labels, by TRL DPO + peft LoRA.

Why: the controllers decide *around* the policy; a knowledge-aware preference step changes the policy itself (the
tool-overuse paper, arXiv 2604.19749: DPO pairs that prefer the direct answer where the model already knows it cut
tool use by 82.8 % with accuracy up). toolwise already holds those labels: a probe point says whether the policy's
direct answer to a task was right. Read top to bottom:

1. the policy's probe points on the train split of the ``tasks`` group (built with the run's ``model``/``backend``,
   or ``recipe.points.dir``; ``data_builders.build kind=probe``), train and val splits;
2. the policy's own first turn on each of those tasks (default mode, greedy, one round): its call, where it wrote
   one, is a pair's call side; else the oracle's first call of the task;
3. pairs (``data_builders/points/preferences.py``): probe label 0 (direct answer right) prefers that answer over the
   call, label 1 prefers the call over the wrong answer; with ``recipe.pairs.flip_dir`` (a flip build of the same
   policy) a harmful call prefers the forced answer at its moment and a helpful call of a right episode the call;
   their composition per category and label is printed and saved with the adapter;
4. TRL ``DPOTrainer`` on the start adapter (``model.adapter``, trained further; TRL keeps a frozen copy of it as the
   reference, so DPO's KL anchor is the start policy, not the bare base); validation pairs give the objective.
"""
from __future__ import annotations

import json
import logging
from collections import Counter

import torch
from datasets import Dataset
from omegaconf import DictConfig
from trl import DPOConfig, DPOTrainer

from data_builders import progress
from data_builders.agent import prompts as P
from data_builders.backends import malloc
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.parsing import parse_tool_call
from data_builders.backends.hf import HFBackend
from data_builders.environments import make_environment
from data_builders.oracle.core import run_oracle
from data_builders.points.preferences import Pair, Texts, balanced, composition, flip_pairs, flip_states, probe_pairs
from data_builders.points.store import load_points
from data_builders.progress import BudgetBar
from data_builders.tasks import tasks_from_config
from trainers.controller.points import decision_points
from trainers.policy.common import (adapter_card, export_adapter, freeze_lower_layers, load_policy, shared_run,
                                    train, trainer_args)
from trainers.recipe import Fitted, RunInfo

log = logging.getLogger(__name__)


def losses(t) -> tuple[list[str], list[float]]:
    """TRL's loss types and their weights: the DPO loss, and with ``sft_weight`` the NLL of the preferred side
    beside it (TRL sums them with these weights)."""
    if t.sft_weight:
        return [t.loss_type, "sft"], [1.0, float(t.sft_weight)]
    return [t.loss_type], [1.0]


def first_turns(backend, tasks: list, build: DictConfig, max_new_tokens: int) -> dict[str, str]:
    """The policy's first turn on each task as the probe's prompt asks it (the build's feature mode and call
    format), greedy: a call or a direct answer."""
    cfg = AgentConfig(mode=build.feature_mode, max_rounds=1, max_new_tokens=max_new_tokens, temperature=0.0,
                      max_in_flight=max(len(tasks), 1), call_format=build.agent.call_format)
    out = {}
    # the build's bar (generated tokens, tasks in the postfix): on CPU this phase takes minutes
    with BudgetBar("tool_dpo first turns", {0: len(tasks)}) as bar, \
            progress.metering(lambda work: bar.work(0, work)):
        trajs = Agent(backend, cfg).run(tasks, on_done=lambda tr: bar.tick(0))
    for task, tr in zip(tasks, trajs):
        turn = next((m["content"] for m in tr.messages if m["role"] == "assistant"), None)
        if turn:
            out[str(task.id)] = turn
    return out


def oracle_call(task, call_format: str) -> str | None:
    """The oracle's first call of ``task`` in the prompt's call format, or None (no oracle for it, or no call)."""
    try:
        run = run_oracle(task)
    except KeyError:            # no mechanical solver for this environment (a user's own tools, BFCL)
        return None
    if not run.steps:
        return None
    return P.tool_call_text(run.steps[0].name, run.steps[0].arguments, call_format)


def own_flip_points(flip_dir: str, probe_manifest: dict) -> list[dict]:
    """The train and val flip points of ``flip_dir``, which must come from the probe points' policy and engine
    (a pair's texts are the policy's own)."""
    flips = load_points(flip_dir, kind="flip", features=False)
    if flips.manifest.get("backend") != probe_manifest.get("backend"):
        raise ValueError(f"recipe.pairs.flip_dir={flip_dir}: built with backend {flips.manifest.get('backend')}, "
                         f"the probe points with {probe_manifest.get('backend')}; the pairs need one policy's texts")
    return [r for r in flips.points if r["split"] in ("train", "val")]


def pair_rows(pairs: list[Pair], render) -> list[dict]:
    """TRL's standard preference format: the rendered prompt (chat template, tools, generation prompt) and the two
    answers (TRL appends the end-of-turn token)."""
    return [{"prompt": render(p), "chosen": p.chosen, "rejected": p.rejected, "category": p.category,
             "point_id": p.point_id} for p in pairs]


def fit(recipe: DictConfig, cfg: DictConfig, run: RunInfo) -> Fitted:
    t = recipe.train
    torch.manual_seed(t.seed)
    malloc.opt_out()    # a training process: glibc's own malloc (the backend below would tune it for inference)
    points, build = decision_points(cfg, command=run.command, kind="probe")
    rows = [r for r in points.points if r["split"] in ("train", "val")]
    if not rows:
        raise ValueError(f"{build.out_dir}: no train or val probe points to build pairs from")
    flip_rows = own_flip_points(recipe.pairs.flip_dir, points.manifest) if recipe.pairs.flip_dir else []
    wanted = {str(r["task_id"]) for r in rows + flip_rows}
    tasks = {str(task.id): task for task in tasks_from_config(build, "train") if str(task.id) in wanted}

    policy = load_policy(cfg.model, recipe.lora)
    backend = HFBackend(policy.model, policy.tokenizer, model_id=policy.base_id,
                        max_batch_size=cfg.model.max_batch_size, max_batch_tokens=cfg.model.max_batch_tokens)
    with torch.no_grad():
        own = first_turns(backend, list(tasks.values()), build, recipe.pairs.first_turn_tokens)
    policy.model.train()
    agent = Agent(backend, AgentConfig(mode=build.feature_mode, call_format=build.agent.call_format))
    texts = Texts(
        first_prompt={k: P.initial_messages(task.instruction, task.env.name, build.feature_mode, agent.cfg.reasoning,
                                            agent.call_format) for k, task in tasks.items()},
        tools={k: make_environment(task.env).tool_specs() for k, task in tasks.items()},
        first_turn=own, is_call=lambda text: parse_tool_call(text) is not None,
        oracle_call=(lambda k: oracle_call(tasks[k], agent.call_format)) if recipe.pairs.oracle_calls
        else (lambda k: None), flip_state=flip_states(flip_rows))
    pairs, left = probe_pairs(rows, texts)
    if flip_rows:
        more, left_flip = flip_pairs(flip_rows, texts)
        pairs, left = pairs + more, left + Counter({f"flip: {k}": v for k, v in left_flip.items()})
    wanted_kinds = set(recipe.pairs.categories)
    left += Counter(f"category {p.category} not in recipe.pairs.categories" for p in pairs
                    if p.category not in wanted_kinds)
    pairs = [p for p in pairs if p.category in wanted_kinds]
    if recipe.pairs.balance:
        pairs, cut = balanced(pairs, seed=t.seed)
        left += cut
    comp = composition(pairs)
    print(f"tool_dpo pairs: {len(pairs)} from {len(rows)} probe points ({build.out_dir})")
    print(json.dumps({"composition": comp, "left_out": dict(left)}, indent=2))

    def render(p: Pair) -> str:
        return agent.renderer(tasks[p.task_id])(p.prompt)
    train_rows = pair_rows([p for p in pairs if p.split == "train"], render)
    val_rows = pair_rows([p for p in pairs if p.split == "val"], render)
    if not train_rows:
        raise ValueError(f"no train pair: {dict(left)} of {len(rows)} probe points left out")

    run, export_dir = shared_run(run, run.export_dir(recipe.output_dir), cfg, use_cpu=policy.use_cpu)
    loss_types, loss_weights = losses(t)
    args = DPOConfig(
        **trainer_args(run, export_dir, t, policy),
        beta=t.beta, loss_type=loss_types, loss_weights=loss_weights, max_length=t.max_length,
        truncation_mode="keep_end",
        per_device_train_batch_size=t.batch_size, per_device_eval_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, logging_steps=t.logging_steps,
        precompute_ref_log_probs=t.precompute_ref_log_probs, eval_strategy="no")
    trainer = DPOTrainer(model=policy.model, args=args, train_dataset=Dataset.from_list(train_rows),
                         processing_class=policy.tokenizer)
    # after TRL made its reference copy (it marks the whole adapter trainable), before its optimizer exists
    freeze_lower_layers(trainer.model, t.trainable_layers)
    metrics = train(trainer)
    if val_rows:
        ev = trainer.evaluate(Dataset.from_list(val_rows))
        metrics |= {k: float(v) for k, v in ev.items() if isinstance(v, (int, float))}
    metrics |= {"pairs": {"train": len(train_rows), "val": len(val_rows)}, "composition": comp,
                "left_out": dict(left), "points": build.out_dir}
    loss = " + ".join(f"{w:g} × `{k}`" for k, w in zip(loss_types, loss_weights))
    body = (f"Knowledge-aware DPO (TRL `DPOTrainer`, β = {t.beta}, loss {loss}) on {len(pairs)} preference "
            f"pairs read off the policy's own probe points (`{build.out_dir}`): where its direct answer was right "
            f"the direct answer is preferred over a call, where it was wrong the call. Composition per category, "
            f"label and where each side came from (the policy's own rollout or the oracle):\n\n```json\n"
            f"{json.dumps(comp, indent=2)}\n```\n")
    card = adapter_card(recipe=recipe, cfg=cfg, run=run, policy=policy, tags=["dpo", "tool_dpo"], body=body,
                        data_stats={"pairs": metrics["pairs"], "left_out": dict(left)}, metrics=metrics)
    export_adapter(trainer, export_dir, card, cfg, metrics)
    if "eval_loss" in metrics:
        return Fitted(export_dir, objective=metrics["eval_loss"], objective_name="eval_loss", metrics=metrics)
    return Fitted(export_dir, objective=metrics["train_loss"], objective_name="train_loss", metrics=metrics)
