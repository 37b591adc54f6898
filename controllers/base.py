"""What every controller shares: a feature contract, a decision threshold τ, a logit temperature, and
save/load through huggingface_hub's ``PyTorchModelHubMixin`` (``config.json`` + ``model.safetensors``).

The contract says which features the controller was trained on — the featurizer (name + version), the
policy whose states or trajectories they came from (backend fingerprint) and the input shape. Applying a
controller to features with another contract raises :class:`ContractMismatch`: a probe trained on one
model's hidden states means nothing on another model's.
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Any, Sequence

import torch
from huggingface_hub import PyTorchModelHubMixin
from torch import nn

from .names import legacy_adapter


class ContractMismatch(ValueError):
    """Features or a backend that the controller was not trained for."""


def _number(field: str, value: Any) -> float:
    # bool is a Real in Python, and a JSON string "0.5" would pass float(): neither is a setting anyone meant
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{field} must be a number, got {value!r}")
    return float(value)


def check_tau(value: Any) -> float:
    """τ as a float; a decision is ``p >= τ``, so τ outside [0, 1] (or NaN) would fix every decision."""
    tau = _number("tau", value)
    if not 0.0 <= tau <= 1.0:   # NaN fails this comparison too
        raise ValueError(f"tau must be a probability threshold in [0, 1], got {value!r}")
    return tau


def check_temperature(value: Any) -> float:
    """The logit temperature as a float; ≤ 0 flips or zeroes every logit, inf/NaN makes every p 0.5 or NaN."""
    t = _number("temperature", value)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(f"temperature must be a finite number > 0, got {value!r}")
    return t


def check_contract_dict(contract: Any, rank: int) -> None:
    """Raise ValueError naming the field unless ``contract`` is what :func:`make_contract` builds, with an
    ``input_shape`` of ``rank`` positive sizes."""
    if not isinstance(contract, dict):
        raise ValueError(f"contract must be an object, got {type(contract).__name__}")
    feat = contract.get("featurizer")
    if not (isinstance(feat, dict) and isinstance(feat.get("name"), str) and isinstance(feat.get("version"), int)):
        raise ValueError(f"contract.featurizer must be {{'name': str, 'version': int}}, got {feat!r}")
    if not isinstance(contract.get("backend"), str):
        raise ValueError(f"contract.backend must be a string, got {contract.get('backend')!r}")
    names = contract.get("feature_names")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError(f"contract.feature_names must be a list of strings, got {names!r}")
    shape = contract.get("input_shape")
    if not (isinstance(shape, list) and len(shape) == rank
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)):
        raise ValueError(f"contract.input_shape must be a list of {rank} positive integers, got {shape!r}")


def make_contract(featurizer: dict, backend: str, input_shape: Sequence[int], **extra: Any) -> dict:
    return {"featurizer": {"name": featurizer["name"], "version": int(featurizer["version"])}, "backend": backend,
            "input_shape": [int(x) for x in input_shape], **extra}


class Standardize(nn.Module):
    """Feature standardisation inside the module, so a saved controller carries its own statistics."""

    def __init__(self, dim: int):
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))

    @torch.no_grad()
    def fit(self, x: torch.Tensor) -> None:
        self.mean.copy_(x.mean(0))
        # population std (ddof=0), as scikit-learn's StandardScaler (the benchmark compares against it); a
        # feature constant on the training set keeps scale 1, as there: dividing by ~0 would turn any
        # deviation at test time (a value train never showed) into a logit of millions
        std = x.std(0, correction=0)
        self.std.copy_(torch.where(std < 1e-6, torch.ones_like(std), std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class Controller(nn.Module, PyTorchModelHubMixin, library_name="toolwise", tags=["toolwise", "tool-use-controller"]):
    """Base class: subclasses define ``registry_name`` and ``logits(x)`` on features of ``contract['input_shape']``.

    Every ``__init__`` argument is JSON and lands in ``config.json`` (the mixin's rule), so a checkpoint
    is rebuilt from its config alone; ``controller`` names the registry entry for :func:`controllers.load`.
    """

    registry_name = "base"
    input_rank = 1   # len(contract["input_shape"]): features are [batch, *input_shape]

    def __init__(self, *, contract: dict, tau: float = 0.5, temperature: float = 1.0, controller: str | None = None):
        super().__init__()
        if controller is not None and controller != self.registry_name:
            raise ValueError(f"config names controller {controller!r} but this class is {self.registry_name!r}")
        check_contract_dict(contract, self.input_rank)
        self.controller = self.registry_name
        self.contract = contract
        self.tau = tau
        self.temperature = temperature

    # τ and the temperature are set after construction too (calibration): validated on every assignment, so a
    # controller never holds a setting that flips, zeroes or disables its decisions
    @property
    def tau(self) -> float:
        return self._tau

    @tau.setter
    def tau(self, value: float) -> None:
        self._tau = check_tau(value)

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = check_temperature(value)

    @torch.no_grad()
    def check_weights(self) -> None:
        """Raise ValueError naming the tensor (its ``state_dict`` / safetensors name) if one holds NaN or inf, or
        a standardisation scale is ≤ 0: such weights load fine and then decide every point the same way."""
        for name, t in self.state_dict().items():
            bad = int((~torch.isfinite(t)).sum()) if t.is_floating_point() else 0
            if bad:
                raise ValueError(f"tensor {name!r} has {bad} non-finite value(s) (NaN/inf) of {t.numel()}")
        for prefix, m in self.named_modules():
            if isinstance(m, Standardize) and bool((m.std <= 0).any()):
                name = f"{prefix}.std" if prefix else "std"
                raise ValueError(f"tensor {name!r} has a standardisation scale <= 0 (features would flip or divide "
                                 "by zero)")

    def save_pretrained(self, save_directory, **kwargs):
        """The mixin's save, with the config refreshed: τ and temperature are set after training (calibration)
        and the registry name must be in ``config.json`` for :func:`controllers.load`."""
        if isinstance(self._hub_mixin_config, dict):
            self._hub_mixin_config.update(controller=self.registry_name, tau=self.tau, temperature=self.temperature,
                                          contract=self.contract)
        return super().save_pretrained(save_directory, **kwargs)

    # ------------------------------------------------------------------ contract
    def check_contract(self, *, featurizer: dict | None = None, backend: str | None = None,
                       feature_names: Sequence[str] | None = None) -> None:
        """Raise unless features from ``featurizer`` on ``backend`` are what this controller was trained on.
        ``feature_names``: the featurizer's named columns, compared with those the checkpoint recorded (a
        checkpoint from before names were recorded has none to compare: its featurizer version decides)."""
        want = self.contract
        if featurizer is not None:
            got = {"name": featurizer["name"], "version": int(featurizer["version"])}
            if got != want["featurizer"]:
                raise ContractMismatch(f"{self.registry_name} was trained on featurizer {want['featurizer']}, "
                                       f"got features from {got}")
        trained = want.get("feature_names")
        if feature_names is not None and trained is not None and list(trained) != list(feature_names):
            missing = [n for n in trained if n not in feature_names]
            new = [n for n in feature_names if n not in trained]
            raise ContractMismatch(
                f"{self.registry_name} was trained on the feature columns {list(trained)}; this featurizer computes "
                f"{list(feature_names)} (not computed now: {missing or 'none'}; new: {new or 'none'}; else the order "
                "differs): refit the controller on points built with this featurizer")
        if backend is not None and backend != want["backend"]:
            if legacy_adapter(want["backend"]) is not None:
                # a fingerprint written before adapters were named by their bytes: the path it records says
                # nothing about which weights were there, so it cannot be matched; the user says which adapter
                raise ContractMismatch(
                    f"{self.registry_name} was trained on {want['backend']!r}, which names its adapter by path "
                    f"(written before adapters were identified by their content); the policy now is {backend!r}. If this "
                    "controller was trained on that adapter, migrate it once: python -m "
                    "data_builders.migrate_fingerprints <this checkpoint dir> --adapter <the adapter directory>")
            raise ContractMismatch(f"{self.registry_name} was trained on the policy {want['backend']!r}; "
                                   f"these features come from {backend!r}")

    def _check_shape(self, x: torch.Tensor) -> torch.Tensor:
        shape = list(self.contract["input_shape"])
        if list(x.shape[1:]) != shape:
            raise ContractMismatch(f"{self.registry_name} expects features of shape [batch, {', '.join(map(str, shape))}]"
                                   f", got {list(x.shape)}")
        return x.float()

    # ------------------------------------------------------------------ training support
    def norm_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the standardisation layer sees (the probe flattens its layers first)."""
        return x

    @torch.no_grad()
    def fit_standardization(self, x: torch.Tensor) -> None:
        """Set the in-module feature statistics from training features of the contract's shape."""
        self.norm.fit(self.norm_input(self._check_shape(x)))

    # ------------------------------------------------------------------ inference
    def logits(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def raw_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Uncalibrated logits (what training optimises and temperature scaling rescales)."""
        return self.logits(self._check_shape(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Calibrated logits: raw logits divided by the temperature."""
        return self.raw_logits(x) / self.temperature

    @torch.no_grad()
    def predict_proba(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self(x))

    @torch.no_grad()
    def support_distance(self, x: torch.Tensor) -> torch.Tensor | None:
        """Per row of ``x``, how far it lies from the data the controller was trained on: the largest |z| of its
        features under the training mean and standard deviation the controller standardises with (a feature
        constant in training has scale 1). None for a controller without them. A decision on a row far outside
        (a short tool-free chat, where every training episode called a tool over a long context) is the network's
        extrapolation, not something it learned. None too while the statistics are the identity (mean 0, scale 1
        everywhere: never fit, e.g. a controller built in a test), which says nothing about any training data."""
        norm = getattr(self, "norm", None)
        if not isinstance(norm, Standardize) or (not norm.mean.any() and bool((norm.std == 1).all())):
            return None
        return norm(self.norm_input(self._check_shape(x)).float()).abs().amax(dim=-1)

    @torch.no_grad()
    def decide(self, x: torch.Tensor) -> torch.Tensor:
        """True where the positive action (call a tool / execute / continue) is chosen: p >= τ."""
        return self.predict_proba(x) >= self.tau
