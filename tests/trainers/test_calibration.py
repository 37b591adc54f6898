"""trainers.controller.calibration: temperature scaling on val logits, and the three rules that pick τ."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from trainers.controller.calibration import TAU_METHODS, choose_tau, fit_temperature


def missed_share(probs, labels, tau) -> float:
    """Positives withheld the action (p < τ), as a share of all points: the max_acc_loss budget."""
    probs, labels = np.asarray(probs), np.asarray(labels)
    return float(np.sum((probs < tau) & (labels == 1)) / len(probs))


def test_fit_temperature_recovers_a_known_temperature():
    rng = np.random.default_rng(0)
    z = rng.normal(0.0, 4.0, size=20_000)
    y = (rng.random(z.shape) < 1 / (1 + np.exp(-z / 3.0))).astype(np.float32)   # labels from sigmoid(z / 3)
    t = fit_temperature(torch.tensor(z, dtype=torch.float32), torch.tensor(y))
    assert abs(t - 3.0) < 0.5, t
    # already calibrated logits: T stays near 1
    y1 = (rng.random(z.shape) < 1 / (1 + np.exp(-z))).astype(np.float32)
    assert abs(fit_temperature(torch.tensor(z, dtype=torch.float32), torch.tensor(y1)) - 1.0) < 0.2


@pytest.mark.parametrize("labels", [[1, 1, 1, 1], [0, 0, 0, 0], []])
def test_fit_temperature_is_one_without_both_classes(labels):
    logits = torch.linspace(-3, 3, len(labels))
    assert fit_temperature(logits, torch.tensor(labels, dtype=torch.float32)) == 1.0


def test_fit_temperature_is_clipped_to_its_bounds():
    # perfectly separable logits: NLL keeps falling as T -> 0, so the lower bound holds it
    logits = torch.tensor([-2.0, -1.0, 1.0, 2.0])
    labels = torch.tensor([0.0, 0.0, 1.0, 1.0])
    assert fit_temperature(logits, labels, bounds=(0.25, 20.0)) == pytest.approx(0.25)


def test_fixed_returns_the_value():
    assert choose_tau(np.array([0.1, 0.9]), np.array([0, 1]), "fixed", 0.37) == 0.37
    assert choose_tau(np.zeros(0), np.zeros(0), "fixed", 0.5) == 0.5   # needs no validation points


@pytest.mark.parametrize("rate", [0.3, 0.05, 0.5, 0.9])
def test_target_call_rate_gives_the_requested_share(rate):
    probs = np.random.default_rng(1).random(1000)
    labels = np.zeros(1000, int)
    tau = choose_tau(probs, labels, "target_call_rate", rate)
    assert abs(np.mean(probs >= tau) - rate) <= 0.01


def test_target_call_rate_extremes():
    probs = np.random.default_rng(2).random(1000)
    labels = np.ones(1000, int)
    assert np.mean(probs >= choose_tau(probs, labels, "target_call_rate", 0.0)) == 0.0   # nobody acts
    assert np.mean(probs >= choose_tau(probs, labels, "target_call_rate", 1.0)) == 1.0   # everybody acts
    with pytest.raises(ValueError, match="target_call_rate must be in"):
        choose_tau(probs, labels, "target_call_rate", 1.5)
    with pytest.raises(ValueError, match="val split is empty"):
        choose_tau(np.zeros(0), np.zeros(0), "target_call_rate", 0.3)


def test_max_acc_loss_on_an_exact_example():
    probs = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05])
    labels = np.array([1, 0, 1, 0, 0, 1, 0, 0, 1, 0])
    # τ=0.7 withholds the positives at 0.4 and 0.1: 2/10 missed; τ=0.8 also withholds 0.7: 3/10
    tau = choose_tau(probs, labels, "max_acc_loss", 0.2)
    assert tau == 0.7
    assert missed_share(probs, labels, tau) <= 0.2 < missed_share(probs, labels, 0.8)
    # a budget covering every positive: never act (τ above every probability)
    never = choose_tau(probs, labels, "max_acc_loss", 0.4)
    assert never > 0.9 and np.mean(probs >= never) == 0
    # no budget: act down to the lowest positive
    assert choose_tau(probs, labels, "max_acc_loss", 0.0) == 0.1


@pytest.mark.parametrize("value", [0.0, 0.01, 0.05, 0.2])
def test_max_acc_loss_picks_the_largest_threshold_within_budget(value):
    rng = np.random.default_rng(3)
    probs = np.round(rng.random(200), 2)            # ties on purpose
    labels = (rng.random(200) < probs).astype(int)
    tau = choose_tau(probs, labels, "max_acc_loss", value)
    assert missed_share(probs, labels, tau) <= value
    higher = np.unique(probs)[np.unique(probs) > tau]
    if len(higher):                                  # the next candidate up would exceed the budget
        assert missed_share(probs, labels, higher.min()) > value


def test_every_listed_method_chooses_a_threshold_and_no_other_name_does():
    probs, labels = np.array([0.1, 0.3, 0.6, 0.9]), np.array([0, 1, 0, 1])
    for method in TAU_METHODS:          # what the recipes' tau_method may name: each one runs
        tau = choose_tau(probs, labels, method, 0.5)
        assert 0.0 <= tau <= 1.0, method
    with pytest.raises(ValueError, match="unknown tau method 'median'"):
        choose_tau(probs, labels, "median", 0.5)


def test_tau_stays_a_probability_a_controller_accepts():
    # saturated validation probabilities (p == 1.0 in float32): "never act" is capped at τ = 1, not just above it
    probs, labels = np.array([0.2, 1.0, 1.0]), np.array([1, 1, 0])
    for method, value in (("target_call_rate", 0.0), ("max_acc_loss", 1.0)):
        assert choose_tau(probs, labels, method, value) == 1.0
    with pytest.raises(ValueError, match=r"a fixed tau must be in \[0, 1\], got 1.5"):
        choose_tau(probs, labels, "fixed", 1.5)
