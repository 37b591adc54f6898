"""``python -m trainers.evaluate.run``: every arm on the same test tasks, one report.

Arms (``recipes/evaluate.yaml``): the prompt-mode baselines (± Reason-then-Act), Probe&Prefill (soft and
hard prefill over a τ grid), ToolGate (a τ grid), G-STEP, the cascade of the three hooks, and other
policies. Every arm uses the same tasks, policy and decoding; trajectories are cached per (task, arm,
policy, decoding) in ``cache_dir`` so a rerun or a new arm computes only what is missing.

Probe&Prefill is evaluated the way it is deployed but without one rollout per τ: with greedy (or seeded)
decoding an episode depends on the probe only through its round-1 prefill, which is the use-tool sentence
when ``p ≥ τ`` and the skip-tool one otherwise. So the evaluator rolls out every task once with each
prefill, scores every task's probe probability once, and assembles the arm at each τ by picking per task
the trajectory of the decision the probe makes at that τ — the same trajectories its ``GateHook``
produces (tested), at two rollouts per prefill style instead of one per τ.

Rollouts run on the ``executor`` group's engines (``executor=local``: this process; ``executor=ray``: Ray workers,
``data_builders/executors.py``), in units of (arm, shard of the arm's missing tasks); this process alone writes the
cache.

Outputs in the run directory: ``results.json``, ``report.md`` and PNG plots (``trainers/evaluate/report.py``), and
the same in W&B (tables and images; offline without a key).
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

import controllers
import data_builders.tasks as task_sources   # called through the module: tests replace tasks_from_config
from data_builders.agent.hooks import Hooks, PromptState
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.progress import BudgetBar
from data_builders.backends.grammar import import_xgrammar
from data_builders.agent.trajectory import Trajectory, summarize
from data_builders.backends import loading   # called through the module: tests replace backend_from_config
from data_builders.backends import malloc
from data_builders.environments.isolation import announce as announce_sandbox
from data_builders.backends.loading import REPO_ROOT
from data_builders.executors import LocalExecutor, executor_from_config, spread
from data_builders.gates import Gate, gate_named, gates
from data_builders.metrics.patterns import count_patterns
from data_builders.metrics.pte import PTEConfig, trajectory_pte
from data_builders.points.store import load_points
from data_builders.tasks.schema import task_key
from recipes import CONFIG_DIR
from runtime.controller_hooks import Cascade, GateHook, checked
import trainers.evaluate.config  # noqa: F401 - its schemas, stored before Hydra composes
from trainers.evaluate.cache import TrajectoryCache, file_digest, load_scores, store_scores
from trainers.evaluate.report import COLUMNS, metric_rows, write_report
from trainers.intervals import BootstrapSpec, mean_interval, paired_difference_interval
from trainers.tracking import log_report, report_job

CALIBRATED = "calibrated"


@dataclass
class Arm:
    """One evaluated configuration. ``spec`` identifies its trajectories in the cache; ``hooks`` builds the
    agent's hooks (None: a prompt-mode baseline); ``compose`` marks arms assembled from others (probe τ).
    ``agent``: AgentConfig fields merged over the run's agent settings (e.g. ``{"tool_access": "noop"}``);
    ``task_view``: the name of a task transform the caller applies before :func:`run_arm` (the factorized
    framework's oracle views, ``trainers/evaluate/factorized.py``). Both enter :attr:`cache_spec` when set."""

    name: str
    family: str
    spec: dict
    mode: str = "default"
    reasoning: bool = False
    hooks: Callable[[], Any] | None = None
    tau: float | None = None
    backend_key: str = "policy"
    compose: Callable[[dict[str, list[Trajectory]], list[float]], list[Trajectory]] | None = field(default=None,
                                                                                                  repr=False)
    agent: dict = field(default_factory=dict)
    task_view: str | None = None

    @property
    def cache_spec(self) -> dict:
        """``spec`` plus the agent overrides and task view; exactly ``spec`` for an arm without them."""
        extra = {**({"agent": dict(sorted(self.agent.items()))} if self.agent else {}),
                 **({"task_view": self.task_view} if self.task_view else {})}
        return {**self.spec, **extra}


@dataclass
class Loaded:
    """A controller checked against the policy, its checkpoint directory and its weights' hash (cache key)."""

    controller: Any
    path: Path
    digest: str


# ---------------------------------------------------------------------------- arms
def gate_arms(arms: DictConfig) -> list[Gate]:
    """The run's gate arms (``arms.<gate>`` set, with a checkpoint), in the registry's order."""
    return [g for g in gates().values() if arms.get(g.name) and arms[g.name].get("checkpoint") is not None]


def _checkpoint_dir(path: str) -> Path:
    p = Path(path)
    return p if p.exists() else REPO_ROOT / p


def load_controllers(cfg: DictConfig) -> dict[str, tuple[Any, Path, str]]:
    """Gate name -> (controller, checkpoint directory, gate) for every gate arm of the run, each checked as far as
    it can be without the policy: the directory exists, ``config.json`` parses with a feature contract, the
    safetensors file is complete with finite weights (:func:`controllers.load`), and the contract's featurizer is
    the gate's. Called before the policy loads (tens of seconds), so a missing or truncated checkpoint fails
    at once; the error names the arm, the checkpoint as configured and the file at fault."""
    out = {}
    for gate in gate_arms(cfg.arms):
        given = cfg.arms[gate.name].checkpoint
        path = _checkpoint_dir(given)
        try:
            out[gate.name] = (checked(controllers.load(path), gate.name, None, strict=False), path, gate.name)
        except (controllers.ControllerLoadError, controllers.ContractMismatch) as e:
            raise type(e)(f"arms.{gate.name}.checkpoint={given}: {e}") from None
    return out


def _controller(found: tuple[Any, Path, str], policy: str, strict: bool) -> Loaded:
    """A controller from :func:`load_controllers`, its contract checked against ``policy`` now that it is known."""
    controller, p, gate = found
    return Loaded(checked(controller, gate, policy, strict=strict), p, file_digest(p / "model.safetensors"))


def _tau(value, controller) -> float:
    return float(controller.tau) if value == CALIBRATED else float(value)


def build_arms(cfg: DictConfig, policy: str, call_format: str,
               found: dict[str, tuple[Any, Path, str]] | None = None) -> tuple[list[Arm], dict]:
    """All arms of the run, and the loaded controllers by gate label (for their AUROC in the report). ``found``:
    the controllers :func:`load_controllers` loaded before the policy (default: loaded here).

    A gate at ``pre_generation`` (Probe&Prefill) only picks the first turn's response prefill, so its arms are
    assembled per task from the two prefill arms of each style (``compose``); every other gate's arm runs its hook
    at each τ. Arm names and cache keys use the gate's ``label``."""

    a = cfg.arms
    found = load_controllers(cfg) if found is None else found
    arms: list[Arm] = []
    loaded: dict[str, Loaded] = {}
    for constrained in a.get("constrained_calls") or [False]:
        for reasoning in a.reasoning:
            for mode in a.modes:
                name = mode + ("+rta" if reasoning else "") + ("+cc" if constrained else "")
                arms.append(Arm(name, "prompt", {"name": name, "mode": mode, "reasoning": bool(reasoning)}, mode,
                                bool(reasoning), agent={"constrained_calls": True} if constrained else {}))

    for gate in gate_arms(a):
        this = loaded[gate.label] = _controller(found[gate.name], policy, a.strict_contracts)
        controller, h, arm_cfg = this.controller, this.digest, a[gate.name]
        taus = sorted({_tau(t, controller) for t in arm_cfg.taus})
        if gate.moment == "pre_generation":
            for style in arm_cfg.styles:
                for decision in gate.actions:
                    text = gate.act(decision, style=style, call_format=call_format)
                    arms.append(Arm(f"prefill_{style}_{decision}", "prefill",
                                    {"name": f"prefill_{style}_{decision}", "mode": "default", "prefill": text},
                                    hooks=lambda text=text: _fixed_prefill(text)))
                for tau in taus:
                    arms.append(Arm(f"{gate.label}_{style}@{tau:.2f}", f"{gate.label}_{style}",
                                    {gate.label: h, "style": style, "tau": tau}, tau=tau,
                                    compose=_prefill_composer(gate, style, tau)))
            continue
        # the gate's support limit decides some episodes (GateHook's default): part of the arm's identity
        limit = {"support_z": gate.support_z} if gate.support_z is not None else {}
        for tau in taus:
            arms.append(Arm(f"{gate.label}@{tau:.2f}", gate.label, {"name": gate.label, "gate": h, "tau": tau, **limit},
                            tau=tau, hooks=lambda gate=gate, c=controller, tau=tau: GateHook(gate, c, tau)))
    in_cascade = gate_arms(a)
    if a.get("cascade") and len(in_cascade) >= 2:
        parts = [(g, loaded[g.label]) for g in in_cascade]
        options = {k: v for g, _ in parts for k, v in g.options.items()}
        spec = {"name": "cascade", **{g.label: ld.digest for g, ld in parts},
                "taus": [ld.controller.tau for _, ld in parts], **options,
                **({"support_z": [g.support_z for g, _ in parts]} if any(g.support_z for g, _ in parts) else {})}
        arms.append(Arm("cascade", "cascade", spec, hooks=lambda: Cascade(
            *(GateHook(g, ld.controller, None, {"call_format": call_format} if g.moment == "pre_generation" else {})
              for g, ld in parts))))
    for p in a.get("policies") or []:
        arms.append(Arm(p["name"], "policy", {"name": p["name"], "mode": "default",
                                               "model": OmegaConf.to_container(p["model"], resolve=True)},
                        backend_key=p["name"]))
    return arms, loaded


def _fixed_prefill(text: str):
    """Hooks giving the round-1 prefill a Probe&Prefill hook produces for one decision (to assemble τ sweeps)."""

    class FixedPrefill(Hooks):
        def pre_generation(self, task, state):
            return text

    return FixedPrefill()


def _prefill_composer(gate: Gate, style: str, tau: float):
    """A pre_generation gate's arm at τ from its two prefill arms: each task's trajectory is the one of the
    decision the gate makes at τ (the same trajectory its hook would produce), with the gate's p."""
    positive, negative = gate.actions

    def compose(by_arm: dict[str, list[Trajectory]], probs: list[float]) -> list[Trajectory]:
        pos, neg = by_arm[f"prefill_{style}_{positive}"], by_arm[f"prefill_{style}_{negative}"]
        return [dataclasses.replace(u if p >= tau else s, probe_p=p) for u, s, p in zip(pos, neg, probs)]
    return compose


# ---------------------------------------------------------------------------- rollouts
def arm_shard(engine, shard: tuple, progress) -> tuple[list[Trajectory], float]:
    """One unit of work: ``(arm, tasks, agent settings)`` on ``engine`` (where it runs: here or a Ray worker, which
    gets the arm with its hooks' controllers, small, from the driver). Returns the trajectories in task order and
    the seconds they took; ``progress`` gets each as it finishes."""
    arm, tasks, agent_kw = shard
    agent = Agent(engine, AgentConfig(mode=arm.mode, reasoning=arm.reasoning, **{**agent_kw, **arm.agent}),
                  arm.hooks() if arm.hooks else None)
    start = time.perf_counter()
    trajs = agent.run(tasks, on_done=progress)
    return trajs, time.perf_counter() - start


def run_arms(executor, jobs: list[tuple[Arm, list, TrajectoryCache]], agent_kw: dict, workers: int = 1,
             shard_size: int | None = None) -> dict[str, tuple[list[Trajectory], float, int]]:
    """Each job's arm on its tasks (cached ones reused): by arm name, (trajectories, seconds, computed).

    The unit of work is (arm, shard of the arm's missing tasks): on the local executor one shard per arm, arms
    in order (one batched agent each); on Ray the shards of every arm at once, spread over the workers. The
    cache is the single merge point: this process stores each shard as it returns, and on a failure the
    episodes that finished, so a rerun computes only the rest."""
    state: dict[str, tuple[Arm, list, TrajectoryCache, dict, list]] = {}
    items = []
    for arm, tasks, cache in jobs:
        have, todo = cache.missing(arm.cache_spec, tasks)
        state[arm.name] = (arm, tasks, cache, have, todo)
        shards = [todo] if executor.name == "local" else spread(todo, workers, shard_size)
        items += [((arm.name, j), (arm, shard, agent_kw)) for j, shard in enumerate(shards) if shard]
    finished: dict[str, list[Trajectory]] = {name: [] for name in state}
    seconds = dict.fromkeys(state, 0.0)
    payloads = dict(items)
    # the bar counts generated tokens (data_builders/progress.py), finished tasks in its postfix
    with BudgetBar("arms", {key: len(payload[1]) for key, payload in items}, leave=False) as bar:
        def progress(key, traj: Trajectory) -> None:
            finished[key[0]].append(traj)
        try:
            for (name, j), (trajs, took) in executor.map(arm_shard, items, on_progress=progress,
                                                         on_tick=bar.tick, on_work=bar.work):
                arm, _, cache, have, _ = state[name]
                cache.store(arm.cache_spec, have, list(zip(payloads[name, j][1], trajs)))
                seconds[name] += took
        except BaseException:
            for name, (arm, _, cache, have, todo) in state.items():
                if finished[name]:
                    cache.store(arm.cache_spec, have, _match_tasks(todo, finished[name]))
            raise
    return {name: ([have[task_key(t)] for t in tasks], seconds[name], len(todo))
            for name, (arm, tasks, cache, have, todo) in state.items()}


def run_arm(arm: Arm, backend, tasks, cache: TrajectoryCache, agent_kw: dict) -> tuple[list[Trajectory], float, int]:
    """The arm's trajectories for ``tasks`` (cached ones reused) on a loaded engine, in this process; returns
    (trajectories, seconds, computed)."""
    return run_arms(LocalExecutor.on(backend), [(arm, tasks, cache)], agent_kw)[arm.name]


def _match_tasks(tasks, trajs: list[Trajectory]) -> list[tuple[Any, Trajectory]]:
    """(task, trajectory) pairs for trajectories reported in completion order: a trajectory names its task by id,
    environment and gold answer; one that matches no task, or several, is left out (it is recomputed)."""
    by_key: dict[tuple, list] = {}
    for t in tasks:
        by_key.setdefault((t.id, t.env.name, t.answer), []).append(t)
    pairs = []
    for tr in trajs:
        match = by_key.get((tr.task_id, tr.env, tr.gold), [])
        if len(match) == 1:
            pairs.append((match[0], tr))
    return pairs


def first_prompt_shard(engine, shard: tuple, progress) -> list[float]:
    """A pre_generation gate's p for each task's first prompt, read on ``engine`` (the gate's name and controller
    travel with the shard): one prefill pass over the prompts, then the gate's run-time input per task."""
    name, controller, tasks, agent_kw = shard
    gate = gate_named(name)
    agent = Agent(engine, AgentConfig(mode="default", **agent_kw))
    prompts = [agent.initial_prompt(t) for t in tasks]
    state = engine.prefill(prompts, gate.hidden_layers(controller))
    x = torch.cat([gate.run_input(PromptState(prompt, [], state.hidden[i], state.layers))
                   for i, prompt in enumerate(prompts)])
    return controller.predict_proba(x).tolist()


def first_prompt_probabilities(gate: Gate, controller, executor, tasks, agent_kw: dict, cache_root: Path,
                               digest: str, workers: int = 1, shard_size: int | None = None) -> list[float]:
    """A pre_generation gate's p for every task's first prompt (cached per controller, policy and task);
    ``executor`` runs the missing ones."""
    name = f"{gate.label}_p-{digest}"
    have = load_scores(cache_root, name)
    todo = [t for t in tasks if task_key(t) not in have]
    if todo:
        shards = [todo] if executor.name == "local" else spread(todo, workers, shard_size)
        for j, p in executor.map(first_prompt_shard, [(j, (gate.name, controller, s, agent_kw))
                                                      for j, s in enumerate(shards)]):
            new = {task_key(t): float(v) for t, v in zip(shards[j], p)}
            store_scores(cache_root, name, new)    # as each shard returns, like the trajectories
            have |= new
    return [have[task_key(t)] for t in tasks]


# ---------------------------------------------------------------------------- metrics
def arm_metrics(trajs: list[Trajectory], gamma: float, pte_cfg) -> dict:


    n = len(trajs)
    s = summarize(trajs)
    s["pte_per_task"] = sum(trajectory_pte(t, gamma, cache_reuse=pte_cfg.cache_reuse) for t in trajs) / max(n, 1)
    s["latency_s_per_task"] = sum(sum(tr.wall_s or 0.0 for tr in t.turns) for t in trajs) / max(n, 1)
    s["skipped_calls_per_task"] = sum(sum(c.status == "skipped" for c in t.calls) for t in trajs) / max(n, 1)
    s["continues_per_task"] = sum(sum(d.hook == "on_answer" and d.decision == "continue"
                                      for d in t.decisions) for t in trajs) / max(n, 1)
    return s


def grouped(trajs: list[Trajectory], gamma: float, pte_cfg, values: dict[str, np.ndarray] | None = None,
            spec: BootstrapSpec | None = None) -> dict:
    """Each category's and difficulty's metrics; with the arm's :func:`per_task` ``values`` and ``spec``, a
    bootstrap interval over that group's tasks for its accuracy and calls per task (``ci``), so a per-category
    figure says how far it can be trusted."""
    out: dict[str, dict] = {}
    for key in ("category", "difficulty"):
        for value in sorted({getattr(t, key) for t in trajs}):
            idx = [i for i, t in enumerate(trajs) if getattr(t, key) == value]
            out[f"{key}={value}"] = m = arm_metrics([trajs[i] for i in idx], gamma, pte_cfg)
            if values is not None and spec is not None:
                m["ci"] = {k: (None if ci is None else [ci[0], ci[1]])
                           for k in ("accuracy", "tool_calls_per_task") for ci in [mean_interval(values[k][idx], spec)]}
    return out


def deltas(metrics: dict, reference: str) -> dict:
    """ΔAcc (points), ΔTC (calls per task), ΔPTE (per task) and ΔAcc/−ΔTC against the reference arm (When2Tool,
    Table 3)."""
    ref = metrics[reference]["all"]
    out = {}
    for name, m in metrics.items():
        d_acc = 100 * (m["all"]["accuracy"] - ref["accuracy"])
        d_tc = m["all"]["tool_calls_per_task"] - ref["tool_calls_per_task"]
        out[name] = {"d_acc": d_acc, "d_tc": d_tc, "d_acc_per_saved_call": (d_acc / -d_tc) if d_tc < 0 else None}
        if "pte_per_task" in m["all"] and "pte_per_task" in ref:
            out[name]["d_pte"] = m["all"]["pte_per_task"] - ref["pte_per_task"]
    return out


# The headline numbers that get intervals: an arm's metric -> the delta named after it, and the delta's scale.
INTERVAL_METRICS = {"accuracy": ("d_acc", 100.0), "tool_calls_per_task": ("d_tc", 1.0), "pte_per_task": ("d_pte", 1.0)}


def per_task(trajs: list[Trajectory], gamma: float, pte_cfg) -> dict[str, np.ndarray]:
    """Each headline metric's per-task values, in task order: the arm's metric is their mean."""
    return {"accuracy": np.array([float(t.correct) for t in trajs]),
            "tool_calls_per_task": np.array([float(t.tool_calls) for t in trajs]),
            "pte_per_task": np.array([trajectory_pte(t, gamma, cache_reuse=pte_cfg.cache_reuse) for t in trajs])}


def intervals(values: dict[str, dict[str, np.ndarray]], reference: str, spec: BootstrapSpec) -> tuple[dict, dict]:
    """Bootstrap intervals over tasks (trainers/intervals.py): per arm, of each headline metric; and of each delta
    against ``reference``, paired (the same resampled tasks for both arms, which ran on the same tasks). Values
    are ``[low, high]``, None with fewer than two tasks."""
    def pair(ci):
        return None if ci is None else [ci[0], ci[1]]

    ref = values[reference]
    arms, diffs = {}, {}
    for name, v in values.items():
        arms[name] = {k: pair(mean_interval(v[k], spec)) for k in INTERVAL_METRICS}
        diffs[name] = {}
        for k, (d, scale) in INTERVAL_METRICS.items():
            ci = paired_difference_interval(v[k], ref[k], spec)
            diffs[name][d] = None if ci is None else [scale * ci[0], scale * ci[1]]
    return arms, diffs


def curve_area(points: list[tuple[float, float]], x_max: float) -> float | None:
    """Area under accuracy vs tool calls per task, calls normalised by ``x_max`` (the most calls of any arm)
    and the curve held flat beyond its end points: 1.0 would be full accuracy at zero calls."""
    if len(points) < 2 or x_max <= 0:
        return None
    pts = sorted((x / x_max, y) for x, y in points)
    xs = [0.0] + [p[0] for p in pts] + [1.0]
    ys = [pts[0][1]] + [p[1] for p in pts] + [pts[-1][1]]
    return float(np.trapezoid(ys, xs))


# ---------------------------------------------------------------------------- run
# The agent settings evaluate.yaml and factorized.yaml listed before they took the ``agent`` group: they always
# enter the trajectory cache key, so caches written with those files still hit.
CACHE_KEY_AGENT_FIELDS = ("call_format", "max_rounds", "max_new_tokens", "temperature", "top_p", "seed",
                          "max_in_flight", "max_continues", "verify_rounds", "logprobs")


def decoding_key(agent_kw: dict) -> dict:
    """The agent settings that key cached trajectories: :data:`CACHE_KEY_AGENT_FIELDS`, plus any other
    AgentConfig field set away from its default (a field at its default changes no trajectory)."""
    defaults = {f.name: f.default for f in dataclasses.fields(AgentConfig)}
    return {k: v for k, v in agent_kw.items() if k in CACHE_KEY_AGENT_FIELDS or v != defaults[k]}


@dataclass
class PolicyRun:
    """What every report command (this one, ``trainers.evaluate.factorized``) sets up the same way: the policy on its
    engine, one decoding, PTE's γ and the trajectory cache keyed by policy and decoding."""

    backend: Any
    agent_kw: dict
    pte_cfg: Any
    gamma: float
    decoding: dict
    cache: TrajectoryCache

    @classmethod
    def from_config(cls, cfg: DictConfig, backend: Any = None) -> "PolicyRun":
        """``backend``: the engine, or an executor's :class:`EngineInfo` for one that runs elsewhere (default: the
        policy loaded here)."""
        backend = backend if backend is not None else loading.backend_from_config(cfg.model, cfg.get("backend"))
        agent_kw = OmegaConf.to_container(cfg.agent, resolve=True)
        pte_cfg = PTEConfig(hardware=OmegaConf.to_container(cfg.hardware, resolve=True),
                            **OmegaConf.to_container(cfg.pte, resolve=True))
        decoding = {**decoding_key(agent_kw), "split": cfg.split}
        return cls(backend, agent_kw, pte_cfg, pte_cfg.gamma_for(backend), decoding,
                   TrajectoryCache(cfg.cache_dir, backend.fingerprint, decoding))

    def provenance(self, cfg: DictConfig) -> dict:
        """results.json's record of what was run: tasks, split, policy, engine, decoding and PTE pricing."""
        return {"task_source": OmegaConf.to_container(cfg.tasks, resolve=True), "split": cfg.split,
                "policy": self.backend.fingerprint, "backend": getattr(self.backend, "name", type(self.backend).__name__),
                "decoding": self.decoding, "gamma": self.gamma, "hardware": self.pte_cfg.profile.name,
                "pte": OmegaConf.to_container(cfg.pte)}

    def cache_stats(self) -> dict:
        return {"dir": str(self.cache.root), "hits": self.cache.hits, "misses": self.cache.misses}


def save_results(results: dict, out_dir: Path, write_report: Callable[[dict, Path], list[Path]]) -> list[Path]:
    """``results.json`` and the command's report (markdown + plots) in ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return write_report(results, out_dir)


def planned_arm_names(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """The names of the arms ``cfg`` runs that the config alone fixes, and the families whose arm names depend on a
    checkpoint's calibrated τ (known once the controller loads). Prefill arms are inputs of the probe arms, not
    arms of the report."""
    a = cfg.arms
    names = [mode + ("+rta" if reasoning else "") + ("+cc" if constrained else "")
             for constrained in a.get("constrained_calls") or [False] for reasoning in a.reasoning for mode in a.modes]
    calibrated = []
    families = [(f"{g.label}_{style}" if g.moment == "pre_generation" else g.label, g.name, a[g.name].taus)
                for g in gate_arms(a) for style in (a[g.name].styles if g.moment == "pre_generation" else [None])]
    for family, key, taus in families:
        for t in taus:
            if t == CALIBRATED:
                continue
            try:
                ok = 0.0 <= float(t) <= 1.0   # NaN fails too: a τ outside [0, 1] acts always or never
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"arms.{key}.taus: {t!r} is not a probability in [0, 1] or {CALIBRATED!r}")
        names += [f"{family}@{float(t):.2f}" for t in taus if t != CALIBRATED]
        if CALIBRATED in list(taus):
            calibrated.append(family)
    if a.get("cascade") and len(gate_arms(a)) >= 2:
        names.append("cascade")
    names += [p["name"] for p in a.get("policies") or []]
    return names, calibrated


def check_config(cfg: DictConfig) -> None:
    """What can be checked before the policy loads: each arm's agent settings (a misspelt prompt mode) and that
    ``reference`` is an arm of this run (Δs against an arm that is not run would silently use another)."""
    agent_kw = OmegaConf.to_container(cfg.agent, resolve=True)
    for mode in cfg.arms.modes:
        AgentConfig(**{**agent_kw, "mode": mode})
    if (agent_kw.get("constrained_calls") or any(cfg.arms.get("constrained_calls") or [])):
        import_xgrammar()   # fail before the policy loads, with the pip command
    names, calibrated = planned_arm_names(cfg)
    family, at, _ = cfg.reference.partition("@")
    if cfg.reference in names or (at and family in calibrated):
        return
    listed = names + [f"{f}@<its calibrated τ>" for f in calibrated]
    raise ValueError(f"reference={cfg.reference!r} is not an arm of this run; arms: {', '.join(listed)}")


def unseen_tasks(tasks: list, points_dirs) -> list:
    """``tasks`` less those that any of ``points_dirs`` (decision-point datasets; every split) holds, matched by task
    id, which names the same instance only under the same task options (a smaller draw is a prefix of a larger
    one: tasks.train_n_per_* keep the ids). Leaves controllers scored on tasks they were neither fit nor
    calibrated on, e.g. a larger train draw on which to choose τ before the test split is looked at."""
    seen: set[str] = set()
    for d in points_dirs:
        seen |= {str(i) for i in load_points(d, features=False).points["task_id"]}
    kept = [t for t in tasks if str(t.id) not in seen]
    if points_dirs:
        if not kept:
            raise ValueError(f"exclude_points={list(points_dirs)} leaves none of the {len(tasks)} tasks")
        print(f"exclude_points: {len(tasks) - len(kept)} of {len(tasks)} tasks left out, {len(kept)} evaluated")
    return kept


def run(cfg: DictConfig) -> dict:
    out_dir = Path(cfg.out_dir)
    check_config(cfg)
    found = load_controllers(cfg)   # before the policy: a bad checkpoint fails in milliseconds, not after ~20 s
    announce_sandbox(cfg)
    excluded = list(cfg.get("exclude_points") or [])
    tasks = unseen_tasks(task_sources.tasks_from_config(cfg), excluded)
    ex_cfg = cfg.get("executor")
    spread_kw = {"workers": ex_cfg.workers, "shard_size": ex_cfg.shard_size} if ex_cfg and ex_cfg.name == "ray" else {}
    with executor_from_config(ex_cfg, cfg.model, cfg.get("backend")) as executor:
        ctx = PolicyRun.from_config(cfg, executor.info)
        agent_kw, pte_cfg, gamma, decoding, cache = ctx.agent_kw, ctx.pte_cfg, ctx.gamma, ctx.decoding, ctx.cache
        call_format = Agent(executor.info, AgentConfig(**agent_kw)).call_format
        arms, loaded = build_arms(cfg, executor.info.fingerprint, call_format, found)
        reported = [a.name for a in arms if not a.name.startswith("prefill_")]
        if cfg.reference not in reported:    # a calibrated τ's arm name is known only now; before any rollout
            raise ValueError(f"reference={cfg.reference!r} is not an arm of this run; arms: {', '.join(reported)}")

        start = time.perf_counter()
        runs = run_arms(executor, [(a, tasks, cache) for a in arms if a.compose is None and a.backend_key == "policy"],
                        agent_kw, **spread_kw)
        probs = None
        first = [g for g in gate_arms(cfg.arms) if g.moment == "pre_generation"]
        if first:           # composed arms: one pre_generation gate per run (its p picks each task's prefill)
            probs = first_prompt_probabilities(first[0], loaded[first[0].label].controller, executor, tasks,
                                               agent_kw, cache.root, loaded[first[0].label].digest, **spread_kw)
    # Other policies after the policy's workers are gone: on Ray they would otherwise wait for its resources.
    for p in cfg.arms.get("policies") or []:
        with executor_from_config(ex_cfg, p["model"], cfg.get("backend")) as other:
            arm_cache = TrajectoryCache(cfg.cache_dir, other.info.fingerprint, decoding)
            runs |= run_arms(other, [(a, tasks, arm_cache) for a in arms if a.backend_key == p["name"]], agent_kw,
                             **spread_kw)
    by_arm: dict[str, list[Trajectory]] = {}
    timing: dict[str, dict] = {}
    for arm in arms:
        if arm.compose is not None:
            by_arm[arm.name] = arm.compose(by_arm, probs)
            continue
        trajs, seconds, computed = runs[arm.name]
        by_arm[arm.name] = trajs
        timing[arm.name] = {"seconds": round(seconds, 2), "computed": computed, "cached": len(tasks) - computed}
        cut = sum(t.ended == "context_length" for t in trajs)    # scored wrong; said, not hidden in the accuracy
        print(f"{arm.name:<24} {computed:>4} computed {len(tasks) - computed:>4} cached  {seconds:7.1f} s"
              + (f"  {cut} ended [CONTEXT_LENGTH_EXCEEDED]" if cut else ""))
    wall = time.perf_counter() - start

    spec = BootstrapSpec(**OmegaConf.to_container(cfg.bootstrap, resolve=True))
    # each arm's per-task values, once: the headline intervals and the per-group ones resample the same numbers
    values = {name: per_task(t, gamma, pte_cfg) for name, t in by_arm.items() if not name.startswith("prefill_")}
    metrics = {name: {"all": arm_metrics(by_arm[name], gamma, pte_cfg),
                      **grouped(by_arm[name], gamma, pte_cfg, values[name], spec)} for name in values}
    for name in metrics:
        metrics[name]["patterns"] = count_patterns(by_arm[name])
    reference = cfg.reference
    arm_ci, delta_ci = intervals(values, reference, spec)
    delta = deltas(metrics, reference)
    for name in metrics:
        metrics[name]["ci"] = arm_ci[name]
        delta[name]["ci"] = delta_ci[name]
    x_max = max(m["all"]["tool_calls_per_task"] for m in metrics.values()) if metrics else 0.0
    families = {}
    for arm in arms:
        if arm.name in metrics and arm.tau is not None:
            families.setdefault(arm.family, []).append(arm.name)
    curves = {f: {"arms": names, "area": curve_area([(metrics[n]["all"]["tool_calls_per_task"],
                                                       metrics[n]["all"]["accuracy"]) for n in names], x_max)}
              for f, names in families.items()}
    controllers = {k: {"checkpoint": str(c.path), "tau": c.controller.tau, "temperature": c.controller.temperature,
                       "test_auroc": _ckpt_metric(c.path), "test_auroc_ci": _ckpt_metric(c.path, "auroc_ci")}
                   for k, c in loaded.items()}
    results = {"tasks": len(tasks), **ctx.provenance(cfg), "exclude_points": excluded,
               "reference": reference, "arms": metrics, "deltas": delta,
               "bootstrap": {**spec.as_dict(), "unit": "task"}, "curves": curves, "controllers": controllers,
               "timing": timing, "wall_s": round(wall, 2), "cache": ctx.cache_stats()}
    files = save_results(results, out_dir, write_report)
    _log_wandb(cfg, results, files)
    print((out_dir / "report.md").read_text().split("\n## ", 2)[1][:4000])
    print(f"results: {out_dir / 'results.json'}  report: {out_dir / 'report.md'}")
    print(f"arms={len(metrics)} tasks={len(tasks)} computed={cache.misses} cached={cache.hits} wall_s={wall:.1f}")
    return results


def _ckpt_metric(path: Path, key: str = "auroc"):
    """A controller's test-split metric from its checkpoint's metrics.json (the fit computed it on its
    decision points); None when the checkpoint has no metrics or not that one (older fits: no ``auroc_ci``)."""
    m = path / "metrics.json"
    if not m.exists():
        return None
    return json.loads(m.read_text())["splits"]["test"]["all"].get(key)


def _log_wandb(cfg: DictConfig, results: dict, files: list[Path]) -> None:

    cols = ["arm"] + [c[0] for c in COLUMNS]
    rows = metric_rows((((name,), m["all"]) for name, m in results["arms"].items()), COLUMNS)
    log_report(cfg, "evaluate", {"arms": (cols, rows)}, files)


def renamed_arm_overrides(argv: list[str]) -> list[str]:
    """``argv`` with each deprecated ``arms.<label>`` override (an arm once keyed by its gate's label, e.g.
    ``arms.probe`` for ``arms.probe_prefill``) renamed to the gate's ``arms.<name>``, with a warning."""
    out = []
    for arg in argv:
        for gate in gates().values():
            if gate.label != gate.name:
                new = re.sub(rf"^([+~]*)arms\.{re.escape(gate.label)}(?=[.=]|$)", rf"\1arms.{gate.name}", arg)
                if new != arg:
                    warnings.warn(f"{arg.split('=')[0]}: deprecated, the arm is keyed by its gate's name now "
                                  f"({new.split('=')[0]})", FutureWarning, stacklevel=2)
                    arg = new
        out.append(arg)
    return out


@malloc.cli_opt_in   # this process is the job's: CPU backends may tune malloc (data_builders/backends/malloc.py)
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="evaluate")
def main(cfg: DictConfig) -> None:

    report_job(cfg, run)


if __name__ == "__main__":
    sys.argv[1:] = renamed_arm_overrides(sys.argv[1:])
    main()
