"""Schema-constrained tool calls (agent.constrained_calls): the structural tag, and the HF engine under it, on the
tiny random Llama, whose unconstrained output is noise (so every check below fails without the grammar)."""
from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest
import torch

from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.parsing import parse_tool_call
from data_builders.backends.base import SamplingParams
from data_builders.backends.grammar import CallConstraint, import_xgrammar
from data_builders.backends.openai_backend import OpenAIBackend
from data_builders.tasks.schema import Task

jsonschema = pytest.importorskip("jsonschema")
needs_xgrammar = pytest.mark.skipif(importlib.util.find_spec("xgrammar") is None,
                                    reason="optional extra: pip install '.[constrained]'")


def tool(name: str, properties: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": properties, "required": sorted(properties)}}}


# Bounded values only: a random model closes a free string with probability ~1/100 per token, so a free-string
# argument would end most generations at max_new_tokens with a half-written (but grammar-valid) call.
CONVERT = tool("convert", {"unit": {"enum": ["c", "f", "k"]}, "value": {"type": "integer", "minimum": 0,
                                                                        "maximum": 999}})
FLAG = tool("set_flag", {"on": {"type": "boolean"}})
LOOKUP = tool("lookup", {"key": {"enum": ["alpha", "beta"]}, "n": {"type": "integer", "minimum": 1, "maximum": 9}})
PARAMS = SamplingParams(max_new_tokens=64, temperature=1.0, stop=("</tool_call>",), seed=0)
XML_OPEN = "<tool_call>\n"


def prompts(backend, n: int, prefill: str) -> list[str]:
    # Same length, so rows share one batch (the backend batches by length), each with its own grammar.
    return [backend.render([{"role": "user", "content": f"Request number {i}: convert it."}]) + prefill
            for i in range(n)]


def valid_call(text: str, tools: list[dict]) -> bool:
    call = parse_tool_call(text)
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if call is None or call.name not in by_name:
        return False
    try:
        jsonschema.validate(call.arguments, by_name[call.name])
    except jsonschema.ValidationError:
        return False
    return True


def test_open_call_is_continued_and_closed_calls_are_not():
    c = CallConstraint.after([CONVERT, FLAG], "xml", "I will call a tool.\n" + XML_OPEN)
    assert c.opened == XML_OPEN
    fmt = c.structural_tag()["format"]
    assert fmt["type"] == "or"            # the open call is finished and ends the turn (one call per turn)
    begins = [t["begin"] for t in fmt["elements"]]
    assert begins == ['{"name": "convert", "arguments": ', '{"name": "set_flag", "arguments": ']
    assert CallConstraint.after([CONVERT], "xml", '<tool_call>\n{"name": "conv').structural_tag()["format"][
        "begin"] == 'ert", "arguments": '
    done = '<tool_call>\n{"name": "convert", "arguments": {}}\n</tool_call>\n'
    assert CallConstraint.after([CONVERT], "xml", done).opened == ""
    assert CallConstraint.after([CONVERT], "xml", "").structural_tag()["format"]["triggers"] == ["<tool_call>"]
    native = CallConstraint.after([CONVERT], "native", '{"name": "')
    assert native.opened == '{"name": "' and native.structural_tag()["format"]["begin"] == 'convert", "parameters": '
    with pytest.raises(ValueError, match="no tool's opening continues"):
        CallConstraint((CONVERT,), "xml", '<tool_call>\n{"name": "nope')
    with pytest.raises(ValueError, match="at least one tool"):
        CallConstraint((), "xml")


@needs_xgrammar
def test_compiled_grammars_are_bounded_least_recently_used_out(tiny_backend, monkeypatch):
    from data_builders.backends.grammar import GrammarCache

    monkeypatch.setattr(GrammarCache, "max_grammars", 3)
    cache = GrammarCache(tiny_backend.tokenizer, tiny_backend.config.vocab_size)
    constraints = [CallConstraint((tool(f"t{i}", {"on": {"type": "boolean"}}),)) for i in range(5)]
    compiled = [cache.get(c) for c in constraints]
    assert cache._compile.cache_info().currsize == 3
    assert cache.get(constraints[-1]) is compiled[-1] and cache.get(constraints[0]) is not compiled[0]


def test_missing_xgrammar_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgrammar", None)
    with pytest.raises(ImportError, match=r"pip install '\.\[constrained\]'"):
        import_xgrammar()


@pytest.mark.slow
@needs_xgrammar
def test_constrained_generations_are_valid_calls_unconstrained_are_not(tiny_backend):
    tools = [CONVERT, FLAG]
    ps = prompts(tiny_backend, 8, XML_OPEN)
    cons = [CallConstraint.after(tools, "xml", XML_OPEN)] * len(ps)
    gens = tiny_backend.generate(ps, PARAMS, constraints=cons)
    assert all(g.finish_reason == "stop" for g in gens), [g.text for g in gens]
    assert all(valid_call(XML_OPEN + g.text, tools) for g in gens), [g.text for g in gens]
    free = tiny_backend.generate(ps, PARAMS)
    assert not any(valid_call(XML_OPEN + g.text, tools) for g in free), [g.text for g in free]


@needs_xgrammar
def test_each_row_obeys_its_own_tools(tiny_backend):
    sets = [[CONVERT], [FLAG, LOOKUP]]
    ps = prompts(tiny_backend, 4, XML_OPEN)
    gens = tiny_backend.generate(ps, PARAMS, constraints=[CallConstraint.after(sets[i % 2], "xml", XML_OPEN)
                                                          for i in range(4)])
    for i, g in enumerate(gens):
        assert valid_call(XML_OPEN + g.text, sets[i % 2]), (i, g.text)
    names = {parse_tool_call(XML_OPEN + g.text).name for g in gens[1::2]}
    assert names <= {"set_flag", "lookup"} and "convert" not in names


@needs_xgrammar
def test_native_format_and_free_rows_in_one_batch(tiny_backend):
    prefill = '{"name": "'
    ps = prompts(tiny_backend, 4, prefill)
    params = SamplingParams(max_new_tokens=48, temperature=1.0, seed=1)
    gens = tiny_backend.generate(ps, params, constraints=[CallConstraint.after([CONVERT], "native", prefill), None,
                                                          CallConstraint.after([CONVERT], "native", prefill), None])
    for g in gens[::2]:
        call = parse_tool_call(prefill + g.text)
        assert call is not None and call.name == "convert", g.text
        assert (prefill + g.text).startswith('{"name": "convert", "parameters": {') and g.text.endswith("}")
        assert g.finish_reason == "eos"   # native: the call is the whole turn
        jsonschema.validate(call.arguments, CONVERT["function"]["parameters"])
    assert not any((prefill + g.text).startswith('{"name": "convert", "parameters": {') for g in gens[1::2])


@needs_xgrammar
def test_logprobs_are_the_raw_model_distribution(tiny_backend):
    """G-STEP reads Generation.logprobs: under the grammar they stay log p(token) of the *unmasked* model."""
    ps = prompts(tiny_backend, 2, XML_OPEN)
    greedy = SamplingParams(max_new_tokens=48, stop=("</tool_call>",))
    gens = tiny_backend.generate(ps, greedy, return_logprobs=True,
                                 constraints=[CallConstraint.after([CONVERT], "xml", XML_OPEN)] * 2)
    model, tok = tiny_backend.model, tiny_backend.tokenizer
    forced = 0
    for p, g in zip(ps, gens):
        assert valid_call(XML_OPEN + g.text, [CONVERT])
        prompt_ids = tok(p, add_special_tokens=False).input_ids
        ids = torch.tensor([prompt_ids + g.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        steps = logp[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(g.token_ids)]
        raw = steps.gather(-1, torch.tensor(g.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(g.logprobs), raw, atol=1e-4)
        forced += int((steps.argmax(-1) != torch.tensor(g.token_ids)).sum())
    assert forced > 0   # the grammar overrode the model's greedy choice, so the check above is not vacuous


def memory_task(tid: str) -> Task:
    return Task.from_dict({
        "id": tid, "instruction": f"What is stored in memory {tid}?", "difficulty": "easy",
        "environments": [{"name": "CalculatorEnv", "tools": ["get_last_result", "clear_last_result"],
                          "parameters": {}}],
        "expected": {"answer": "0"}, "tags": ["calculator", "single_round"]}, split="test")


class OpenCall(Hooks):
    def pre_generation(self, task, state):
        return XML_OPEN


@pytest.mark.parametrize("constrained", [pytest.param(True, marks=needs_xgrammar), False])
def test_agent_loop_with_constrained_calls(tiny_backend, constrained):
    cfg = AgentConfig(mode="force", call_format="xml", max_rounds=1, max_new_tokens=48, temperature=1.0,
                      constrained_calls=constrained)
    trajs = Agent(tiny_backend, cfg, OpenCall()).run([memory_task(f"m{i}") for i in range(4)])
    calls = [c for t in trajs for c in t.calls]
    if constrained:
        assert len(calls) == 4 and {c.name for c in calls} <= {"get_last_result", "clear_last_result"}
        assert all(c.status == "executed" and c.args == {} for c in calls)
        assert all(t.malformed_calls == 0 and t.decoding["constrained_calls"] for t in trajs)
    else:   # the random model left to itself writes no call
        assert not calls and "constrained_calls" not in trajs[0].decoding


def test_openai_backend_sends_one_structural_tag_per_group(tiny_model_dir):
    requests = []

    def create(**kw):
        requests.append(kw)
        return SimpleNamespace(choices=[SimpleNamespace(index=i, model_dump=lambda: {
            "text": "}\n</tool_call>", "finish_reason": "stop", "stop_reason": "</tool_call>", "token_ids": [7]})
            for i in range(len(kw["prompt"]))])

    client = SimpleNamespace(completions=SimpleNamespace(create=create))
    b = OpenAIBackend(base_url="http://x/v1", tokenizer=str(tiny_model_dir), model="m", client=client)
    a, f = CallConstraint.after([CONVERT], "xml", XML_OPEN), CallConstraint.after([FLAG], "xml", XML_OPEN)
    gens = b.generate(["p0", "p1", "p2"], PARAMS, constraints=[a, None, a])
    assert len(gens) == 3 and all(g.text == "}\n</tool_call>" for g in gens)
    tags = [r["extra_body"].get("structured_outputs") for r in requests]
    assert tags == [{"structural_tag": a.key()}, None] and [len(r["prompt"]) for r in requests] == [2, 1]
    plain = OpenAIBackend(base_url="http://x/v1", tokenizer=str(tiny_model_dir), model="m", client=client,
                          vllm_extras=False)
    with pytest.raises(ValueError, match="needs a vLLM server"):
        plain.generate(["p0"], PARAMS, constraints=[f])


def test_constrained_arms_are_their_own_evaluator_setting():
    from recipes import compose
    from trainers.evaluate.run import build_arms, decoding_key, planned_arm_names

    cfg = compose("evaluate", ["arms.modes=[force]", "arms.constrained_calls=[false,true]", "arms.probe_prefill=null",
                               "arms.toolgate=null", "arms.g_step=null", "reference=force"])
    assert planned_arm_names(cfg)[0] == ["force", "force+cc"]
    plain, cc = build_arms(cfg, "policy", "xml")[0]
    assert (plain.agent, cc.agent) == ({}, {"constrained_calls": True}) and plain.cache_spec != cc.cache_spec
    agent_kw = dict(compose("evaluate", ["agent.constrained_calls=true"]).agent)
    assert decoding_key(agent_kw)["constrained_calls"] is True
    assert "constrained_calls" not in decoding_key({**agent_kw, "constrained_calls": False})
