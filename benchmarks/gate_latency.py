"""Decision latency of the committed gates through the runtime API, on this CPU (measure only).

    flock /tmp/torch.lock python benchmarks/gate_latency.py [--n 100] [--threads 1]

ToolGate: a conversation whose trajectory summary fills the caps (~267 MiniLM word pieces; the encoder reads 256),
asked about a pending call: medians of ``--n`` runs of the MiniLM embedding alone, of the decision
(``GateDecision.latency_ms``: summary + embedding + structural features + logistic) and of the whole API call
(conversion included). G-STEP: the same for an answer. The usage line also needs ``PYTHONPATH=.`` when the
installed toolwise is another checkout.
Prints one line per figure and ends with ``toolgate_ms=… toolgate_embed_ms=… g_step_ms=…``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from data_builders.agent import prompts as P
from data_builders.features.toolgate import _encoder, embed_texts, summary_text
from data_builders.runtime.api import Gates
from data_builders.runtime.messages import toolgate_episode

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
    ref = OmegaConf.load(REPO / "recipes/checkpoints/reference.yaml")
    gates = Gates.load(toolgate=str(REPO / ref.toolgate), g_step=str(REPO / ref.g_step), tokenizer=None)

    msgs = conversation(60)   # question past its 700-char cap: the longest summary (~267 pieces, cut to 256)
    pending = call("25+8+9", "c2")
    view, parsed = toolgate_episode(msgs, TOOLS, pending, call_format=gates.call_format)
    text = summary_text(view, parsed)
    pieces = len(_encoder().tokenizer(text, add_special_tokens=True).input_ids)
    embed = median_ms(lambda: embed_texts([text]), args.n)
    tool = median_ms(lambda: gates.tool_call(msgs, TOOLS, pending), args.n)
    inside = statistics.median(gates.tool_call(msgs, TOOLS, pending).latency_ms for _ in range(args.n))
    answer = dict(usage={"prompt_tokens": 760, "completion_tokens": 6}, finish_reason="stop")
    gstep = median_ms(lambda: gates.answer(msgs, TOOLS, "The total is \\boxed{42}.", [-0.1] * 6, **answer), args.n)
    g_inside = statistics.median(gates.answer(msgs, TOOLS, "The total is \\boxed{42}.", [-0.1] * 6, **answer)
                                 .latency_ms for _ in range(args.n))

    print(f"threads={torch.get_num_threads()} n={args.n} summary_chars={len(text)} summary_wordpieces={pieces} "
          f"(MiniLM reads at most 256)")
    print(f"toolgate: MiniLM embedding {embed:.2f} ms, decision (featurize + logistic) {inside:.2f} ms, "
          f"API call (conversion included) {tool:.2f} ms  [median]")
    print(f"g_step:   decision (featurize + MLP) {g_inside:.3f} ms, API call (conversion included) {gstep:.3f} ms")
    print(f"toolgate_ms={inside:.2f} toolgate_embed_ms={embed:.2f} toolgate_api_ms={tool:.2f} "
          f"g_step_ms={g_inside:.3f} g_step_api_ms={gstep:.3f}")


if __name__ == "__main__":
    main()
