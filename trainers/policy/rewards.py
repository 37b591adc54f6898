"""Reward functions of ``recipe=pte_grpo``: plain top-level functions with TRL's reward signature.

TRL calls each function with the batch's ``prompts`` and ``completions`` plus, as keyword lists, every
field the rollout returned (``trainers/policy/grpo.py``: ``correct``, ``tool_calls``, ``pte``, ``pte_normalised``,
``task_key``, ``otc_best``) and its own extras (``log_metric``, ``trainer_state``). The trainer sums them with
``reward_weights``; the recipe sets those so that

    reward = correctness − λ · PTE / normaliser               (reward.kind = pte)
    reward = correctness × r_tool(m, n)  − λ · PTE / normaliser  (reward.kind = otc)
    reward = correctness − λ · (m − n)⁺ / max(m, 1)             (reward.kind = balanced)
    advantage = A_acc + λ · A_eff                               (reward.kind = hdpo; TRL's scale_rewards=none)

so λ = 0 is the plain correctness reward (``m``: the episode's tool calls; ``n``: the fewest calls of a correct
episode of the same task in the group). PTE is the PTE paper's (arXiv 2604.05404) prefill-token-equivalent cost of
the whole multi-turn episode (``data_builders/metrics/pte.py``, one function for the evaluator and the reward).
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
    otc_best = _group_best(task_key, correct, tool_calls, otc_best)
    scores = [otc_tool_score(int(m), None if n is None else int(n), c) for m, n in zip(tool_calls, otc_best)]
    _log(kwargs, "rollout/otc_tool_score", scores)
    return [float(ok) * s for ok, s in zip(correct, scores)]


def _group_best(task_key: Sequence[str], correct: Sequence[bool], tool_calls: Sequence[int],
                otc_best: Sequence[int | None] | None) -> list[int | None]:
    """Each episode's n (fewest calls of a correct episode of its task in the group), as the rollout gave it
    (computed over every rank's episodes) or from the episodes given here."""
    if otc_best is None:
        best = fewest_correct_calls(task_key, correct, tool_calls)
        otc_best = [best.get(k) for k in task_key]
    if len(otc_best) != len(tool_calls):
        raise ValueError(f"otc_best has {len(otc_best)} values for {len(tool_calls)} episodes")
    return list(otc_best)


def unnecessary_calls(prompts: Sequence[Any], completions: Sequence[Any], correct: Sequence[bool],
                      tool_calls: Sequence[int], task_key: Sequence[str],
                      otc_best: Sequence[int | None] | None = None, **kwargs) -> list[float]:
    """−(m − n)⁺ / max(m, 1): the share of an episode's calls that its group showed unnecessary (a correct episode
    of the same task made only n), in [−1, 0]; 0 where no episode of the task was correct (nothing shows a call
    was unnecessary). ``reward.kind=balanced`` weighs it by λ beside correctness: the tool-overuse paper's (arXiv
    2604.19749) finding is that an outcome-only reward teaches overuse, and that balancing it with a term for
    unnecessary calls cuts them by 61-67 % at 7B/32B without losing accuracy. This term is toolwise's rendering of
    that balance (the share keeps it on correctness's 0-1 scale, so λ = 1 prices all calls unnecessary at one
    answer), not the paper's code."""
    best = _group_best(task_key, correct, tool_calls, otc_best)
    out = [0.0 if n is None else -max(int(m) - int(n), 0) / max(int(m), 1) for m, n in zip(tool_calls, best)]
    _log(kwargs, "rollout/unnecessary_call_share", [-x for x in out])
    return out


def _groups(task_key: Sequence[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, k in enumerate(task_key):
        out.setdefault(k, []).append(i)
    return out


def _standardised(values: list[float], eps: float = 1e-6) -> list[float]:
    """(x − mean) / (std + eps), the population std (as TRL's group scaling); all 0 for fewer than 2 values."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / (std + eps) for v in values]


def hdpo_accuracy(prompts: Sequence[Any], completions: Sequence[Any], correct: Sequence[bool],
                  task_key: Sequence[str], **kwargs) -> list[float]:
    """HDPO's accuracy advantage (Metis, arXiv 2604.08545): correctness standardised within each task's group."""
    _log(kwargs, "rollout/accuracy", [float(c) for c in correct])
    _log(kwargs, "rollout/tool_calls", [float(x) for x in kwargs.get("tool_calls") or []])
    out = [0.0] * len(correct)
    for idx in _groups(task_key).values():
        for i, a in zip(idx, _standardised([float(correct[i]) for i in idx])):
            out[i] = a
    return out


def hdpo_efficiency(prompts: Sequence[Any], completions: Sequence[Any], correct: Sequence[bool],
                    tool_calls: Sequence[int], task_key: Sequence[str], **kwargs) -> list[float]:
    """HDPO's efficiency advantage: fewer tool calls, standardised among the *correct* episodes of each task's
    group only (0 for a wrong episode, and for a group with fewer than 2 correct ones). Kept apart from the
    accuracy advantage because a cost added to the reward is washed out by the group normalisation of a batch where
    correctness varies: here an efficient wrong answer earns nothing for its efficiency."""
    out = [0.0] * len(correct)
    for idx in _groups(task_key).values():
        right = [i for i in idx if correct[i]]
        for i, a in zip(right, _standardised([-float(tool_calls[i]) for i in right])):
            out[i] = a
    return out


# kind -> (reward functions, the weight of each given λ, the TRL reward scaling the kind needs or None)
REWARDS = {
    "pte": ((correctness, pte_cost), lambda lam: [1.0, float(lam)], None),
    "otc": ((otc, pte_cost), lambda lam: [1.0, float(lam)], None),
    "balanced": ((correctness, unnecessary_calls), lambda lam: [1.0, float(lam)], None),
    # each function is an advantage already (zero mean per group): TRL's group mean subtracts nothing, and
    # scaling by the sum's std would mix the two again
    "hdpo": ((hdpo_accuracy, hdpo_efficiency), lambda lam: [1.0, float(lam)], "none"),
}


def reward_setup(kind: str, lam: float) -> tuple[list, list[float]]:
    """The reward functions and TRL ``reward_weights`` of a reward kind."""
    if kind not in REWARDS:
        raise ValueError(f"unknown reward kind {kind!r}; choose one of {sorted(REWARDS)}")
    if lam < 0:
        raise ValueError(f"reward.lam must be >= 0 (it weights a cost), got {lam}")
    funcs, weights, _ = REWARDS[kind]
    return list(funcs), weights(lam)


def reward_scaling(kind: str, scale_rewards: str) -> str:
    """TRL's ``scale_rewards`` for a run of reward ``kind``: the kind's own where it needs one (hdpo: ``none``),
    else the recipe's."""
    need = REWARDS[kind][2]
    return scale_rewards if need is None else need


def _log(kwargs: dict, name: str, values: list[float]) -> None:
    log_metric = kwargs.get("log_metric")
    if log_metric is not None and values:
        log_metric(name, sum(values) / len(values))
