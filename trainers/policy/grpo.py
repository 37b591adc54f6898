"""``recipe=pte_grpo``: TRL GRPO with a PTE cost penalty on multi-turn tool rollouts (the PTE paper's proposal, arXiv 2604.05404).

Why: the tool_sft policy calls tools readily, often needlessly; every call costs a re-prefill of the whole
context (the PTE paper's cost). Reinforcement learning with reward = correctness − λ·PTE/normaliser teaches the
policy itself to spend calls only where they pay, instead of gating it from outside.

How, top to bottom:

1. Start from the policy of the ``model`` group (default ``model=smollm2_tool_sft``: the embedded model with
   the committed tool_sft adapter): its adapter is loaded *trainable* on the base model (no adapter: a fresh
   LoRA from ``recipe.lora``), so the tuned policy is again one adapter that every backend loads with
   ``model.adapter=<dir>``.
2. The train split of the ``tasks`` group (default ``tasks=pte_grpo``: built-in easy and medium tasks; never
   test tasks) becomes a dataset of rendered first prompts.
3. TRL's ``rollout_func`` extension point (``ToolRollout``) runs toolwise's own agent loop on each prompt's
   ``num_generations`` copies, with sampling, the real tools executing inside the rollout, and the same
   protocol as evaluation. Each episode becomes one token sequence: the first prompt, then every model turn
   (loss on these tokens, ``env_mask`` 1) and the tool results and protocol messages between them
   (``env_mask`` 0: no loss on text the model did not write).
4. Rewards (``trainers/policy/rewards.py``) are plain functions fed the rollout's fields; W&B gets each reward
   component, accuracy, tool calls and PTE per step.
5. The adapter, a model card and metrics go to ``checkpoints/pte_grpo/<time>/``; the shared evaluator
   compares it with the tool_sft policy as one more arm (``arms.policies``). The run's objective is the
   mean reward of the last quarter of the rollout batches.

Generation runs on the trainer's own model (HF ``generate`` through toolwise's HF backend) or, with
``recipe.generation.use_vllm=true`` and the ``vllm`` extra, on TRL's vLLM: ``vllm_mode=colocate`` (an engine
in each training process) or ``vllm_mode=server`` (``trl vllm-serve`` on other GPUs, reached at
``vllm_server_base_url`` or ``vllm_server_host``:``vllm_server_port``). TRL pushes the current weights before
each rollout (a LoRA is merged into the base for the push, then unmerged); in server mode every rank then
sends its episodes' turns to the server's OpenAI-compatible ``/v1/completions`` through toolwise's
``OpenAIBackend`` (the ``openai`` extra), the same agent loop as every other backend.

Under ``accelerate launch`` (``recipes/accelerate/``) each rank rolls out the prompts TRL's sampler gives it (a
GRPO group of ``num_generations`` episodes may span ranks); the PTE normaliser, OTC's fewest-calls estimate and
the rollout history are computed over the whole batch gathered from every rank, so they are those of one
process running the same batch.
"""
from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from datasets import Dataset
from omegaconf import DictConfig, OmegaConf
from trl import GRPOConfig, GRPOTrainer
from trl.distributed import DistributedBackend
from trl.models import unwrap_model_for_generation

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import Trajectory
from data_builders.backends.hf import HFBackend
from data_builders.backends.openai_backend import OpenAIBackend
from data_builders.backends.vllm_backend import VLLMBackend
from data_builders.metrics.pte import PTEConfig
from data_builders.tasks.schema import task_key
from trainers.policy.common import (adapter_card, export_adapter, freeze_lower_layers, load_policy, shared_run,
                                    train, train_tasks, trainer_args)
from trainers.policy.rewards import fewest_correct_calls, reward_scaling, reward_setup
from trainers.recipe import Fitted, RunInfo

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- episode -> tokens
class EpisodeTokenError(ValueError):
    """A trajectory's messages do not re-render into the prompts its turns were generated from."""


@dataclass
class EpisodeTokens:
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]        # 1: a token the model generated (trained on); 0: prefill, tool output, protocol text
    logprobs: list[float]      # sampling log-prob of model tokens; 0.0 for env tokens (masked out of the loss)


