"""Probe read overhead: time(prefill with all-layer hidden states + generate from its cache) against
time(generate) on the same prompts, side by side, on the embedded model.

    python benchmarks/probe_overhead.py [--prompts 32] [--new-tokens 64] [--repeats 5] [--isa avx2]

Target: ratio <= 1.03 for 32 prompts, with identical generated tokens; the ratio printed is the median of the
per-pair ratios (each pair runs plain generation and the probe read + generation, the order alternating from pair to
pair, so drift on a shared machine and what a pair's first run leaves behind hit both alike). The probe read keeps
only each row's last-position states (forward hooks, ``data_builders/backends/hf.py``), so what it adds over plain
generation is one re-fed token per row (``generate`` needs one uncached token): one decode step per batch.
``--isa avx2`` reruns the script with torch kept to AVX2 (ATen, oneDNN and MKL kernels: an AVX2-only laptop or cloud
VM, emulated on a newer CPU).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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
    ap.add_argument("--repeats", type=int, default=5, help="pairs")
    ap.add_argument("--isa", choices=("avx2", "avx512"), default=None,
                    help="rerun in a child process with torch's kernels (ATen, oneDNN, MKL) kept to this ISA")
    args = ap.parse_args()
    if args.isa and os.environ.get("MKL_ENABLE_INSTRUCTIONS") != args.isa.upper():
        env = dict(os.environ, ATEN_CPU_CAPABILITY=args.isa, ONEDNN_MAX_CPU_ISA=args.isa.upper(),
                   MKL_ENABLE_INSTRUCTIONS=args.isa.upper())     # MKL reads it when it loads: a fresh process
        sys.exit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)
    torch.manual_seed(0)
    backend = load_backend(args.model)
    agent = Agent(backend, AgentConfig(mode="default"))
    # The first-round prompts the agent really renders (system prompt, tools, policy lines).
    prompts = [agent._render(agent._start(t, i)) for i, t in enumerate(load_tasks("builtin", limit=args.prompts))]
    params = SamplingParams(max_new_tokens=args.new_tokens, stop=("</tool_call>",))
    # Warm-up: one short pass of each path over all the prompts. The first pass that holds every batch's prefill
    # cache at once (the probe path) grows the process's heap to its peak, page fault by page fault; that is a
    # once-per-process cost, not what a probe read adds to each request.
    warm = SamplingParams(max_new_tokens=8, stop=("</tool_call>",))
    backend.generate(prompts, warm)
    backend.generate(prompts, warm, prefill_state=backend.prefill(prompts))

    plain_t, probe_t, same = [], [], True
    for pair in range(args.repeats):
        # Each pair runs both, in alternating order (plain first, then probe first, ...), so that drift on a
        # shared machine and whatever the first run of a pair leaves behind (heap, caches) hit both alike.
        for arm in (("plain", "probe") if pair % 2 == 0 else ("probe", "plain")):
            t0 = time.perf_counter()
            if arm == "plain":
                plain = backend.generate(prompts, params)
                plain_t.append(time.perf_counter() - t0)
            else:
                state = backend.prefill(prompts)            # every layer: embeddings + all decoder layers
                probed = backend.generate(prompts, params, prefill_state=state)
                probe_t.append(time.perf_counter() - t0)
        same &= all(a.token_ids == b.token_ids for a, b in zip(plain, probed))
    gp, gq = statistics.median(plain_t), statistics.median(probe_t)
    ctx = sum(g.prompt_tokens for g in plain) / len(plain)
    dec = sum(g.decode_tokens for g in plain) / len(plain)
    print(f"model={backend.fingerprint} prompts={len(prompts)} mean_prompt_tokens={ctx:.0f} "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()} threads={torch.get_num_threads()} "
          f"mean_decode_tokens={dec:.1f} hidden={tuple(state.hidden.shape)}")
    print(f"generate:              {', '.join(f'{x:.2f}' for x in plain_t)} s (median {gp:.2f})")
    print(f"probe read + generate: {', '.join(f'{x:.2f}' for x in probe_t)} s (median {gq:.2f})")
    pairs = [q / p for p, q in zip(plain_t, probe_t)]
    print(f"per-pair ratios:       {', '.join(f'{x:.3f}' for x in pairs)} (median {statistics.median(pairs):.3f})")
    print(f"ratio of the medians:  {gq / gp:.3f}")
    print(f"probe_overhead_ratio={statistics.median(pairs):.3f} identical_tokens={same} prompts={len(prompts)} "
          f"pairs={len(pairs)}")


if __name__ == "__main__":
    main()
