"""Linear probe on all-layer hidden states (seed 002, Probe&Prefill): [layers, d_model] → one logit.

The layers are concatenated and standardised inside the module; L2 regularisation is the trainer's weight
decay; the logit temperature is calibrated after training. ``layer_mask`` lets the same class act as the
single-layer baseline probe.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import Controller, Standardize


class LinearProbe(Controller):
    registry_name = "linear_probe"

    def __init__(self, *, contract: dict, tau: float = 0.5, temperature: float = 1.0, controller: str | None = None,
                 layers: list[int] | None = None):
        super().__init__(contract=contract, tau=tau, temperature=temperature, controller=controller)
        n_layers, d = contract["input_shape"]
        self.layers = list(range(n_layers)) if layers is None else [int(i) for i in layers]
        self.norm = Standardize(len(self.layers) * d)
        self.linear = nn.Linear(len(self.layers) * d, 1)

    def flatten(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, self.layers, :].reshape(x.shape[0], -1)

    norm_input = flatten

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(self.flatten(x))).squeeze(-1)