def episode_tokens(traj: Trajectory, tokenizer, render: Callable[[list[dict]], str]) -> EpisodeTokens:
    """One multi-turn episode as the token sequence the policy gradient sees.

    ``render(messages)`` must be the agent's renderer (chat template + tools, generation prompt appended).
    Model turns use the exact generated token ids (``AgentConfig.keep_token_ids``); the text between two
    turns is what the next prompt adds after the previous prompt and that turn's text. An EOS the model
    generated is not repeated from the template's end-of-turn marker.
    """
    msgs, turns = traj.messages, traj.turns
    starts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if len(starts) != len(turns):
        raise EpisodeTokenError(f"task {traj.task_id}: {len(starts)} assistant messages but {len(turns)} turns")
    encode = lambda text: tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    eos_text = tokenizer.eos_token or ""
    prompt = render(msgs[:starts[0]] if starts else msgs)
    ids, mask, lps = [], [], []
    for k, (a, turn) in enumerate(zip(starts, turns)):
        if turn.token_ids is None:
            raise EpisodeTokenError(f"task {traj.task_id}: turn {k} has no token_ids (run with keep_token_ids)")
        here = render(msgs[:a]) if k else prompt
        if k:
            before = render(msgs[:starts[k - 1]]) + msgs[starts[k - 1]]["content"]
            if not here.startswith(before):
                raise EpisodeTokenError(f"task {traj.task_id}: turn {k}'s prompt does not extend turn {k - 1}'s")
            between = here[len(before):]
            if turns[k - 1].finish_reason == "eos" and eos_text and between.startswith(eos_text):
                between = between[len(eos_text):]
            seg = encode(between)
            ids += seg; mask += [0] * len(seg); lps += [0.0] * len(seg)
        if turn.prefill_text:
            seg = encode(turn.prefill_text)
            ids += seg; mask += [0] * len(seg); lps += [0.0] * len(seg)
        gen = list(turn.token_ids)
        lp = list(turn.raw_logprobs or [0.0] * len(gen))
        ids += gen; mask += [1] * len(gen); lps += (lp + [0.0] * len(gen))[:len(gen)]
    return EpisodeTokens(encode(prompt), ids, mask, lps)


# ---------------------------------------------------------------------------- the rollout (TRL rollout_func)
def batch_summary(rows: list[dict]) -> dict:
    """Means over a rollout batch's episodes (``correct``, ``tool_calls``, ``pte``, ``format_errors``): the
    numbers of the model card's rollout table. ``rows`` is the whole batch, gathered from every rank."""
    n = len(rows)
    return {"episodes": n, "accuracy": sum(r["correct"] for r in rows) / n,
            "tool_calls": sum(r["tool_calls"] for r in rows) / n, "pte": sum(r["pte"] for r in rows) / n,
            "format_errors": sum(r["format_errors"] for r in rows) / n}


def server_url(args: GRPOConfig) -> str:
    """The OpenAI-compatible root of TRL's vLLM server (``trl vllm-serve``), from the same fields TRL's own
    client reads: ``vllm_server_base_url``, else ``http://vllm_server_host:vllm_server_port``."""
    base = args.vllm_server_base_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}"
    return base.rstrip("/") + "/v1"


