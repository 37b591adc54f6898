"""Linear probe on all-layer hidden states (Probe&Prefill, "LLM Agents Already Know When to Call Tools — Even
Without Reasoning", arXiv 2605.09252): [layers, d_model] → one logit.

Arguments besides the shared ones (``contract``, ``tau``, ``temperature``, ``controller``; see
:class:`~controllers.base.Controller`): ``layers``, the indices of the hidden-state layers the probe reads
(default ``None`` = every layer of ``contract["input_shape"][0]``); ``layers=[i]`` makes the same class the
single-layer baseline probe. The chosen layers are concatenated and standardised inside the module; the L2
penalty is the trainer's loss term; τ and the logit temperature are calibrated after training.
"""
from __future__ import annotations

import torch
from torch import nn

from .base import Controller, Standardize


class LinearProbe(Controller):
    registry_name = "linear_probe"
    input_rank = 2   # [layers, d_model]

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
