"""``recipe=pte_grpo``: TRL GRPO with a PTE cost penalty on multi-turn tool rollouts (seed 003's proposal).

Why: the tool_sft policy calls tools readily, often needlessly; every call costs a re-prefill of the whole
context (seed 003's PTE). Reinforcement learning with reward = correctness − λ·PTE/normaliser teaches the
policy itself to spend calls only where they pay, instead of gating it from outside.

How, top to bottom:

1. Start from the tool_sft policy: its LoRA adapter is loaded *trainable* on the base model, so the tuned
   policy is again one adapter that every backend loads with ``model.adapter=<dir>``.
2. Train tasks (built-in generators, plus When2Tool's train files when a path is given; never test tasks)
   become a dataset of rendered first prompts.
3. TRL's ``rollout_func`` extension point (``ToolRollout``) runs toolwise's own agent loop on each prompt's
   ``num_generations`` copies, with sampling, the real tools executing inside the rollout, and the same
   protocol as evaluation. Each episode becomes one token sequence: the first prompt, then every model turn
   (loss on these tokens, ``env_mask`` 1) and the tool results and protocol messages between them
   (``env_mask`` 0: no loss on text the model did not write).
4. Rewards (``trainers/policy/rewards.py``) are plain functions fed the rollout's fields; W&B gets each reward
   component, accuracy, tool calls and PTE per step.
5. The adapter, a model card and metrics go to ``checkpoints/pte_grpo/<time>/``; the shared evaluator
   compares it with the tool_sft policy as one more arm (``arms.policies``).

Generation runs on the trainer's own model (HF ``generate`` through toolwise's HF backend) or, with
``recipe.generation.use_vllm=true`` and the ``vllm`` extra, on TRL's colocated vLLM engine, whose weights
TRL syncs before each rollout.
"""
from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from omegaconf import DictConfig, OmegaConf

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


def episode_tokens(traj: dict, tokenizer, render: Callable[[list[dict]], str]) -> EpisodeTokens:
    """One multi-turn episode as the token sequence the policy gradient sees.

    ``render(messages)`` must be the agent's renderer (chat template + tools, generation prompt appended).
    Model turns use the exact generated token ids (``AgentConfig.keep_token_ids``); the text between two
    turns is what the next prompt adds after the previous prompt and that turn's text. An EOS the model
    generated is not repeated from the template's end-of-turn marker.
    """
    msgs, turns = traj["messages"], traj["turns"]
    starts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if len(starts) != len(turns):
        raise EpisodeTokenError(f"task {traj['task_id']}: {len(starts)} assistant messages but {len(turns)} turns")
    encode = lambda text: tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    eos_text = tokenizer.eos_token or ""
    prompt = render(msgs[:starts[0]] if starts else msgs)
    ids, mask, lps = [], [], []
    for k, (a, turn) in enumerate(zip(starts, turns)):
        if "token_ids" not in turn:
            raise EpisodeTokenError(f"task {traj['task_id']}: turn {k} has no token_ids (run with keep_token_ids)")
        here = render(msgs[:a]) if k else prompt
        if k:
            before = render(msgs[:starts[k - 1]]) + msgs[starts[k - 1]]["content"]
            if not here.startswith(before):
                raise EpisodeTokenError(f"task {traj['task_id']}: turn {k}'s prompt does not extend turn {k - 1}'s")
            between = here[len(before):]
            if turns[k - 1].get("finish_reason") == "eos" and eos_text and between.startswith(eos_text):
                between = between[len(eos_text):]
            seg = encode(between)
            ids += seg; mask += [0] * len(seg); lps += [0.0] * len(seg)
        if turn.get("prefill_text"):
            seg = encode(turn["prefill_text"])
            ids += seg; mask += [0] * len(seg); lps += [0.0] * len(seg)
        gen = list(turn["token_ids"])
        lp = list(turn.get("raw_logprobs") or [0.0] * len(gen))
        ids += gen; mask += [1] * len(gen); lps += (lp + [0.0] * len(gen))[:len(gen)]
    return EpisodeTokens(encode(prompt), ids, mask, lps)


