"""The cost of running a decision-point build on Ray instead of in-process, side by side in one run.

    python benchmarks/executor_overhead.py [--tasks 64] [--shard-size 16] [--model smollm2_tool_sft]

Builds the same probe dataset (builtin tasks, backend hf) three times into fresh directories: ``executor=local``,
``executor=ray executor.workers=1`` (the worker gets every core, as the local run does) and ``workers=2`` (one
core and one torch thread each, so they do not oversubscribe). Startup (engine load; for Ray also the local
cluster and the actors) is reported apart from throughput (tasks/s over the shards, startup excluded). Target:
Ray with one worker at most 1.15x the local build's time per task. On a 2-core machine two workers
cannot be faster than one; on a GPU cluster each worker holds its own engine. The three datasets must be
identical (same shard hashes), which is checked too.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from data_builders import build
from data_builders.points.store import load_points
from recipes import compose


def timed_build(overrides: list[str]) -> dict:
    """One build; its executor's startup and the rest of the wall time."""
    made = []
    original = build.executor_from_config

    def recording(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]
    build.executor_from_config = recording
    try:
        start = time.perf_counter()
        build.run(compose("build", overrides))
        wall = time.perf_counter() - start
    finally:
        build.executor_from_config = original
    startup = made[0].startup_s
    return {"startup_s": startup, "build_s": wall - startup}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=64, help="builtin tasks, half train, half test")
    ap.add_argument("--shard-size", type=int, default=16)
    ap.add_argument("--model", default="smollm2_tool_sft")
    args = ap.parse_args()

    cores = os.cpu_count() or 1
    runs = {"local": ["executor=local"],
            "ray, 1 worker": ["executor=ray", "executor.workers=1", f"executor.num_cpus={cores}"],
            "ray, 2 workers": ["executor=ray", "executor.workers=2", f"executor.num_cpus={max(cores // 2, 1)}",
                               "executor.torch_threads=1"]}
    results, shards = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, over in runs.items():
            out = Path(tmp) / name.replace(" ", "").replace(",", "_")
            base = ["kind=probe", f"model={args.model}", "backend=hf", "tasks=builtin", "splits=[train,test]",
                    f"limit={args.tasks // 2}", f"shard_size={args.shard_size}", f"out_dir={out}"]
            results[name] = timed_build(base + over)
            ds = load_points(out)
            results[name]["tasks"] = ds.manifest["n_tasks"]
            shards[name] = ds.manifest["shards"]
    same = all(s == shards["local"] for s in shards.values())

    local = results["local"]["build_s"] / results["local"]["tasks"]
    print(f"\nprobe build, model={args.model}, {results['local']['tasks']} tasks in shards of {args.shard_size}, "
          f"{cores} CPU cores")
    print(f"{'executor':<16}{'startup s':>10}{'build s':>9}{'tasks/s':>9}{'time/task vs local':>20}")
    for name, r in results.items():
        per_task = r["build_s"] / r["tasks"]
        print(f"{name:<16}{r['startup_s']:>10.1f}{r['build_s']:>9.1f}{r['tasks'] / r['build_s']:>9.2f}"
              f"{per_task / local:>19.2f}x")
    ratio = results["ray, 1 worker"]["build_s"] / results["local"]["build_s"]
    print(f"ray_overhead_1_worker={ratio:.3f} (target <= 1.15) datasets_identical={same}")


if __name__ == "__main__":
    main()
