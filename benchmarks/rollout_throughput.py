"""Batched rollouts vs one task at a time, side by side in one run on the embedded model.

    python benchmarks/rollout_throughput.py [--tasks 32] [--mode force] [--max-rounds 3] [--new-tokens 96]

Target: batched throughput >= 3x one-at-a-time for 32 tasks. Both runs use the same tasks and
greedy decoding; the script also reports how many trajectories came out identical (batching pads
prompts, which can flip a near-tied greedy choice in float32 — we report it rather than hide it).
"""
from __future__ import annotations

import argparse
import time

import torch

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import summarize
from data_builders.backends.loading import load_backend
from data_builders.tasks import load_tasks


def timed(backend, tasks, in_flight: int, args) -> tuple[float, list[dict]]:
    cfg = AgentConfig(mode=args.mode, max_rounds=args.max_rounds, max_new_tokens=args.new_tokens,
                      max_in_flight=in_flight)
    t0 = time.perf_counter()
    trajs = Agent(backend, cfg).run(tasks)
    return time.perf_counter() - t0, trajs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--mode", default="force")
    ap.add_argument("--max-rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args()
    torch.manual_seed(0)
    backend = load_backend(args.model)
    tasks = load_tasks("builtin", limit=args.tasks)
    Agent(backend, AgentConfig(max_rounds=1, max_new_tokens=4)).run(tasks[:2])  # warm-up

    t_batch, batched = timed(backend, tasks, len(tasks), args)
    t_single, single = timed(backend, tasks, 1, args)
    gen_tokens = sum(tr.decode_tokens for t in batched for tr in t.turns)
    same = sum(a.messages == b.messages for a, b in zip(batched, single))
    for name, t, tr in (("batched", t_batch, batched), ("one-at-a-time", t_single, single)):
        s = summarize(tr)
        print(f"{name:>14}: {t:7.1f} s  {len(tasks) / t:6.3f} tasks/s  accuracy={s['accuracy']:.3f} "
              f"calls/task={s['tool_calls_per_task']:.2f} tokens/task={s['tokens_per_task']:.1f}")
    print(f"batched generated {gen_tokens} tokens ({gen_tokens / t_batch:.1f} tok/s); identical trajectories "
          f"{same}/{len(tasks)}")
    print(f"throughput_ratio={t_single / t_batch:.2f} tasks={len(tasks)} batched_s={t_batch:.1f} single_s={t_single:.1f}")


if __name__ == "__main__":
    main()
