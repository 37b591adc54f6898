"""Bootstrap confidence intervals for the numbers the reports state: ``scipy.stats.bootstrap``, percentile
method, seeded, resampling the units a number is a mean over (tasks for the evaluator's arms, decision points
for a controller's AUROC).

* :func:`mean_interval` — the mean of per-task values (accuracy from 0/1 outcomes, calls per task, PTE per task).
* :func:`paired_difference_interval` — the difference of two arms' means on the *same* tasks, each resample
  drawing task indices once for both arms (``paired=True``), so task difficulty cancels: two identical arms get
  exactly [0, 0], however hard the tasks.
* :func:`auroc_interval` — AUROC with positives and negatives resampled separately (a stratified bootstrap, as
  pROC does), so every resample has both classes and keeps the split's base rate.
* :func:`kappa_interval` — Cohen's kappa of two raters' verdicts on the same units (a judge against exact
  scoring), the units resampled paired.

The percentile method, not BCa: BCa's jackknife acceleration is undefined on the constant samples these reports
meet (an arm right on every task, two arms that never differ), where the percentile interval is the point.
An interval needs at least two units (two points per class for AUROC); with fewer the functions return None.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats

Interval = tuple[float, float]


@dataclass(frozen=True)
class BootstrapSpec:
    """How intervals are drawn: ``level`` (two-sided), ``replicates`` resamples, ``seed`` for the resampling."""

    level: float = 0.95
    replicates: int = 2000
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.level < 1:
            raise ValueError(f"bootstrap level must be in (0, 1), got {self.level!r}")
        if isinstance(self.replicates, bool) or not isinstance(self.replicates, int) or self.replicates < 1:
            raise ValueError(f"bootstrap replicates must be a positive integer, got {self.replicates!r}")

    def as_dict(self) -> dict:
        return {"method": "percentile", "level": self.level, "replicates": self.replicates, "seed": self.seed}


def _run(data: tuple, statistic, spec: BootstrapSpec, **kw) -> Interval:
    res = stats.bootstrap(data, statistic, n_resamples=spec.replicates, confidence_level=spec.level,
                          method="percentile", vectorized=True, rng=np.random.default_rng(spec.seed), **kw)
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _difference(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def mean_interval(values: Sequence[float], spec: BootstrapSpec = BootstrapSpec()) -> Interval | None:
    x = np.asarray(values, float)
    if x.ndim != 1:
        raise ValueError(f"expected one value per unit, got shape {x.shape}")
    return _run((x,), _mean, spec) if len(x) >= 2 else None


def paired_difference_interval(a: Sequence[float], b: Sequence[float],
                               spec: BootstrapSpec = BootstrapSpec()) -> Interval | None:
    """Interval of ``mean(a) - mean(b)`` where ``a[i]`` and ``b[i]`` belong to the same unit (task)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples must be two equal-length 1-D arrays, got {x.shape} and {y.shape}")
    return _run((x, y), _difference, spec, paired=True) if len(x) >= 2 else None


def _auroc(pos, neg, axis=-1):
    """Mann-Whitney AUROC (ties count one half) from average ranks, along ``axis``: the value
    ``sklearn.metrics.roc_auc_score`` gives, vectorized over bootstrap resamples."""
    n_pos, n_neg = pos.shape[axis], neg.shape[axis]
    ranks = stats.rankdata(np.concatenate([pos, neg], axis=axis), axis=axis)
    r_pos = np.take(ranks, np.arange(n_pos), axis=axis).sum(axis=axis)
    return (r_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def auroc_interval(scores: Sequence[float], labels: Sequence[int],
                   spec: BootstrapSpec = BootstrapSpec()) -> Interval | None:
    s, y = np.asarray(scores, float), np.asarray(labels, int)
    pos, neg = s[y == 1], s[y == 0]
    if len(pos) < 2 or len(neg) < 2:
        return None
    # resamples x points of ranks held at once; batch keeps that under ~2e7 floats for large splits
    batch = max(1, int(2e7 // (len(pos) + len(neg))))
    return _run((pos, neg), _auroc, spec, batch=batch)


def _kappa(a, b, axis=-1):
    """Cohen's kappa of two raters' 0/1 verdicts along ``axis`` (``sklearn.metrics.cohen_kappa_score``, vectorized
    over resamples); NaN where it is undefined: both raters give one and the same verdict on every unit, so chance
    agreement is 1 and kappa is 0/0."""
    observed = np.mean(a == b, axis=axis)
    pa, pb = np.mean(a, axis=axis), np.mean(b, axis=axis)
    chance = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(chance < 1, (observed - chance) / (1 - chance), np.nan)


def kappa_interval(a: Sequence[bool], b: Sequence[bool],
                   spec: BootstrapSpec = BootstrapSpec()) -> tuple[Interval | None, int]:
    """Interval of Cohen's kappa between two raters whose verdicts ``a[i]`` and ``b[i]`` are on the same unit,
    units drawn once for both (``paired=True``). Returns ``(interval, undefined)``: ``undefined`` counts the
    resamples where kappa is 0/0 (both raters unanimous and alike, likely only with few units or an extreme base
    rate); they are left out of the percentiles, as the point estimate itself is not reported when undefined, and
    counted so that a report can say how many. The interval is None with fewer than two units or no defined
    resample."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired verdicts must be two equal-length 1-D arrays, got {x.shape} and {y.shape}")
    if len(x) < 2:
        return None, 0
    with warnings.catch_warnings():
        # scipy's own interval is NaN as soon as one resample is undefined, and warns so; it is recomputed below
        # from the defined resamples, so the warning says nothing about the result
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap((x, y), _kappa, n_resamples=spec.replicates, confidence_level=spec.level,
                              method="percentile", vectorized=True, paired=True,
                              rng=np.random.default_rng(spec.seed))
    replicates = np.asarray(res.bootstrap_distribution, float)
    defined = replicates[np.isfinite(replicates)]
    undefined = int(replicates.size - defined.size)
    if defined.size == 0:
        return None, undefined
    alpha = (1 - spec.level) / 2
    # the quantiles scipy's percentile method takes of its resamples, so that with every resample defined this is
    # exactly scipy's interval
    low, high = stats.quantile(defined, np.array([alpha, 1 - alpha]))
    return (float(low), float(high)), undefined
