"""Probe read overhead: time(prefill with all-layer hidden states + generate from its cache) against
time(generate) on the same prompts, side by side, on the embedded model.

    python benchmarks/probe_overhead.py [--prompts 32] [--new-tokens 64] [--repeats 3]

Target: ratio <= 1.03 for 32 prompts, with identical generated tokens. The probe read keeps only each
row's last-position states (forward hooks, ``data_builders/backends/hf.py``), so what it adds over plain generation
is one re-fed token per row (``generate`` needs one uncached token): one decode step per batch.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.base import SamplingParams
from data_builders.backends.loading import load_backend
from data_builders.tasks import load_tasks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    backend = load_backend(args.model)
    agent = Agent(backend, AgentConfig(mode="default"))
    # The first-round prompts the agent really renders (system prompt, tools, policy lines).
    prompts = [agent._render(agent._start(t, i)) for i, t in enumerate(load_tasks("builtin", limit=args.prompts))]
    params = SamplingParams(max_new_tokens=args.new_tokens, stop=("</tool_call>",))
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=4))  # warm-up (allocator, stop-string tables)

    plain_t, probe_t, same = [], [], True
    for _ in range(args.repeats):   # alternate the two so drift on a shared machine hits both alike
        t0 = time.perf_counter()
        plain = backend.generate(prompts, params)
        plain_t.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        state = backend.prefill(prompts)            # every layer: embeddings + all decoder layers
        probed = backend.generate(prompts, params, prefill_state=state)
        probe_t.append(time.perf_counter() - t0)
        same &= all(a.token_ids == b.token_ids for a, b in zip(plain, probed))
    gp, gq = statistics.median(plain_t), statistics.median(probe_t)
    ctx = sum(g.prompt_tokens for g in plain) / len(plain)
    dec = sum(g.decode_tokens for g in plain) / len(plain)
    print(f"model={backend.fingerprint} prompts={len(prompts)} mean_prompt_tokens={ctx:.0f} "
          f"mean_decode_tokens={dec:.1f} hidden={tuple(state.hidden.shape)}")
    print(f"generate:              {', '.join(f'{x:.2f}' for x in plain_t)} s (median {gp:.2f})")
    print(f"probe read + generate: {', '.join(f'{x:.2f}' for x in probe_t)} s (median {gq:.2f})")
    pairs = [q / p for p, q in zip(plain_t, probe_t)]
    print(f"per-pair ratios:       {', '.join(f'{x:.3f}' for x in pairs)} (median {statistics.median(pairs):.3f})")
    print(f"probe_overhead_ratio={gq / gp:.3f} identical_tokens={same} prompts={len(prompts)}")


if __name__ == "__main__":
    main()