class ToolRollout:
    """TRL ``rollout_func``: runs toolwise's agent loop on a batch of prompts (``num_generations`` copies
    each, as TRL's sampler repeats them) and returns token sequences plus the fields the rewards read.

    Under ``accelerate launch`` each rank gets its own share of the batch (TRL's sampler splits it in rank
    order) and runs it on its own engine; what needs the whole batch (the ``auto`` PTE normaliser, OTC's
    fewest correct calls per task, the rollout history) is computed from every rank's episodes, gathered."""

    def __init__(self, tasks_by_prompt: dict[str, Any], tokenizer, *, agent: dict, pte_cfg, normaliser,
                 model_id: str, seed: int = 0, extra: dict | None = None, batch_limits: dict | None = None,
                 tokenizer_path: str | None = None):
        self.tasks = tasks_by_prompt
        self.extra = dict(extra or {})     # scalars every reward call gets (e.g. OTC's c)
        self.tokenizer = tokenizer
        self.tokenizer_path = tokenizer_path   # what a server backend loads to count tokens as the server does
        self.agent_kw = dict(agent)
        self.pte_cfg = pte_cfg
        self.normaliser = None if normaliser in (None, "auto") else float(normaliser)
        self.model_id = model_id
        self.batch_limits = dict(batch_limits or {})   # HF generation: max_batch_size / max_batch_tokens
        self.seed = seed
        self.gamma: float | None = None
        self.history: list[dict] = []      # one summary per rollout batch, all ranks (the model card's curves)

    @contextmanager
    def backend(self, trainer):
        """The engine this rank's episodes run on, for the duration of one rollout."""
        if getattr(trainer, "use_vllm", False) and trainer.vllm_mode == "server":
            if self.tokenizer_path is None:
                raise ValueError("vLLM server mode needs the policy's tokenizer path (ToolRollout tokenizer_path)")
            # TRL pushed the weights from rank 0 just before this call; no rank may ask the server for tokens
            # while that push is still going on
            trainer.accelerator.wait_for_everyone()
            yield OpenAIBackend(base_url=server_url(trainer.args), tokenizer=self.tokenizer_path, vllm_extras=True)
        elif getattr(trainer, "use_vllm", False):
            yield VLLMBackend.wrap(trainer.vllm_generation.llm, self.tokenizer, model_id=self.model_id)
        else:
            if DistributedBackend(trainer.accelerator).is_fsdp and trainer.accelerator.num_processes > 1:
                # FSDP all-gathers layer by layer inside every forward, so ranks must run the same number of
                # forwards; multi-turn episodes end after different numbers of turns on each rank
                raise ValueError("FSDP with HF-generate rollouts would deadlock (ranks run different numbers of "
                                 "forwards); set recipe.generation.use_vllm=true (colocate or server), or use "
                                 "DDP / DeepSpeed ZeRO (recipes/accelerate/)")
            # the trainer's own weights, unwrapped from DDP (ZeRO-3: gathered for the rollout, as TRL does)
            with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                             gather_deepspeed3_params=trainer.args.ds3_gather_for_generation
                                             ) as model:
                yield HFBackend(model, self.tokenizer, model_id=self.model_id, **self.batch_limits)

    def __call__(self, prompts: list[str], trainer) -> dict[str, list]:
        unknown = [p for p in prompts if p not in self.tasks]
        if unknown:
            raise KeyError(f"rollout got {len(unknown)} prompt(s) that are not rendered train tasks, e.g. "
                           f"{unknown[0][:200]!r}")
        tasks = [self.tasks[p] for p in prompts]
        args = trainer.args
        step = int(trainer.state.global_step)
        rank = trainer.accelerator.process_index
        was_training = trainer.model.training
        start = time.perf_counter()
        with self.backend(trainer) as backend:
            # rank 0 keeps the one-process seed; other ranks sample differently even for the same prompt
            cfg = AgentConfig(**{**self.agent_kw, "temperature": args.temperature, "top_p": args.top_p,
                                 "seed": self.seed * 100_003 + step * 101 + rank * 1_000_003,
                                 "keep_token_ids": True, "logprobs": True, "max_in_flight": len(tasks)})
            agent = Agent(backend, cfg)
            try:
                with torch.no_grad():
                    trajs = agent.run(tasks)
            finally:
                trainer.model.train(was_training)
            if self.gamma is None:
                self.gamma = self.pte_cfg.gamma_for(backend)
        seconds = time.perf_counter() - start
        ptes = [self.pte_cfg.trajectory_pte(t, self.gamma) for t in trajs]
        keys = [task_key(task) for task in tasks]
        local = [{"task_key": k, "correct": bool(t.correct), "tool_calls": int(t.tool_calls), "pte": p,
                  "format_errors": int(t.format_errors)} for k, t, p in zip(keys, trajs, ptes)]
        # every rank's episodes, in TRL's global batch order (rank by rank); one process: its own
        batch = gather_object(local)
        if self.normaliser is None:
            # "auto": the starting policy's mean PTE on the first batch, then fixed for the run, so
            # λ = 1 prices an average episode of the start policy at one correct answer.
            self.normaliser = max(sum(r["pte"] for r in batch) / len(batch), 1e-9)
            log.info("PTE normaliser (auto, mean PTE of the first rollout batch): %.1f", self.normaliser)
        best = fewest_correct_calls([r["task_key"] for r in batch], [r["correct"] for r in batch],
                                    [r["tool_calls"] for r in batch])
        seqs = [episode_tokens(t, self.tokenizer, agent.renderer(task)) for t, task in zip(trajs, tasks)]
        # the slowest rank's time: the batch is done when every rank is
        self.history.append({"step": step, **batch_summary(batch),
                             "seconds": round(max(gather_object([seconds])), 1)})
        log.info("rollout step %d (rank %d: %d episodes of %s, normaliser %.6g, otc n %s): %s", step, rank,
                 len(trajs), json.dumps(keys), self.normaliser, json.dumps(best, sort_keys=True),
                 json.dumps(self.history[-1]))

        return {
            "prompt_ids": [s.prompt_ids for s in seqs],
            "completion_ids": [s.completion_ids for s in seqs],
            "logprobs": [s.logprobs for s in seqs],
            "env_mask": [s.env_mask for s in seqs],
            "correct": [r["correct"] for r in local],
            "tool_calls": [r["tool_calls"] for r in local],
            "format_errors": [r["format_errors"] for r in local],
            "pte": ptes,
            "pte_normalised": [p / self.normaliser for p in ptes],
            "task_key": keys,
            "otc_best": [best.get(k) for k in keys],   # OTC's n over the whole group, across ranks
            **self.extra,
        }


