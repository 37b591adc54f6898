"""Post-hoc calibration on the validation split: a logit temperature, then the decision threshold τ.

Temperature scaling (Guo et al. 2017) fits one scalar ``T`` minimising the validation NLL of ``logits / T``;
it changes probabilities, not the ranking (AUROC is unchanged). τ is then chosen on the calibrated
validation probabilities by one of three rules:

* ``fixed``: ``τ = value`` (When2Tool reports τ = 0.5; the tool-use-tax paper uses 0.05).
* ``target_call_rate``: the τ at which a share ``value`` of validation points take the positive action
  (call / execute / continue) — RouteLLM's calibration to a budget.
* ``max_acc_loss``: the largest τ (fewest positive actions) whose *missed positives* — points labelled
  positive that the gate would withhold the action from, as a share of all points — stay ≤ ``value``. A
  missed positive is a task that needed its tool call (probe), a helpful call skipped (ToolGate), a wrong
  answer committed (G-STEP): the accuracy those decisions cost against always taking the action.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

TAU_METHODS = ("fixed", "target_call_rate", "max_acc_loss")


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, *, bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """The temperature minimising validation NLL (1.0 when val has a single class: nothing to calibrate)."""
    if len(labels) == 0 or labels.min() == labels.max():
        return 1.0
    log_t = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.1, max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(logits / log_t.exp(), labels.float())
        loss.backward()
        return loss

    opt.step(closure)
    return float(np.clip(log_t.exp().item(), *bounds))


def _never(probs: np.ndarray) -> float:
    """The "never act" threshold: just above every validation probability, capped at 1 since a controller's τ is
    in [0, 1] (a probability of exactly 1.0 then still acts)."""
    return min(float(np.nextafter(probs.max(), np.inf)), 1.0)


def choose_tau(probs: np.ndarray, labels: np.ndarray, method: str, value: float) -> float:
    probs, labels = np.asarray(probs, float), np.asarray(labels, int)
    if method == "fixed":
        if not 0.0 <= value <= 1.0:   # a decision is p >= τ: outside [0, 1] every decision is the same
            raise ValueError(f"a fixed tau must be in [0, 1], got {value}")
        return float(value)
    if len(probs) == 0:
        raise ValueError(f"tau method {method!r} needs validation points; the val split is empty")
    if method == "target_call_rate":
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"target_call_rate must be in [0, 1], got {value}")
        # positive action iff p >= τ: the (1 - rate) quantile leaves a share `rate` at or above it
        if value <= 0:
            return _never(probs)
        return float(np.quantile(probs, 1.0 - value, method="higher"))
    if method == "max_acc_loss":
        # candidate thresholds: every distinct probability (and "never act"), from the highest down
        cands = np.concatenate([[_never(probs)], np.sort(np.unique(probs))[::-1]])
        n = len(probs)
        for tau in cands:
            missed = np.sum((probs < tau) & (labels == 1)) / n
            if missed <= value:
                return float(tau)
        return float(cands[-1])
    raise ValueError(f"unknown tau method {method!r}; choose one of {TAU_METHODS}")
