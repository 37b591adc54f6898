"""Hidden-state extraction for probe datasets vs a bare batched forward pass, side by side in one run.

    python benchmarks/probe_extraction.py [--path $WHEN2TOOL] [--tasks 64] [--repeats 2]

Both arms see the same rendered first prompts (default mode, the probe's input), the same length-bucketed
batches and ``logits_to_keep=1``; the extraction arm is ``data_builders.features.probe.probe_features``
(all 31 hidden-state layers, copied to CPU float32), the bare arm is the model's forward without hidden
states. Target: extraction throughput >= 0.9x the bare pass. Arms alternate, best of --repeats.
"""
from __future__ import annotations

import argparse
import time

import torch

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.loading import backend_from_config
from data_builders.features.probe import probe_features
from data_builders.tasks import load_tasks
from recipes import compose


@torch.inference_mode()
def bare_forward(backend, prompts) -> None:
    for idx in backend._chunks(prompts):
        enc = backend._encode([prompts[i] for i in idx])
        backend.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], use_cache=True,
                      logits_to_keep=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2_tool_sft", help="a recipes/model config (default: embedded + tool_sft)")
    ap.add_argument("--path", default=None, help="When2Tool task directory (default: built-in tasks)")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    backend = backend_from_config(compose("rollout", [f"model={args.model}"]).model)   # HF: the probe's engine
    tasks = (load_tasks("when2tool", split="test", path=args.path, limit=args.tasks) if args.path
             else load_tasks("builtin", split="test", limit=args.tasks))
    agent = Agent(backend, AgentConfig(mode="default"))
    prompts = [agent.initial_prompt(t) for t in tasks]
    tokens = sum(backend.count_tokens(p) for p in prompts)
    bare_forward(backend, prompts[:4])                       # warm-up
    best = {"bare": float("inf"), "extract": float("inf")}
    for _ in range(args.repeats):
        t0 = time.perf_counter(); bare_forward(backend, prompts); best["bare"] = min(best["bare"], time.perf_counter() - t0)
        t0 = time.perf_counter(); hidden = probe_features(backend, prompts)
        best["extract"] = min(best["extract"], time.perf_counter() - t0)
    print(f"{len(prompts)} prompts, {tokens} tokens (mean {tokens / len(prompts):.0f}); features {tuple(hidden.shape)}")
    for k, v in best.items():
        print(f"{k:>8}: {v:7.2f} s  {tokens / v:8.1f} prompt tok/s")
    print(f"extraction_throughput_ratio={best['bare'] / best['extract']:.3f} prompts={len(prompts)} "
          f"bare_s={best['bare']:.2f} extract_s={best['extract']:.2f}")


if __name__ == "__main__":
    main()
