"""Reward functions of ``recipe=pte_grpo``: plain top-level functions with TRL's reward signature.

TRL calls each function with the batch's ``prompts`` and ``completions`` plus, as keyword lists, every
field the rollout returned (``trainers/policy/grpo.py``: ``correct``, ``tool_calls``, ``pte``, ``pte_normalised``,
``task_key``, ``otc_best``) and its own extras (``log_metric``, ``trainer_state``). The trainer sums them with
``reward_weights``; the recipe sets those so that

    reward = correctness − λ · PTE / normaliser               (reward.kind = pte)
    reward = correctness × r_tool(m, n)  − λ · PTE / normaliser  (reward.kind = otc)

so λ = 0 is the plain correctness reward. PTE is the PTE paper's (arXiv 2604.05404) prefill-token-equivalent cost of the whole
multi-turn episode (``data_builders/metrics/pte.py``, one function for the evaluator and the reward).
"""
from __future__ import annotations

import math
from typing import Any, Sequence


def correctness(prompts: Sequence[Any], completions: Sequence[Any], correct: Sequence[bool], **kwargs) -> list[float]:
    """1 for a correct final answer (When2Tool scoring, ``data_builders.tasks.scoring``), else 0."""
    _log(kwargs, "rollout/accuracy", [float(c) for c in correct])
    _log(kwargs, "rollout/tool_calls", [float(x) for x in kwargs.get("tool_calls") or []])
    _log(kwargs, "rollout/pte", [float(x) for x in kwargs.get("pte") or []])
    _log(kwargs, "rollout/format_errors", [float(x) for x in kwargs.get("format_errors") or []])
    return [1.0 if c else 0.0 for c in correct]


def pte_cost(prompts: Sequence[Any], completions: Sequence[Any], pte_normalised: Sequence[float],
             **kwargs) -> list[float]:
    """−PTE / normaliser of each episode; the recipe weights it by λ."""
    return [-float(x) for x in pte_normalised]


def otc_tool_score(m: int, n: int | None, c: float = 1.0) -> float:
    """OTC's tool-efficiency term r_tool (Wang et al. 2025, "OTC: Optimal Tool Calls via Reinforcement
    Learning", arXiv 2504.14870, OTC-GRPO). ``m``: this episode's tool calls; ``n``: the fewest calls of a
    correct episode on the same task in the group (the estimate of the optimal count), None when the
    group has no correct episode; ``c``: the smoothing constant of the decay.

    n = 0 (the task can be solved without tools): 1 at m = 0, then cos(m·π / (2m + c)) falls towards 0.
    n > 0: sin(f(m, n)·π / (2n)) with f = 2nm / (m + n), which is 1 exactly at m = n and lower for both
    fewer and more calls. With no correct episode the OTC-PPO form cos(m·π / (2m + c)) is used.
    """
    if m < 0:
        raise ValueError(f"tool calls must be >= 0, got {m}")
    if n is None or n == 0:
        return 1.0 if m == 0 else math.cos(m * math.pi / (2 * m + c))
    f = 2 * n * m / (m + n)
    return math.sin(f * math.pi / (2 * n))


def fewest_correct_calls(task_key: Sequence[str], correct: Sequence[bool],
                         tool_calls: Sequence[int]) -> dict[str, int]:
    """OTC's n per task: the fewest tool calls of a correct episode of that task in the batch; a task with no
    correct episode is absent. The rollout computes it over the *whole* rollout batch, gathered from every rank
    (a GRPO group of ``num_generations`` episodes can span two ranks), and hands it to :func:`otc` per episode
    as ``otc_best``."""
    best: dict[str, int] = {}
    for k, ok, m in zip(task_key, correct, tool_calls):
        if ok and (k not in best or int(m) < best[k]):
            best[k] = int(m)
    return best


def otc(prompts: Sequence[Any], completions: Sequence[Any], correct: Sequence[bool], tool_calls: Sequence[int],
        task_key: Sequence[str], otc_c: Sequence[float] | float = 1.0,
        otc_best: Sequence[int | None] | None = None, **kwargs) -> list[float]:
    """OTC's multiplicative reward: correctness × r_tool(m, n). ``otc_best``: n of each episode's task, computed
    by the rollout over the whole group across ranks (None: no correct episode); without it, n is estimated from
    the episodes given here, which is the whole group in one process (TRL's batches keep a prompt's generations
    together) but only this rank's slice of it under ``accelerate launch``."""
    c = float(otc_c[0] if isinstance(otc_c, (list, tuple)) else otc_c)
    if otc_best is None:
        best = fewest_correct_calls(task_key, correct, tool_calls)
        otc_best = [best.get(k) for k in task_key]
    if len(otc_best) != len(tool_calls):
        raise ValueError(f"otc_best has {len(otc_best)} values for {len(tool_calls)} episodes")
    scores = [otc_tool_score(int(m), None if n is None else int(n), c) for m, n in zip(tool_calls, otc_best)]
    _log(kwargs, "rollout/otc_tool_score", scores)
    return [float(ok) * s for ok, s in zip(correct, scores)]


# kind -> (reward functions, the weight of each given λ)
REWARDS = {
    "pte": ((correctness, pte_cost), lambda lam: [1.0, float(lam)]),
    "otc": ((otc, pte_cost), lambda lam: [1.0, float(lam)]),
}


def reward_setup(kind: str, lam: float) -> tuple[list, list[float]]:
    """The reward functions and TRL ``reward_weights`` of a reward kind."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward kind {kind!r}; choose one of {sorted(REWARDS)}")
    if lam < 0:
        raise ValueError(f"reward.lam must be >= 0 (it weights a cost), got {lam}")
    funcs, weights = REWARDS[kind]
    return list(funcs), weights(lam)


def _log(kwargs: dict, name: str, values: list[float]) -> None:
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and values:
        log_metric(name, sum(values) / len(values))
