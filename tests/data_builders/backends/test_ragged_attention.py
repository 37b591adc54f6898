"""Decode-step attention per run of rows: the same output as transformers' SDPA over the whole left-padded batch."""
from __future__ import annotations

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from data_builders.backends import ragged_attention as ra


class Attn(torch.nn.Module):
    """What the attention functions read off a Llama attention module."""
    is_causal = True

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups


def left_padded(firsts, columns=700, heads=6, kv_heads=2, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = len(firsts)
    q = torch.randn(batch, heads, 1, dim, generator=g)
    k, v = (torch.randn(batch, kv_heads, columns, dim, generator=g) for _ in range(2))
    mask = torch.zeros(batch, 1, 1, columns, dtype=torch.bool)
    for b, first in enumerate(firsts):
        mask[b, ..., first:] = True
        mask[b, ..., first + 5:first + 9] = False       # inner padding (rows continue kept caches)
        k[b, :, :first] = v[b, :, :first] = 0            # the backend's left padding: masked zeros
    return Attn(heads // kv_heads), q, k, v, mask


@pytest.mark.parametrize("firsts", [[0, 3, 250, 600, 610], [400, 420], [37], [0, 0, 0]])
@pytest.mark.parametrize("forward", [ra.ragged_matmul_forward, ra.ragged_sdpa_forward])
def test_a_decode_step_attends_as_sdpa_over_the_whole_batch(firsts, forward):
    module, q, k, v, mask = left_padded(firsts)
    want, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.25)
    got, _ = forward(module, q, k, v, mask, scaling=0.25)
    assert got.shape == want.shape == (len(firsts), 1, q.shape[1], q.shape[-1])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_masked_columns_weigh_nothing():
    # Garbage (not zeros) in the masked columns: a step that read them would change.
    module, q, k, v, mask = left_padded([100, 300])
    noisy_k, noisy_v = k.clone(), v.clone()
    hidden = ~mask[:, 0, 0]                              # [batch, columns]
    noisy_k.transpose(1, 2)[hidden] = 1e3
    noisy_v.transpose(1, 2)[hidden] = -1e3
    assert noisy_k.abs().max() == 1e3
    clean, _ = ra.decode_attention(module, q, k, v, mask)
    noisy, _ = ra.ragged_matmul_forward(module, q, noisy_k, noisy_v, mask)
    torch.testing.assert_close(noisy, clean, rtol=1e-5, atol=1e-6)


def test_prefill_and_training_go_to_sdpa(monkeypatch):
    calls = []
    monkeypatch.setattr(ra, "decode_attention", lambda *a, **k: calls.append("matmul"))
    monkeypatch.setattr(ra, "sdpa_attention_forward", lambda *a, **k: calls.append("sdpa") or (None, None))
    forward = ra._ragged(ra.decode_attention)
    module, q, k, v, mask = left_padded([0, 10])
    forward(module, q.expand(-1, -1, 3, -1), k, v, mask.expand(-1, -1, 3, -1))      # three new columns: prefill
    module.train()
    forward(module, q, k, v, mask)
    assert calls == ["sdpa", "sdpa"]


def test_register_names_both_paths():
    from transformers import AttentionInterface
    assert ra.register() == ra.NAME and ra.register(matmul=False) == ra.NAME_SDPA
    assert AttentionInterface._global_mapping[ra.NAME] is ra.ragged_matmul_forward
