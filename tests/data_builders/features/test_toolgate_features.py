"""ToolGate's featurizer (v2): the short text, and MiniLM on ONNX Runtime giving torch's numbers."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from data_builders.features import minilm
from data_builders.features.toolgate import CAPS, MAX_TOKENS, embed_texts, summary_text

TEXTS = ["evaluate_expression({\"expression\": \"12*7\"}) | What is 12*7?",
         "regex_match({\"pattern\": \"a+\"}) | Find all runs of a in " + "banana " * 80,
         "x"]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """A fresh export into a test cache (the real cache is the user's), once for the module."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TOOLWISE_CACHE", str(tmp_path_factory.mktemp("cache")))
    minilm.onnx_session.cache_clear()
    yield
    minilm.onnx_session.cache_clear()
    mp.undo()


def test_onnx_and_torch_give_the_same_embeddings(onnx_cache):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # a silent fallback to torch would make this test meaningless
        onnx = minilm.embed(TEXTS, MAX_TOKENS, backend="onnx")
    torch_ = minilm.embed(TEXTS, MAX_TOKENS, backend="torch")
    assert onnx.shape == (3, minilm.EMBEDDING_DIM) and onnx.dtype == np.float32
    np.testing.assert_allclose(onnx, torch_, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(onnx, axis=1), 1.0, atol=1e-5)
    # one text alone equals the same text padded in a batch (build time batches, run time does not)
    np.testing.assert_allclose(minilm.embed(TEXTS[:1], MAX_TOKENS), onnx[:1], atol=1e-5)


def test_the_encoder_reads_only_max_tokens(onnx_cache):
    long = TEXTS[1]
    tok = minilm.sentence_transformer().tokenizer
    cut = tok.decode(tok(long, add_special_tokens=False).input_ids[:MAX_TOKENS - 2])
    a, b = embed_texts([long]), embed_texts([long + " and a different tail"])
    np.testing.assert_allclose(a, b, atol=1e-6)                  # past the cut nothing counts
    np.testing.assert_allclose(a, embed_texts([cut]), atol=1e-4)  # = the first MAX_TOKENS pieces
    assert not np.allclose(minilm.embed([long], 256), a, atol=1e-3)   # a longer read is a different feature


def test_a_broken_cached_graph_falls_back_to_torch_with_a_warning(tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("TOOLWISE_CACHE", str(tmp_path))
    monkeypatch.setattr(minilm, "_export", lambda st, target: (target.mkdir(parents=True),
                                                               (target / "model.onnx").write_bytes(b"garbage")))
    minilm.onnx_session.cache_clear()
    try:
        with pytest.warns(UserWarning, match="could not be used"):
            out = minilm.embed(TEXTS[:1], MAX_TOKENS)
        np.testing.assert_allclose(out, minilm.embed(TEXTS[:1], MAX_TOKENS, backend="torch"), atol=1e-6)
        with pytest.raises(RuntimeError, match="not usable"):
            minilm.embed(TEXTS[:1], MAX_TOKENS, backend="onnx")
    finally:
        minilm.onnx_session.cache_clear()
    with pytest.raises(ValueError, match="auto, onnx or torch"):
        minilm.embed(TEXTS[:1], MAX_TOKENS, backend="tensorrt")


def test_summary_puts_the_pending_call_first_and_caps_both_parts():
    view = SimpleNamespace(task=SimpleNamespace(instruction="What   is\n 12*7? " + "pad " * 200))
    call = SimpleNamespace(name="evaluate_expression", arguments={"expression": "12*7"})
    text = summary_text(view, call)
    head, question = text.split(" | ")
    assert head == 'evaluate_expression({"expression": "12*7"})'
    assert question.startswith("What is 12*7?") and len(question) == CAPS["question"] and question.endswith("…")
    long_call = SimpleNamespace(name="run_code", arguments={"code": "print(1)\n" * 50})
    assert len(summary_text(view, long_call).split(" | ")[0]) == CAPS["call"]
