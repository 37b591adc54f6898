"""trainers.intervals: seeded scipy bootstrap intervals of means, paired differences, AUROC and Cohen's kappa."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score, roc_auc_score

from trainers.intervals import (BootstrapSpec, auroc_interval, kappa_interval, mean_interval,
                                paired_difference_interval)


def bernoulli(n: int, p: float, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def test_mean_interval_brackets_the_estimate_and_shrinks_with_n():
    widths = []
    for n in (20, 80, 320):
        x = bernoulli(n, 0.6)
        lo, hi = mean_interval(x)
        assert lo <= x.mean() <= hi
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] == pytest.approx(4.0, rel=0.35)       # ~ 1/sqrt(n)


def test_constant_samples_and_too_few_units():
    assert mean_interval([1.0] * 12) == (1.0, 1.0)                      # right on every task: no spread
    assert mean_interval([0.0] * 5) == (0.0, 0.0)
    assert mean_interval([1.0]) is None and mean_interval([]) is None
    assert paired_difference_interval([1.0], [0.0]) is None


def test_paired_difference_of_identical_arms_is_exactly_zero():
    x = np.random.default_rng(3).gamma(2.0, 500.0, size=40)              # tasks of very different cost
    assert paired_difference_interval(x, x.copy()) == (0.0, 0.0)
    # unpaired, the same two arms would look far apart: the pairing is what removes the task variance
    assert mean_interval(x)[1] - mean_interval(x)[0] > 100


def test_paired_difference_brackets_the_delta_and_is_tighter_than_unpaired():
    a = bernoulli(60, 0.7, seed=1)
    b = a.copy()
    b[np.flatnonzero(a == 1)[:6]] = 0.0                                   # the other arm loses 6 of the same tasks
    lo, hi = paired_difference_interval(b, a)
    assert lo <= b.mean() - a.mean() <= hi and hi <= 0.0                  # it never gains a task: never positive
    # the interval of the difference of two independent resamples (no pairing) is much wider
    unpaired = stats.bootstrap((b, a), lambda u, v, axis: u.mean(axis) - v.mean(axis), vectorized=True,
                               n_resamples=2000, method="percentile", rng=np.random.default_rng(0)).confidence_interval
    assert hi - lo < 0.5 * (unpaired.high - unpaired.low)


def test_seeded_and_configurable():
    x = np.random.default_rng(2).gamma(2.0, 500.0, size=50)             # PTE-like: continuous, so seeds differ
    assert mean_interval(x) == mean_interval(x)
    assert mean_interval(x, BootstrapSpec(seed=1)) != mean_interval(x, BootstrapSpec(seed=2))
    narrow, wide = mean_interval(x, BootstrapSpec(level=0.5)), mean_interval(x, BootstrapSpec(level=0.99))
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    with pytest.raises(ValueError, match="level"):
        BootstrapSpec(level=95)
    with pytest.raises(ValueError, match="replicates"):
        BootstrapSpec(replicates=0)
    with pytest.raises(ValueError, match="equal-length"):
        paired_difference_interval([1, 0, 1], [1, 0])


def test_auroc_interval_is_stratified_and_brackets_sklearns_value():
    rng = np.random.default_rng(5)
    y = np.r_[np.ones(30, int), np.zeros(12, int)]
    s = rng.normal(size=42) + 1.2 * y
    s[:4] = s[-4:]                                                        # ties across the classes
    lo, hi = auroc_interval(s, y)
    assert lo <= roc_auc_score(y, s) <= hi < 1.0
    assert auroc_interval(y + 0.0, y) == (1.0, 1.0)                       # separated in every resample
    # every resample keeps both classes, so a split with two negatives still gets an interval
    assert auroc_interval(np.r_[s[:30], 0.0, 5.0], np.r_[y[:30], 0, 0]) is not None
    assert auroc_interval(s[:31], y[:31]) is None                         # one negative: undefined


@pytest.mark.slow
def test_kappa_interval_is_scipys_percentile_interval_of_sklearns_kappa():
    rng = np.random.default_rng(4)
    a = rng.random(120) < 0.5
    b = np.where(rng.random(120) < 0.8, a, ~a)                           # agrees on ~80 %
    ci, undefined = kappa_interval(a, b)
    assert undefined == 0
    # every resample defined: exactly scipy's paired percentile bootstrap of the same statistic
    def kappa(x, y, axis):
        rows = zip(x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1]))
        return np.array([cohen_kappa_score(u, v) for u, v in rows]).reshape(x.shape[:-1])

    want = stats.bootstrap((a, b), kappa, paired=True, vectorized=True, n_resamples=2000, method="percentile",
                           rng=np.random.default_rng(0)).confidence_interval
    assert ci == pytest.approx((want.low, want.high))
    assert ci[0] <= cohen_kappa_score(a, b) <= ci[1]
    assert kappa_interval(a, b) == (ci, 0)                                 # seeded


def test_kappa_interval_leaves_out_undefined_resamples():
    # four units: some resamples draw only the units where both raters say the same thing, where kappa is 0/0
    ci, undefined = kappa_interval([1, 0, 1, 1], [1, 0, 0, 1])
    assert 0 < undefined < 2000 and -1 <= ci[0] <= ci[1] <= 1
    assert kappa_interval([1, 1, 1], [1, 1, 1]) == (None, 2000)             # unanimous and alike: never defined
    assert kappa_interval([1], [0]) == (None, 0)
    with pytest.raises(ValueError, match="equal-length"):
        kappa_interval([1, 0], [1, 0, 1])
