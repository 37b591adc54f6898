"""Decision latency of the committed gates through the runtime API, on this CPU (measure only).

    flock /tmp/torch.lock python benchmarks/gate_latency.py [--n 100] [--threads 1]

ToolGate: a conversation with a long question, asked about a pending call: medians of ``--n`` runs of the MiniLM
embedding alone — on ONNX Runtime (what the featurizer uses) and on torch, side by side, plus torch at the 256 word
pieces featurizer v1 read — of the decision (``GateDecision.latency_ms``: text + embedding + structural features +
logistic) and of the whole API call (conversion included). G-STEP: the same for an answer. The usage line also needs ``PYTHONPATH=.`` when the
installed toolwise is another checkout.
Probe: the decision on a hidden-state tensor of the committed probe's input shape.
Prints one line per figure and ends with ``toolgate_ms=… toolgate_embed_ms=… g_step_ms=… probe_ms=…``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import recipes

from data_builders.agent import prompts as P
from data_builders.features import minilm
from data_builders.gates import gates as registered
from data_builders.features.toolgate import MAX_TOKENS, embed_texts, summary_text
from data_builders.agent.hooks import PromptState
from runtime.api import Gates
from runtime.controller_hooks import decide
from data_builders.agent.openai_messages import call_episode

REPO = Path(__file__).resolve().parents[1]
TOOLS = [{"type": "function", "function": {"name": "evaluate_expression", "description": "Evaluate an expression.",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}}}}]


def call(expr: str, cid: str) -> dict:
    return {"id": cid, "type": "function",
            "function": {"name": "evaluate_expression", "arguments": json.dumps({"expression": expr})}}


def conversation(words: int) -> list[dict]:
    """A question of ``words`` words, a reasoning turn with a call, and its result."""
    question = "A warehouse ships crates of " + " ".join(f"item{k} weighing {k % 17 + 3} kg," for k in range(words))
    return [{"role": "system", "content": P.system_prompt("xml")},
            {"role": "user", "content": P.user_prompt(question + " What is the total weight?", "default", False)},
            {"role": "assistant", "content": "I will add the first weights with the calculator.",
             "tool_calls": [call("3+4+5+6+7", "c1")], "usage": {"prompt_tokens": 700, "completion_tokens": 40},
             "logprobs": [-0.2] * 40, "finish_reason": "stop"},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"success": True, "result": 25})}]


def median_ms(fn, n: int) -> float:
    fn()   # warm-up (lazy loads, first-call allocations)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="decisions per figure (median reported), >= 50")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = ap.parse_args()
    if args.n < 50:
        ap.error("--n must be >= 50")
    if args.threads:
        torch.set_num_threads(args.threads)
    ref = recipes.compose("rollout").checkpoints
    # every gate of the registry with a committed checkpoint
    gates = Gates.load({name: str(REPO / ref[name]) for name in registered() if ref.get(name)}, tokenizer=None)

    msgs = conversation(60)   # a question far past MAX_TOKENS: the encoder reads its cap
    pending = call("25+8+9", "c2")
    view, parsed = call_episode(msgs, TOOLS, pending, call_format=gates.call_format)
    text = summary_text(view, parsed)
    pieces = len(minilm.sentence_transformer().tokenizer(text, add_special_tokens=True).input_ids)
    embed = median_ms(lambda: embed_texts([text]), args.n)
    embed_onnx = median_ms(lambda: minilm.embed([text], MAX_TOKENS, backend="onnx"), args.n)
    embed_torch = median_ms(lambda: minilm.embed([text], MAX_TOKENS, backend="torch"), args.n)
    long_text = " ".join(m["content"] for m in msgs if m.get("content"))   # > 256 pieces: what v1 read
    embed_torch_256 = median_ms(lambda: minilm.embed([long_text], 256, backend="torch"), args.n)
    embed_onnx_256 = median_ms(lambda: minilm.embed([long_text], 256, backend="onnx"), args.n)
    tool = median_ms(lambda: gates.tool_call(msgs, TOOLS, pending), args.n)
    inside = statistics.median(gates.tool_call(msgs, TOOLS, pending).latency_ms for _ in range(args.n))
    answer = dict(usage={"prompt_tokens": 760, "completion_tokens": 6}, finish_reason="stop")
    gstep = median_ms(lambda: gates.answer(msgs, TOOLS, "The total is \\boxed{42}.", [-0.1] * 6, **answer), args.n)
    g_inside = statistics.median(gates.answer(msgs, TOOLS, "The total is \\boxed{42}.", [-0.1] * 6, **answer)
                                 .latency_ms for _ in range(args.n))

    # the probe's decision on the last prompt token's states (the prefill forward itself is the policy's own,
    # shared with generation): a stand-in tensor of the committed probe's input shape
    first = gates.at("pre_generation")[0]          # the gate that reads the first prompt's states (Probe&Prefill)
    controller = gates.controllers[first]
    hidden = torch.randn(*controller.contract["input_shape"])
    state = PromptState("prompt", [], hidden, list(range(hidden.shape[0])))
    probe = statistics.median(decide(first, controller, state).latency_ms for _ in range(args.n))

    print(f"threads={torch.get_num_threads()} n={args.n} summary_chars={len(text)} summary_wordpieces={pieces} "
          f"(the encoder reads {min(pieces, MAX_TOKENS)})")
    print(f"MiniLM at {MAX_TOKENS} pieces: onnxruntime {embed_onnx:.2f} ms, torch {embed_torch:.2f} ms; "
          f"at 256 pieces (featurizer v1): onnxruntime {embed_onnx_256:.2f} ms, torch {embed_torch_256:.2f} ms")
    print(f"toolgate: MiniLM embedding {embed:.2f} ms, decision (featurize + logistic) {inside:.2f} ms, "
          f"API call (conversion included) {tool:.2f} ms  [median]")
    print(f"g_step:   decision (featurize + MLP) {g_inside:.3f} ms, API call (conversion included) {gstep:.3f} ms")
    print(f"probe:    decision (states {list(hidden.shape)} -> linear) {probe:.3f} ms")
    print(f"toolgate_ms={inside:.2f} toolgate_embed_ms={embed:.2f} toolgate_api_ms={tool:.2f} "
          f"embed_256_torch_ms={embed_torch_256:.2f} "
          f"g_step_ms={g_inside:.3f} g_step_api_ms={gstep:.3f} probe_ms={probe:.3f}")


if __name__ == "__main__":
    main()
