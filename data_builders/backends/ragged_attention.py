"""Decode-step attention that reads each row's KV cache from where that row begins, not from the batch's left edge.

A batch of agent prompts is left-padded to its longest row: a built-in batch holds 350-token prompts beside a
1,400-token list task. SDPA reads every padded column of every row at every decoded token, masked or not, and on a
CPU that read is what a decode step spends its time on once the batch is large (46 KB of fp32 keys and values per
token for the embedded model: 32 rows x 1,500 columns is 2.2 GB per step). This function is transformers' own
``sdpa_attention_forward``, called on runs of consecutive rows whose first real columns are close, each with the
columns before that run's first real one cut off: those columns are masked for every row of the run, so the
result is the same (to float rounding: SDPA sums over fewer blocks). Prefill, training and unmasked batches go to
``sdpa_attention_forward`` unchanged.

Each run's attention is two batched matmuls and a softmax, the queries of a key/value head packed together
(:func:`decode_attention`), rather than SDPA: a decode step's attention reads every row's cached keys and values
once, and on CPU torch's flash kernel reads them ≈ 20 % slower than MKL's batched GEMM does (15 rows of
800-2,500 columns, AVX2, 2 threads: ``benchmarks/decode_attention.py``; ``benchmarks/main_job.py``'s
``matmul_decode`` switch measures the job).

Registered with transformers' ``AttentionInterface`` (and the SDPA mask with ``AttentionMaskInterface``) under
:data:`NAME` (:data:`NAME_SDPA`: the runs through transformers' SDPA, the previous path); the HF backend switches a
CPU model that uses SDPA to it (``HFBackend.ragged_attention``).
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "toolwise_ragged_matmul"
NAME_SDPA = "toolwise_ragged_sdpa"
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


def decode_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor, scaling: float | None = None, **_) -> tuple[torch.Tensor, None]:
    """One new token's attention, as ``sdpa_attention_forward`` returns it ([batch, 1, heads, dim]): each key/value
    head's queries packed as rows of one product (``num_key_value_groups`` of them), the boolean mask applied to
    the scores before the softmax (a masked column weighs exactly 0, as in SDPA)."""
    batch, heads, _, dim = query.shape
    q = query.reshape(batch, key.shape[1], heads // key.shape[1], dim)
    scores = torch.matmul(q, key.transpose(-1, -2)).mul_(dim ** -0.5 if scaling is None else scaling)
    scores.masked_fill_(~attention_mask, float("-inf"))     # [batch, 1, 1, kv] over every head's rows
    out = torch.matmul(torch.softmax(scores, -1), value)     # [batch, kv heads, queries per head, dim]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def _ragged(attend):
    def forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, **kwargs):
        """``attend`` per run of rows (:func:`runs`) on a decode step with a boolean padding mask; anything else
        (prefill, training, no mask) goes to ``sdpa_attention_forward``."""
        if (query.shape[2] != 1 or attention_mask is None or attention_mask.dtype != torch.bool
                or attention_mask.shape[0] != query.shape[0] or kwargs.get("position_bias") is not None
                or module.training or kwargs.get("dropout", 0.0)):
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        visible = attention_mask[:, 0, -1, :]                          # [batch, kv]: what the new token may see
        first = torch.where(visible.any(-1), visible.int().argmax(-1), 0).tolist()
        parts = runs(first)
        if len(parts) == 1:
            a, b, c = parts[0]
            return attend(module, query, key[:, :, c:], value[:, :, c:], attention_mask[..., c:], **kwargs)
        outs = [attend(module, query[a:b], key[a:b, :, c:], value[a:b, :, c:], attention_mask[a:b, :, :, c:],
                       **kwargs)[0] for a, b, c in parts]
        return torch.cat(outs, 0), None
    return forward


ragged_matmul_forward = _ragged(decode_attention)
ragged_sdpa_forward = _ragged(sdpa_attention_forward)


def register(matmul: bool = True) -> str:
    """Make :data:`NAME` and :data:`NAME_SDPA` known to transformers (idempotent); returns the one asked for."""
    for name, forward in ((NAME, ragged_matmul_forward), (NAME_SDPA, ragged_sdpa_forward)):
        AttentionInterface.register(name, forward)
        AttentionMaskInterface.register(name, sdpa_mask)
    return NAME if matmul else NAME_SDPA
