"""Gates on tabular features: the ToolGate pre-call logistic gate ("ToolGate: Token-Efficient Pre-Call Control
for Tool-Augmented Vision-Language Agents", arXiv 2606.03054) and the G-STEP continue/commit MLP ("Are Tools
All We Need? Unveiling the Tool-Use Tax in LLM Agents", arXiv 2605.00136). Both standardise inside the module;
class balancing is the trainer's loss weighting."""
from __future__ import annotations

import torch
from torch import nn

from .base import Controller, Standardize


class ToolGateLogistic(Controller):
    """Logistic regression on [MiniLM embedding ‖ structural features] (input_shape = [embed + structural])."""

    registry_name = "toolgate_logistic"

    def __init__(self, *, contract: dict, tau: float = 0.5, temperature: float = 1.0, controller: str | None = None):
        super().__init__(contract=contract, tau=tau, temperature=temperature, controller=controller)
        (dim,) = contract["input_shape"]
        self.norm = Standardize(dim)
        self.linear = nn.Linear(dim, 1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.norm(x)).squeeze(-1)


class GStepMLP(Controller):
    """A small MLP on the G-STEP vector: standardise → (Linear → GELU → Dropout) × depth → Linear."""

    registry_name = "gstep_mlp"

    def __init__(self, *, contract: dict, tau: float = 0.5, temperature: float = 1.0, controller: str | None = None,
                 hidden: int = 64, depth: int = 2, dropout: float = 0.1):
        super().__init__(contract=contract, tau=tau, temperature=temperature, controller=controller)
        (dim,) = contract["input_shape"]
        self.hidden, self.depth, self.dropout = hidden, depth, dropout
        self.norm = Standardize(dim)
        layers: list[nn.Module] = []
        width = dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU(), nn.Dropout(dropout)]
            width = hidden
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x)).squeeze(-1)