# ---------------------------------------------------------------------------- data
def prompt_dataset(tasks: Sequence, render_first: Callable[[Any], str], seed: int):
    """A shuffled ``datasets.Dataset`` of first prompts and the prompt → task map the rollout uses."""
    by_prompt: dict[str, Any] = {}
    for t in tasks:
        by_prompt.setdefault(render_first(t), t)   # identical prompts are the same task for the policy
    prompts = list(by_prompt)
    random.Random(seed).shuffle(prompts)
    return Dataset.from_dict({"prompt": prompts}), by_prompt


# ---------------------------------------------------------------------------- fit
def fit(recipe: DictConfig, cfg: DictConfig, run: RunInfo) -> Fitted:
    t, g, r = recipe.train, recipe.generation, recipe.reward
    torch.manual_seed(t.seed)
    policy = load_policy(cfg.model, recipe.lora)
    freeze_lower_layers(policy.model, t.trainable_layers)

    agent_kw = OmegaConf.to_container(recipe.rollout, resolve=True)
    first_prompts = Agent(HFBackend(policy.model, policy.tokenizer, model_id=policy.base_id), AgentConfig(**agent_kw))
    dataset, by_prompt = prompt_dataset(train_tasks(cfg), first_prompts.initial_prompt, recipe.data.seed)

    pte_cfg = PTEConfig(hardware=OmegaConf.to_container(cfg.hardware, resolve=True), params=r.pte_params,
                        cache_reuse=r.cache_reuse)
    rollout = ToolRollout(by_prompt, policy.tokenizer, agent=agent_kw, pte_cfg=pte_cfg, normaliser=r.normaliser,
                          model_id=policy.base_id, seed=t.seed, extra={"otc_c": float(r.otc_c)},
                          batch_limits={"max_batch_size": cfg.model.max_batch_size,
                                        "max_batch_tokens": cfg.model.max_batch_tokens},
                          tokenizer_path=policy.path)
    funcs, weights = reward_setup(r.kind, r.lam)

    run, export_dir = shared_run(run, run.export_dir(recipe.output_dir), cfg, use_cpu=policy.use_cpu)
    per_rank = rank_batch(int(g.prompts_per_step) * int(g.num_generations), PartialState().num_processes)
    micro = min(int(t.micro_batch), per_rank)
    if per_rank % micro:
        raise ValueError(f"train.micro_batch={micro} must divide the episodes each process trains on per step "
                         f"({per_rank})")
    if g.vllm_mode not in ("colocate", "server"):
        raise ValueError(f"recipe.generation.vllm_mode={g.vllm_mode!r}: choose colocate or server")
    args = GRPOConfig(
        **trainer_args(run, export_dir, t, policy),
        # one rollout batch per optimizer step, consumed in micro-batches: the loss's full-vocabulary
        # log-softmax over 16 episodes of ~1k tokens at once needs >20 GB on CPU
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_rank // micro,
        steps_per_generation=per_rank // micro,
        num_generations=g.num_generations, temperature=g.temperature, top_p=g.top_p,
        max_completion_length=g.max_completion_length, beta=t.beta, loss_type=t.loss_type,
        scale_rewards=reward_scaling(r.kind, t.scale_rewards), reward_weights=weights, logging_steps=1,
        use_vllm=g.use_vllm, vllm_mode=g.vllm_mode, vllm_server_base_url=g.vllm_server_base_url,
        vllm_server_host=g.vllm_server_host, vllm_server_port=g.vllm_server_port,
        # TRL's vLLM (colocated, or a server started by `trl vllm-serve`, which sets processed_logprobs) returns
        # processed (temperature-scaled) log-probs of the sampled tokens, which the backends pass on: what the
        # importance-sampling correction needs
        vllm_importance_sampling_correction=g.use_vllm,
    )
    trainer = GRPOTrainer(model=policy.model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=policy.tokenizer, rollout_func=rollout)

    before = {k: v.detach().clone() for k, v in policy.model.named_parameters() if v.requires_grad}
    metrics = train(trainer)
    changed = sum(int(not torch.equal(before[k], v.detach()))
                  for k, v in policy.model.named_parameters() if k in before)

    metrics |= {"reward": last_reward(trainer.state.log_history), "lora_tensors_changed": changed,
                "lora_tensors": len(before), "pte_normaliser": rollout.normaliser, "gamma": rollout.gamma,
                "reward_fn": {"kind": r.kind, "lam": float(r.lam), "weights": weights}}
    history = {"rollouts": rollout.history,
               "log_history": [h for h in trainer.state.log_history if "loss" in h or "reward" in h]}
    tasks = list(by_prompt.values())
    data_stats = {"train_tasks": len(tasks), "train_env": dict(Counter(x.env.name for x in tasks)),
                  "train_difficulty": dict(Counter(x.difficulty for x in tasks))}
    card = adapter_card(recipe=recipe, cfg=cfg, run=run, policy=policy, tags=["grpo", "pte"],
                        body=card_body(recipe, cfg.model.name, metrics, rollout.history), data_stats=data_stats,
                        metrics=metrics)
    export_adapter(trainer, export_dir, card, cfg,
                   metrics | history | {"data": data_stats, "task_ids": [str(x.id) for x in tasks]})
    log.info("adapter saved to %s; first batch %s; last batch %s", export_dir,
             json.dumps(rollout.history[0]) if rollout.history else None,
             json.dumps(rollout.history[-1]) if rollout.history else None)
    name, value = objective(r.kind, trainer.state.log_history, rollout.history)
    return Fitted(export_dir, objective=value, objective_name=name, metrics=metrics)


