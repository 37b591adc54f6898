"""Rollout throughput of the vLLM backend against the HF backend, side by side in one run.

    python benchmarks/vllm_throughput.py [--path $WHEN2TOOL] [--tasks 64] [--mode default]

Needs vLLM in the running environment (scripts/install_vllm_cpu.sh on CPUs). Both arms run the same tasks
(When2Tool test, the first N interleaved over category x difficulty; built-in tasks without --path) with
the embedded policy, greedy, the same agent settings; the HF arm runs first so vLLM's thread binding
cannot slow it. Each arm gets a 2-task warm-up first. Target: vLLM >= 2x the HF backend with
identical greedy trajectories; the script prints how many trajectories came out identical, and where the
first difference is for those that did not.
"""
from __future__ import annotations

import argparse
import time

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import summarize
from data_builders.backends.loading import backend_from_config
from data_builders.tasks import load_tasks
from recipes import compose


def timed(backend, tasks, args) -> tuple[float, list[dict]]:
    cfg = AgentConfig(mode=args.mode, max_rounds=args.max_rounds, max_new_tokens=args.new_tokens,
                      max_in_flight=args.in_flight)
    Agent(backend, AgentConfig(mode=args.mode, max_rounds=1, max_new_tokens=8)).run(tasks[:2])  # warm-up
    t0 = time.perf_counter()
    trajs = Agent(backend, cfg).run(tasks)
    return time.perf_counter() - t0, trajs


def first_difference(a: list[dict], b: list[dict]) -> str:
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"message {k} ({x['role']}): hf={x['content'][:80]!r} vllm={y['content'][:80]!r}"
    return f"lengths {len(a)} vs {len(b)}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2_tool_sft", help="a recipes/model config name")
    ap.add_argument("--path", default=None, help="When2Tool task directory (default: built-in tasks)")
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--mode", default="default")
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=192)
    ap.add_argument("--in-flight", type=int, default=64)
    args = ap.parse_args()
    tasks = (load_tasks("when2tool", split="test", path=args.path, limit=args.tasks) if args.path
             else load_tasks("builtin", split="test", limit=args.tasks))

    arms = {}
    for name in ("hf", "vllm"):
        cfg = compose("rollout", [f"model={args.model}", f"backend={name}"])
        backend = backend_from_config(cfg.model, cfg.backend)
        arms[name] = timed(backend, tasks, args)
        del backend
    (t_hf, hf), (t_v, vl) = arms["hf"], arms["vllm"]
    same = [a.messages == b.messages for a, b in zip(hf, vl)]
    for name, (t, trajs) in arms.items():
        s = summarize(trajs)
        toks = sum(tr.decode_tokens for t_ in trajs for tr in t_.turns)
        print(f"{name:>5}: {t:7.1f} s  {len(tasks) / t:6.3f} tasks/s  {toks / t:7.1f} generated tok/s  "
              f"accuracy={s['accuracy']:.3f} calls/task={s['tool_calls_per_task']:.2f} tokens/task={s['tokens_per_task']:.1f}")
    for i, ok in enumerate(same):
        if not ok:
            print(f"  differs: task {tasks[i].id}: {first_difference(hf[i].messages, vl[i].messages)}")
    src = f"When2Tool test ({args.path})" if args.path else "built-in test"
    print(f"{len(tasks)} tasks from {src}, mode {args.mode}, max_rounds {args.max_rounds}, "
          f"max_new_tokens {args.new_tokens}, greedy, policy {cfg.model.name}+{cfg.model.adapter}")
    print(f"vllm_speedup={t_hf / t_v:.2f} tasks={len(tasks)} hf_s={t_hf:.1f} vllm_s={t_v:.1f} "
          f"identical_trajectories={sum(same)}/{len(tasks)}")


if __name__ == "__main__":
    main()
