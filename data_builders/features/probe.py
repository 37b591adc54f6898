"""Probe&Prefill features (When2Tool, arXiv 2605.09252): the last prompt token's hidden states at every layer.

The same call serves build time and run time: the builder calls :func:`probe_features` on the rendered first
prompts, and at run time the agent loop's prefill (``Backend.prefill`` with the hook's ``hidden_layers``)
hands the hook exactly this tensor in ``PromptState.hidden`` — the same backend method on the same prompt
text, so there is no training/serving skew and no second forward pass.
"""
from __future__ import annotations

from typing import Sequence

import torch

FEATURIZER_NAME = "last_token_hidden"
FEATURIZER_VERSION = 1


def all_layers(backend) -> list[int]:
    """Hidden-state indices 0 (embeddings) .. n_layers (last decoder layer)."""
    return list(range(backend.n_layers + 1))


def probe_features(backend, prompts: Sequence[str], layers: Sequence[int] | None = None) -> torch.Tensor:
    """``[len(prompts), len(layers), d_model]`` float32 from one prefill pass over the rendered prompts."""
    return backend.prefill(list(prompts), all_layers(backend) if layers is None else list(layers)).hidden


def controller_input(tensors: dict) -> torch.Tensor:
    """[points, layers, d_model] hidden states, as stored."""
    return tensors["hidden"].float()