def rank_batch(episodes: int, processes: int) -> int:
    """Episodes each process rolls out and trains on per step. ``prompts_per_step x num_generations`` is the
    whole step's batch, however many processes share it, so a launch on more GPUs keeps the recipe's batch."""
    if episodes % processes:
        raise ValueError(f"recipe.generation: prompts_per_step x num_generations = {episodes} episodes per step "
                         f"cannot be split evenly over {processes} processes")
    return episodes // processes


def last_reward(log_history: list[dict]) -> float:
    """The run's objective: TRL's logged mean reward over the last quarter of the steps (at least one), so a
    sweep ranks runs by where training ended, less noisily than on the last sampled batch alone."""
    rewards = [float(h["reward"]) for h in log_history if "reward" in h]
    if not rewards:
        raise ValueError("the GRPO run logged no reward (train.max_steps must be >= 1)")
    last = rewards[-max(1, len(rewards) // 4):]
    return sum(last) / len(last)


def objective(kind: str, log_history: list[dict], rollouts: list[dict]) -> tuple[str, float]:
    """What a sweep ranks a run by: the mean reward where the reward is one (:func:`last_reward`); for ``hdpo``,
    whose two reward functions are advantages with zero mean in every group (so TRL's mean reward is 0 whatever
    the policy does), the sampled rollouts' accuracy over the same last quarter of the steps."""
    if kind != "hdpo":
        return "reward", last_reward(log_history)
    acc = [float(h["accuracy"]) for h in rollouts if "accuracy" in h]
    if not acc:
        raise ValueError("the GRPO run recorded no rollout (train.max_steps must be >= 1)")
    last = acc[-max(1, len(acc) // 4):]
    return "accuracy", sum(last) / len(last)


def card_body(recipe: DictConfig, base: str, metrics: dict, rollouts: list[dict]) -> str:
    r = metrics["reward_fn"]
    formula = ("correctness − λ·PTE/normaliser" if r["kind"] == "pte"
               else "correctness × r_tool(m, n) (OTC) − λ·PTE/normaliser")
    rows = "\n".join(f"| {h['step']} | {h['accuracy']:.3f} | {h['tool_calls']:.2f} | {h['pte']:.0f} | "
                     f"{h['format_errors']:.2f} | {h['seconds']} |" for h in rollouts)
    return f"""Tuned with TRL `GRPOTrainer` on multi-turn tool rollouts (`trainers/policy/grpo.py`). Reward:
**{formula}** with λ = {r['lam']}, normaliser {metrics['pte_normaliser']:.1f} (PTE γ = {metrics['gamma']}).
Train tasks only; no test task is used.

Evaluate it as one more arm:
`python -m trainers.evaluate 'arms.policies=[{{name: pte_grpo, model: {{name: {base}, adapter: <this directory>}}}}]'`.

## Rollouts during training (sampled, temperature {recipe.generation.temperature})

| step | accuracy | tool calls/episode | PTE/episode | format errors | rollout s |
|---|---|---|---|---|---|
{rows}

Wall time {metrics['train_runtime_s'] / 60:.1f} min; {metrics['train_steps']} steps;
{metrics['lora_tensors_changed']} of {metrics['lora_tensors']} LoRA tensors changed."""