# ---------------------------------------------------------------------------- the rollout (TRL rollout_func)
class ToolRollout:
    """TRL ``rollout_func``: runs toolwise's agent loop on a batch of prompts (``num_generations`` copies
    each, as TRL's sampler repeats them) and returns token sequences plus the fields the rewards read."""

    def __init__(self, tasks_by_prompt: dict[str, Any], tokenizer, *, agent: dict, pte_cfg, normaliser,
                 model_id: str, seed: int = 0, extra: dict | None = None):
        self.tasks = tasks_by_prompt
        self.extra = dict(extra or {})     # scalars every reward call gets (e.g. OTC's c)
        self.tokenizer = tokenizer
        self.agent_kw = dict(agent)
        self.pte_cfg = pte_cfg
        self.normaliser = None if normaliser in (None, "auto") else float(normaliser)
        self.model_id = model_id
        self.seed = seed
        self.gamma: float | None = None
        self.history: list[dict] = []      # one summary per rollout batch (the model card's curves)

    def backend(self, trainer):
        if getattr(trainer, "use_vllm", False):
            from data_builders.backends.vllm_backend import VLLMBackend

            return VLLMBackend.wrap(trainer.vllm_generation.llm, self.tokenizer, model_id=self.model_id)
        from data_builders.backends.hf import HFBackend

        return HFBackend(trainer.model, self.tokenizer, model_id=self.model_id)

    def __call__(self, prompts: list[str], trainer) -> dict[str, list]:
        import torch

        from data_builders.agent.loop import Agent, AgentConfig

        unknown = [p for p in prompts if p not in self.tasks]
        if unknown:
            raise KeyError(f"rollout got {len(unknown)} prompt(s) that are not rendered train tasks, e.g. "
                           f"{unknown[0][:200]!r}")
        tasks = [self.tasks[p] for p in prompts]
        args = trainer.args
        step = int(trainer.state.global_step)
        was_training = trainer.model.training
        backend = self.backend(trainer)
        cfg = AgentConfig(**{**self.agent_kw, "temperature": args.temperature, "top_p": args.top_p,
                             "seed": self.seed * 100_003 + step * 101, "keep_token_ids": True, "logprobs": True,
                             "max_in_flight": len(tasks)})
        agent = Agent(backend, cfg)
        start = time.perf_counter()
        try:
            with torch.no_grad():
                trajs = agent.run(tasks)
        finally:
            trainer.model.train(was_training)
        seconds = time.perf_counter() - start
        if self.gamma is None:
            self.gamma = self.pte_cfg.gamma_for(backend)
        ptes = [self.pte_cfg.trajectory_pte(t, self.gamma) for t in trajs]
        if self.normaliser is None:
            # "auto": the starting policy's mean PTE on the first batch, then fixed for the run, so
            # λ = 1 prices an average episode of the start policy at one correct answer.
            self.normaliser = max(sum(ptes) / len(ptes), 1e-9)
            log.info("PTE normaliser (auto, mean PTE of the first rollout batch): %.1f", self.normaliser)
        seqs = [episode_tokens(t, self.tokenizer, agent.renderer(task)) for t, task in zip(trajs, tasks)]
        n = len(trajs)
        self.history.append({"step": step, "episodes": n, "seconds": round(seconds, 1),
                             "accuracy": sum(t["correct"] for t in trajs) / n,
                             "tool_calls": sum(t["tool_calls"] for t in trajs) / n,
                             "pte": sum(ptes) / n, "format_errors": sum(t["format_errors"] for t in trajs) / n})
        log.info("rollout step %d: %s", step, json.dumps(self.history[-1]))
        from trainers.evaluate.run.cache import task_key

        return {
            "prompt_ids": [s.prompt_ids for s in seqs],
            "completion_ids": [s.completion_ids for s in seqs],
            "logprobs": [s.logprobs for s in seqs],
            "env_mask": [s.env_mask for s in seqs],
            "correct": [bool(t["correct"]) for t in trajs],
            "tool_calls": [int(t["tool_calls"]) for t in trajs],
            "format_errors": [int(t["format_errors"]) for t in trajs],
            "pte": ptes,
            "pte_normalised": [p / self.normaliser for p in ptes],
            "task_key": [task_key(task) for task in tasks],
            **self.extra,
        }


# ---------------------------------------------------------------------------- data
def train_tasks(d: DictConfig) -> list:
    from data_builders.tasks import load_tasks

    tasks = load_tasks("builtin", split="train", n_per_cell=d.builtin_per_cell, seed=d.seed,
                       difficulties=d.get("difficulties"), envs=d.get("envs"))
    if d.get("when2tool_path"):
        tasks += load_tasks("when2tool", split="train", path=d.when2tool_path, hops=d.get("hops", "single"),
                            per_cell=d.get("when2tool_per_cell"), sample_seed=d.seed,
                            difficulties=d.get("difficulties"), envs=d.get("envs"))
    if not tasks:
        raise ValueError("recipe.data selects no train tasks; check data.envs / data.difficulties")
    return tasks


