"""Test doubles shared across the suite: a scripted policy backend, the calculator task it is scripted for, and
hooks that force a decision. A module, not conftest.py: conftest loads for every test and stays import-light
(torch and the agent loop cost seconds that most tests do not need); the tests that use these import them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.base import Backend, Generation, PrefillState
from data_builders.tasks.schema import Task


def calc_task(tid, expr, answer, difficulty="easy"):
    return Task.from_dict({
        "id": tid, "instruction": f"Answer with only the number: {expr}", "difficulty": difficulty,
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression", "get_last_result",
                                                              "clear_last_result"], "parameters": {}}],
        "expected": {"answer": answer}, "tags": ["calculator", "single_round"]}, split="test")


class ScriptedBackend(Backend):
    """Replies from a per-task script (keyed by a marker found in the prompt), one entry per round."""

    model_id = "scripted"
    n_layers = 2

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = scripts
        self.calls: list[list[str]] = []
        self.prefill_calls = 0
        self.last_prefill_state: PrefillState | None = None

    @property
    def fingerprint(self):
        return "scripted@0"

    def render(self, messages, tools=None):
        return json.dumps({"messages": messages, "tools": [t["function"]["name"] for t in tools or []]})

    def count_tokens(self, text):
        return len(text.split())

    def _reply(self, prompt):
        for key, script in self.scripts.items():
            if key in prompt:
                n_assistant = prompt.count('"role": "assistant"')
                return script[min(n_assistant, len(script) - 1)]
        raise AssertionError(f"no script for prompt {prompt[:200]}")

    def generate(self, prompts, params=None, *, prefill_state=None, return_logprobs=False, cache_keys=None):
        self.calls.append(list(prompts))
        if prefill_state is not None:
            assert prefill_state is self.last_prefill_state
            for p, q in zip(prompts, prefill_state.prompts):
                assert p.startswith(q)
        out = []
        for p in prompts:
            base = p if prefill_state is None else prefill_state.prompts[prompts.index(p)]
            text = self._reply(base)
            out.append(Generation(text=text, token_ids=list(range(len(text.split()))), prompt_tokens=len(p.split()),
                                  finish_reason="eos", logprobs=[-0.5] * len(text.split()) if return_logprobs else None))
        return out

    def prefill(self, prompts, layers=None):
        self.prefill_calls += 1
        layers = list(layers)
        self.last_prefill_state = PrefillState(list(prompts), layers, torch.ones(len(prompts), len(layers), 4))
        return self.last_prefill_state


CALL = '<tool_call>\n{"name": "evaluate_expression", "arguments": {"expression": "%s"}}\n</tool_call>'


def run(scripts, tasks, hooks=None, **cfg):
    backend = ScriptedBackend(scripts)
    agent = Agent(backend, AgentConfig(**cfg), hooks)
    return agent.run(tasks), backend


class SkipHooks(Hooks):
    def pre_call(self, episode, call):
        return "skip"


def tiny_adapter(tiny_model_dir, out: Path) -> Path:
    """A LoRA adapter of the tiny Llama, saved as peft saves one (adapter_config.json + adapter_model.safetensors)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).save_pretrained(out)
    return out


# ---- a team's own tools: the worked example's MCP server (examples/unit_tools) and the gates fit on it
UNIT_TOOLS = Path(__file__).resolve().parents[1] / "examples" / "unit_tools"
UNIT_TOOLS_GATES = {g: str(UNIT_TOOLS.parents[1] / "checkpoints" / g / "unit_tools") for g in ("toolgate", "g_step")}
#: question -> the call a scripted upstream proposes for it (the second: a call that does not fit the question)
OWN_TOOL_CALLS = {
    "How many centimetres are in 8 metres?": ("convert_units", {"value": 8, "from_unit": "m", "to_unit": "cm"}),
    "What is the capital of France?": ("convert_units", {"value": 1, "from_unit": "m", "to_unit": "cm"}),
    "Find the passage about the boiling point of water.": ("search", {"query": "boiling point"})}


def unit_tools_specs() -> list[dict]:
    """The example server's tools as an MCP client lists them (OpenAI function tools), from the real server."""
    from data_builders.tool_sources import source_from_spec

    source = source_from_spec({"kind": "mcp", "command": [sys.executable, "server.py"]}, base_dir=UNIT_TOOLS)
    try:
        return source.tools()
    finally:
        source.close()


def own_tool_call(question: str) -> dict:
    """The OpenAI tool call :data:`OWN_TOOL_CALLS` scripts for ``question``."""
    name, args = OWN_TOOL_CALLS[question]
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def own_tools_reply(body: dict) -> dict:
    """A ScriptedUpstream reply: the scripted call for the conversation's question, an answer after a tool result
    or without tools."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool" or not body.get("tools"):
        return {"role": "assistant", "content": "\\boxed{800}"}
    question = next(m["content"] for m in messages if m["role"] == "user")
    return {"role": "assistant", "content": None, "tool_calls": [own_tool_call(question)]}
