"""Controller metrics on a split, overall and per group (category, difficulty, category × difficulty).

=============  =====================================================================================
auroc          ranking quality of p (None when the group has one class only)
accuracy       share of points where the decision ``p ≥ τ`` equals the label
ece            expected calibration error, 10 equal-width bins (torchmetrics ``BinaryCalibrationError``)
brier          mean squared error of p
action_rate    share of points given the positive action (call / execute / continue)
missed         share of points labelled positive that did not get the action (the ``max_acc_loss`` budget)
positives      share of points labelled positive (the base rate every number should be read against)
n              points
=============  =====================================================================================
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torchmetrics.functional.classification import binary_calibration_error


def binary_metrics(probs: Sequence[float], labels: Sequence[int], tau: float) -> dict:
    p, y = np.asarray(probs, float), np.asarray(labels, int)
    n = len(y)
    if n == 0:
        return {"n": 0}
    act = p >= tau
    two_classes = 0 < y.sum() < n
    return {
        "n": n,
        "positives": float(y.mean()),
        "auroc": float(roc_auc_score(y, p)) if two_classes else None,
        "accuracy": float(np.mean(act == (y == 1))),
        "ece": float(binary_calibration_error(torch.tensor(p), torch.tensor(y), n_bins=10, norm="l1")),
        "brier": float(np.mean((p - y) ** 2)),
        "action_rate": float(act.mean()),
        "missed": float(np.mean(~act & (y == 1))),
    }


def grouped_metrics(probs, labels, tau: float, groups: dict[str, Sequence[str]]) -> dict:
    """``{"all": …, "category": {A: …}, "difficulty": {…}, "category×difficulty": {"A/easy": …}}``."""
    p, y = np.asarray(probs, float), np.asarray(labels, int)
    out: dict = {"all": binary_metrics(p, y, tau)}
    keys = {name: list(vals) for name, vals in groups.items()}
    if "category" in keys and "difficulty" in keys:
        keys["category×difficulty"] = [f"{c}/{d}" for c, d in zip(keys["category"], keys["difficulty"])]
    for name, vals in keys.items():
        idx: dict[str, list[int]] = defaultdict(list)
        for i, v in enumerate(vals):
            idx[str(v)].append(i)
        out[name] = {v: binary_metrics(p[ix], y[ix], tau) for v, ix in sorted(idx.items())}
    return out


def fmt(x) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def metrics_table(metrics: dict, title: str) -> str:
    """A plain-text table of one split's grouped metrics (printed at the end of a fit, put in the model card)."""
    cols = ("n", "positives", "auroc", "accuracy", "ece", "action_rate", "missed")
    lines = [title, f"{'group':<16}" + "".join(f"{c:>12}" for c in cols)]

    def row(name, m):
        cells = [f"{m.get('n', 0):>12}"] + [f"{fmt(m.get(c)):>12}" for c in cols[1:]]
        lines.append(f"{name:<16}" + "".join(cells))

    row("all", metrics["all"])
    for group in ("category", "difficulty"):
        for k, m in metrics.get(group, {}).items():
            row(f"{group[:4]}={k}", m)
    return "\n".join(lines)
