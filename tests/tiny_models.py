"""Tiny random models for tests (a fixture in ``conftest.py`` builds one per session). Nothing is downloaded:
the tokenizer is the embedded model's, so the chat template and special tokens are real."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from data_builders.backends.loading import embedded_model_dir


def build_tiny_llama(out_dir: str | Path, *, tokenizer_from: str | Path | None = None, hidden_size: int = 64,
                     num_layers: int = 2, seed: int = 0) -> Path:
    """A random Llama from a config, saved with a real tokenizer (default: the embedded model's, so
    chat template and special tokens are real). Its output is noise."""
    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_from or embedded_model_dir()))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                      num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.config._name_or_path = f"tiny-llama-h{hidden_size}-l{num_layers}-s{seed}"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
