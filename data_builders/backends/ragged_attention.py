"""Decode-step attention that reads each row's KV cache from where that row begins, not from the batch's left edge.

A batch of agent prompts is left-padded to its longest row: a built-in batch holds 350-token prompts beside a
1,400-token list task. SDPA reads every padded column of every row at every decoded token, masked or not, and on a
CPU that read is what a decode step spends its time on once the batch is large (46 KB of fp32 keys and values per
token for the embedded model: 32 rows x 1,500 columns is 2.2 GB per step). This function is transformers' own
``sdpa_attention_forward``, called on runs of consecutive rows whose first real columns are close, each with the
columns before that run's first real one cut off: those columns are masked for every row of the run, so the
result is the same (to float rounding: SDPA sums over fewer blocks). Prefill, training and unmasked batches go to
``sdpa_attention_forward`` unchanged.

Registered with transformers' ``AttentionInterface`` (and the SDPA mask with ``AttentionMaskInterface``) under
:data:`NAME`; the HF backend switches a CPU model that uses SDPA to it (``HFBackend.ragged_attention``).
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "toolwise_ragged_sdpa"
#: a run of rows closes when its rows' first real columns spread over more than this many columns (each row then
#: reads at most this many masked columns; every run is one more SDPA call per layer)
SPREAD = 256


def runs(first: list[int], spread: int = SPREAD) -> list[tuple[int, int, int]]:
    """``(row_start, row_end, column_start)`` for runs of consecutive rows whose first real columns lie within
    ``spread`` of each other; a run starts at its earliest such column."""
    out: list[tuple[int, int, int]] = []
    start, lo, hi = 0, None, None
    for r, f in enumerate(first):
        if lo is not None and max(hi, f) - min(lo, f) > spread:
            out.append((start, r, lo))
            start, lo, hi = r, None, None
        lo, hi = (f, f) if lo is None else (min(lo, f), max(hi, f))
    if lo is not None:
        out.append((start, len(first), lo))
    return out


def ragged_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, **kwargs):
    """``sdpa_attention_forward``, per run of rows (:func:`runs`) on a decode step with a boolean padding mask."""
    if (query.shape[2] != 1 or query.shape[0] < 2 or attention_mask is None or attention_mask.dtype != torch.bool
            or attention_mask.shape[0] != query.shape[0] or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    visible = attention_mask[:, 0, -1, :]                          # [batch, kv]: what the new token may attend to
    first = torch.where(visible.any(-1), visible.int().argmax(-1), 0).tolist()
    parts = runs(first)
    if len(parts) == 1 and parts[0][2] == 0:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outs = [sdpa_attention_forward(module, query[a:b], key[a:b, :, c:], value[a:b, :, c:],
                                   attention_mask[a:b, :, :, c:], **kwargs)[0] for a, b, c in parts]
    return torch.cat(outs, 0), None


def register() -> str:
    """Make :data:`NAME` known to transformers (idempotent); returns it."""
    AttentionInterface.register(NAME, ragged_sdpa_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
