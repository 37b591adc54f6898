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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------- v3 structural features
from data_builders.features.toolgate import STRUCTURAL, structural_features  # noqa: E402

CONVERT = {"type": "function", "function": {
    "name": "convert_units", "description": "Convert a quantity between units of length or mass.",
    "parameters": {"type": "object", "properties": {
        "value": {"type": "number", "description": "the quantity"},
        "from_unit": {"type": "string", "description": "unit to convert from"},
        "to_unit": {"type": "string", "description": "unit to convert to"}},
        "required": ["value", "from_unit", "to_unit"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _view(instruction, tools, calls=(), round_=0):
    return SimpleNamespace(task=SimpleNamespace(instruction=instruction), tools=list(tools), calls=list(calls),
                           round=round_)


def _f(view, name, args):
    return dict(zip(STRUCTURAL, structural_features(view, SimpleNamespace(name=name, arguments=args))))


def test_v3_features_describe_the_call_against_its_schema_and_the_question():
    view = _view("Convert 12 miles to kilometers, please.", [CONVERT, WEATHER])
    f = _f(view, "convert_units", {"value": 12, "from_unit": "miles", "to_unit": "kilometers"})
    assert f["tool_offered"] == 1 and f["tools_offered"] == 2 / 20 and f["schema_params"] == 0.3
    assert f["required_given"] == 1 and f["unknown_args"] == 0 and f["type_mismatch"] == 0 and f["no_args"] == 0
    assert f["args_in_question"] == 1.0          # 12, "miles" and "kilometers" are all in the question
    assert f["tool_words_in_question"] > 0 and f["question_words_in_tool"] > 0
    # a badly formed call: a value of the wrong type, an undeclared argument, a required one missing
    bad = _f(view, "convert_units", {"value": "twelve", "unit": "mi"})
    assert bad["required_given"] == 1 / 3 and bad["unknown_args"] == 0.5 and bad["type_mismatch"] == 1.0
    assert bad["args_in_question"] == 0.0
    # a tool the episode does not offer (the policy made it up): nothing of a schema to compare
    made_up = _f(view, "translate", {"text": "miles"})
    assert made_up["tool_offered"] == 0 and made_up["schema_params"] == 0 and made_up["unknown_args"] == 1.0
    # an irrelevant tool for the question: little shared vocabulary
    weather = _f(_view("Convert 12 miles to kilometers, please.", [WEATHER]), "get_weather", {"city": "Paris"})
    assert weather["args_in_question"] == 0 and weather["tool_words_in_question"] == 0
    assert weather["question_words_in_tool"] < f["question_words_in_tool"]


def test_v3_features_name_no_tool_so_they_carry_over_to_tools_never_seen():
    """Two tools with different names but the same schema and description give the same structural vector."""
    renamed = {"type": "function", "function": {**CONVERT["function"], "name": "UnitsConvert"}}
    q = "Convert 12 miles to kilometers."
    a = structural_features(_view(q, [CONVERT]), SimpleNamespace(name="convert_units", arguments={"value": 12}))
    b = structural_features(_view(q, [renamed]), SimpleNamespace(name="UnitsConvert", arguments={"value": 12}))
    assert a.shape == (len(STRUCTURAL),) and a.dtype == np.float32
    # the name is another string with the same words: the features see words, never an index of names
    np.testing.assert_array_equal(a, b)


def test_v3_features_are_finite_on_odd_input():
    view = _view("", [{"type": "function", "function": {"name": "f"}}, "not a spec", {"function": 3}])
    for args in ({}, {"x": float("nan")}, {"x": [1, {"y": None}]}, {"x": True}):
        v = structural_features(view, SimpleNamespace(name="f", arguments=args))
        assert np.isfinite(v).all()