def prompt_dataset(tasks: Sequence, render_first: Callable[[Any], str], seed: int):
    """A shuffled ``datasets.Dataset`` of first prompts and the prompt → task map the rollout uses."""
    from datasets import Dataset

    by_prompt: dict[str, Any] = {}
    for t in tasks:
        by_prompt.setdefault(render_first(t), t)   # identical prompts are the same task for the policy
    prompts = list(by_prompt)
    random.Random(seed).shuffle(prompts)
    return Dataset.from_dict({"prompt": prompts}), by_prompt


# ---------------------------------------------------------------------------- fit
def load_policy(recipe: DictConfig):
    """Base model + the start adapter loaded trainable (or a fresh LoRA when ``start_adapter`` is null)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_builders.backends.loading import EMBEDDED_ALIASES, EMBEDDED_ID, embedded_model_dir, resolve_adapter

    base = str(embedded_model_dir()) if recipe.model in EMBEDDED_ALIASES else recipe.model
    model_id = EMBEDDED_ID if recipe.model in EMBEDDED_ALIASES else str(recipe.model)
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    start = resolve_adapter(recipe.get("start_adapter"))
    if start:
        model = PeftModel.from_pretrained(model, start, is_trainable=True)
    else:
        lora = recipe.lora
        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                 target_modules=OmegaConf.to_container(lora.target_modules)
                                                 if not isinstance(lora.target_modules, str) else lora.target_modules,
                                                 task_type="CAUSAL_LM"))
    freeze_lower_layers(model, recipe.train.get("trainable_layers"))
    return model, tokenizer, model_id, start


def freeze_lower_layers(model, top: int | None) -> int:
    """Train only the LoRA weights of the top ``top`` decoder layers (None: all). Autograd then stops
    below the lowest trainable layer, which removes most of the backward pass: on 2 CPU cores the policy
    update, a forward and backward over every episode's whole context (~900 tokens), not generation, is
    the dominant cost of a GRPO step. Returns the number of trainable tensors."""
    import re

    n_layers = model.config.num_hidden_layers
    lowest = 0 if top is None else max(n_layers - int(top), 0)
    trainable = 0
    for name, p in model.named_parameters():
        if "lora_" not in name:
            continue
        m = re.search(r"\.layers\.(\d+)\.", name)
        p.requires_grad = m is None or int(m.group(1)) >= lowest
        trainable += int(p.requires_grad)
    if not trainable:
        raise ValueError(f"train.trainable_layers={top} leaves no LoRA weight trainable")
    return trainable


def fit(recipe: DictConfig, cfg: DictConfig | None = None) -> Path:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.backends.hf import HFBackend

    from data_builders.metrics.pte import PTEConfig
    from trainers.policy.rewards import reward_setup

    t, g, r = recipe.train, recipe.generation, recipe.reward
    torch.manual_seed(t.seed)
    model, tokenizer, model_id, start = load_policy(recipe)
    agent_kw = OmegaConf.to_container(recipe.rollout, resolve=True)
    first_prompts = Agent(HFBackend(model, tokenizer, model_id=model_id), AgentConfig(**agent_kw))
    tasks = train_tasks(recipe.data)
    dataset, by_prompt = prompt_dataset(tasks, first_prompts.initial_prompt, recipe.data.seed)
    hardware = OmegaConf.to_container(cfg.hardware, resolve=True) if cfg is not None and "hardware" in cfg \
        else "h100_pcie_paper"
    pte_cfg = PTEConfig(hardware=hardware, params=r.get("pte_params", "non_embedding"),
                        cache_reuse=bool(r.get("cache_reuse", False)))
    rollout = ToolRollout(by_prompt, tokenizer, agent=agent_kw, pte_cfg=pte_cfg, normaliser=r.normaliser,
                          model_id=model_id, seed=t.seed, extra={"otc_c": float(r.get("otc_c", 1.0))})
    funcs, weights = reward_setup(r.kind, r.lam)
    out_dir = Path(recipe.output_dir)
    state_dir = Path(recipe.get("run_dir") or out_dir.parent / f".{out_dir.name}-state") / "trainer_state"
    batch = int(g.prompts_per_step) * int(g.num_generations)
    micro = min(int(t.get("micro_batch", batch)), batch)
    if batch % micro:
        raise ValueError(f"train.micro_batch={micro} must divide prompts_per_step x num_generations = {batch}")
    args = GRPOConfig(
        output_dir=str(state_dir), run_name=out_dir.name, seed=t.seed, max_steps=t.max_steps,
        learning_rate=t.lr, lr_scheduler_type=t.scheduler, warmup_steps=t.warmup_steps,
        # one rollout batch per optimizer step, consumed in micro-batches: the loss's full-vocabulary
        # log-softmax over 16 episodes of ~1k tokens at once needs >20 GB on CPU
        per_device_train_batch_size=micro, gradient_accumulation_steps=batch // micro,
        steps_per_generation=batch // micro,
        num_generations=g.num_generations, temperature=g.temperature, top_p=g.top_p,
        max_completion_length=g.max_completion_length, beta=t.beta, loss_type=t.loss_type,
        scale_rewards=t.scale_rewards, reward_weights=weights, logging_steps=1, save_strategy="no",
        report_to=list(recipe.get("report_to") or []), use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False, dataloader_num_workers=0, disable_tqdm=False, bf16=bool(t.get("bf16", False)),
        use_vllm=bool(g.use_vllm), vllm_mode=g.get("vllm_mode", "colocate"),
        # TRL's colocated engine returns processed (temperature-scaled) log-probs of the sampled tokens, which
        # the wrapped backend passes on: what the importance-sampling correction needs
        vllm_importance_sampling_correction=bool(g.use_vllm),
    )
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout)
    before = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
    t0 = time.perf_counter()
    result = trainer.train()
    seconds = time.perf_counter() - t0
    changed = sum(int(not torch.equal(before[k], v.detach())) for k, v in model.named_parameters() if k in before)
    history = [h for h in trainer.state.log_history if "loss" in h or "reward" in h]
    metrics = {"train_loss": result.training_loss, "train_steps": result.global_step,
               "train_runtime_s": round(seconds, 1), "lora_tensors_changed": changed,
               "lora_tensors": len(before), "pte_normaliser": rollout.normaliser, "gamma": rollout.gamma,
               "reward": {"kind": r.kind, "lam": float(r.lam), "weights": weights},
               "train_tasks": len(by_prompt), "rollouts": rollout.history, "log_history": history}
    out_dir.mkdir(parents=True, exist_ok=True)
    trainer.model.save_pretrained(str(out_dir))   # adapter_config.json + adapter_model.safetensors only
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    (out_dir / "train_config.yaml").write_text(OmegaConf.to_yaml(recipe, resolve=True))
    (out_dir / "README.md").write_text(model_card(recipe, metrics, start, seconds, model_id))
    print(f"adapter={out_dir} steps={result.global_step} runtime_s={seconds:.0f} "
          f"first_batch={json.dumps(rollout.history[0]) if rollout.history else None} "
          f"last_batch={json.dumps(rollout.history[-1]) if rollout.history else None}")
    return out_dir


def model_card(recipe: DictConfig, metrics: dict, start: str | None, seconds: float, base_model: str) -> str:
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(library_name="peft", base_model=base_model,
                         tags=["toolwise", "tool-use", "lora", "grpo", "trl", "pte"])
    rows = "\n".join(f"| {h['step']} | {h['accuracy']:.3f} | {h['tool_calls']:.2f} | {h['pte']:.0f} | "
                     f"{h['format_errors']:.2f} | {h['seconds']} |" for h in metrics["rollouts"])
    r = metrics["reward"]
    formula = ("correctness − λ·PTE/normaliser" if r["kind"] == "pte"
               else "correctness × r_tool(m, n) (OTC) − λ·PTE/normaliser")
    card = f"""---
{data.to_yaml()}
---

# toolwise pte_grpo adapter

LoRA adapter for `{base_model}` tuned with TRL `GRPOTrainer` on multi-turn tool rollouts
(`trainers/policy/grpo.py`), starting from `{start}`. Reward: **{formula}** with λ = {r['lam']}, normaliser
{metrics['pte_normaliser']:.1f} (PTE γ = {metrics['gamma']}). Train tasks only; no test task is used.

Reproduce: `{recipe.get('command', 'python -m trainers.fit recipe=pte_grpo')}`

Load: `model.adapter=<this directory>` in any toolwise recipe, e.g.
`python -m trainers.evaluate.run 'arms.policies=[{{name: pte_grpo, model: {{name: smollm2, adapter: <dir>}}}}]'`.

## Rollouts during training (sampled, temperature {recipe.generation.temperature})

| step | accuracy | tool calls/episode | PTE/episode | format errors | rollout s |
|---|---|---|---|---|---|
{rows}

Wall time {seconds / 60:.1f} min; {metrics['train_steps']} steps; {metrics['lora_tensors_changed']} of
{metrics['lora_tensors']} LoRA tensors changed.

## Config
```yaml
{OmegaConf.to_yaml(recipe, resolve=True)}```
"""
    return str(ModelCard(card))
