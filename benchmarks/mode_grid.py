"""Accuracy and tool calls per task by category × difficulty, for several prompt modes side by side.

    python benchmarks/mode_grid.py --path $WHEN2TOOL --per-cell 1 --modes force default no_tool \
        [force+cc] [--backend vllm]     # vLLM: run with the vLLM venv's python (scripts/install_vllm_cpu.sh)

Runs the agent on the same tasks once per mode (one backend load), then prints a Markdown table (rows:
category × difficulty; per mode: accuracy and tool calls per task) and ends with one key=value line.
Without --path the built-in tasks are used. The subsample is stratified: --per-cell tasks from every
(environment, difficulty, hops) cell, drawn with --sample-seed.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import Trajectory, read_trajectories, summarize, write_trajectories
from data_builders.backends.loading import backend_from_config
from data_builders.tasks import load_tasks
from data_builders.tasks.schema import DIFFICULTIES
from recipes import compose

CATEGORY_NAMES = {"A": "A scale", "B": "B knowledge", "C": "C execution", "M": "multi-hop"}


DETERMINISTIC_12 = {"CalculatorEnv", "StatisticsEnv", "CountingEnv", "MatrixEnv", "PrimeEnv", "HashEnv", "DecodingEnv",
                    "ListManipulationEnv", "DateTimeEnv", "CodeExecutorEnv", "ScheduleEnv", "RegexMatchEnv"}


def headline(trajs: list[Trajectory]) -> dict:
    """The figures the tool-use SFT issue is judged on, for one mode."""
    proposed = sum(len(t.calls) + t.malformed_calls for t in trajs)
    det = [t for t in trajs if t.env in DETERMINISTIC_12 and t.category != "M"]
    easy = [t for t in trajs if t.difficulty == "easy" and t.category != "M"]
    return {
        "valid_call_format": sum(len(t.calls) for t in trajs) / proposed if proposed else float("nan"),
        "proposed_calls": proposed,
        "acc_deterministic12": sum(t.correct for t in det) / len(det) if det else float("nan"),
        "acc_easy": sum(t.correct for t in easy) / len(easy) if easy else float("nan"),
    }


def table(results: dict[str, list[Trajectory]], tasks) -> str:
    category = {str(t.id): t.category for t in tasks}
    modes = list(results)
    head = "| category | difficulty | n | " + " | ".join(f"{m} acc | {m} calls" for m in modes) + " |"
    lines = [head, "|" + "---|" * (3 + 2 * len(modes))]
    cells: dict[tuple[str, str], dict[str, list[Trajectory]]] = defaultdict(lambda: defaultdict(list))
    for mode, trajs in results.items():
        for tr in trajs:
            cells[(category[str(tr.task_id)], tr.difficulty)][mode].append(tr)
            cells[("all", "all")][mode].append(tr)
    rank = {d: i for i, d in enumerate(DIFFICULTIES)}
    for key in sorted(cells, key=lambda k: (k[0] == "all", k[0], rank.get(k[1], 9))):
        per_mode = cells[key]
        n = len(next(iter(per_mode.values())))
        row = [CATEGORY_NAMES.get(key[0], key[0]), key[1], str(n)]
        for m in modes:
            s = summarize(per_mode[m])
            row += [f"{s['accuracy']:.2f}", f"{s['tool_calls_per_task']:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--path", default=None, help="When2Tool task directory; default: built-in tasks")
    ap.add_argument("--split", default="test")
    ap.add_argument("--per-cell", type=int, default=1)
    ap.add_argument("--difficulties", nargs="*", default=None, help="only these difficulties (default: all)")
    ap.add_argument("--sample-seed", type=int, default=0)
    ap.add_argument("--modes", nargs="*", default=["force", "default", "no_tool"],
                    help="prompt modes; <mode>+cc runs the mode with schema-constrained calls (agent.constrained_calls)")
    ap.add_argument("--max-rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"],
                    help="engine (recipes/backend/<name>.yaml); vllm gives the same greedy trajectories, faster")
    ap.add_argument("--out", default="outputs/mode_grid")
    ap.add_argument("--include-existing", action="store_true",
                    help="also tabulate <mode>.jsonl files already in --out from an earlier run on the same tasks")
    args = ap.parse_args()

    if args.path:
        tasks = load_tasks("when2tool", split=args.split, path=args.path, per_cell=args.per_cell,
                           sample_seed=args.sample_seed, difficulties=args.difficulties)
    else:
        tasks = load_tasks("builtin", split=args.split, n_per_cell=max(args.per_cell, 1), per_cell=args.per_cell,
                           sample_seed=args.sample_seed, difficulties=args.difficulties)
    backend = backend_from_config({"name": args.model, "adapter": args.adapter, "device": "auto"},
                                  compose("rollout", [f"backend={args.backend}"]).backend)
    results, seconds = {}, {}
    out = Path(args.out)
    for mode in args.modes:
        base, _, cc = mode.partition("+")
        if cc not in ("", "cc"):
            ap.error(f"--modes {mode}: a mode, or <mode>+cc for constrained calls")
        cfg = AgentConfig(mode=base, max_rounds=args.max_rounds, max_new_tokens=args.new_tokens,
                          constrained_calls=cc == "cc")
        t0 = time.perf_counter()
        results[mode] = Agent(backend, cfg).run(tasks)
        seconds[mode] = time.perf_counter() - t0
        write_trajectories(out / f"{mode}.jsonl", results[mode])
        print(f"{mode}: {seconds[mode]:.0f} s, {json.dumps(summarize(results[mode]))}", flush=True)
    if args.include_existing:
        ids = sorted(str(t.id) for t in tasks)
        for f in sorted(out.glob("*.jsonl")):
            if f.stem not in results:
                earlier = list(read_trajectories(f))
                if sorted(str(t.task_id) for t in earlier) != ids:
                    raise SystemExit(f"{f} was run on other tasks; rerun its mode instead")
                results[f.stem] = earlier
        results = {m: results[m] for m in sorted(results, key=lambda m: (m not in args.modes, m))}
    print(f"\n{len(tasks)} tasks ({'When2Tool ' + args.split if args.path else 'built-in ' + args.split}, "
          f"{args.per_cell} per environment x difficulty cell, sample seed {args.sample_seed}), "
          f"model {backend.fingerprint}, max_rounds {args.max_rounds}, greedy\n")
    print(table(results, tasks))
    print()
    for m, r in results.items():
        h = headline(r)
        print(f"{m}: valid call format {h['valid_call_format']:.3f} of {h['proposed_calls']} proposed calls; "
              f"accuracy on the 12 deterministic envs {h['acc_deterministic12']:.3f}; on easy tasks {h['acc_easy']:.3f}")
    print(" ".join(f"accuracy_{m}={summarize(r)['accuracy']:.3f} calls_{m}={summarize(r)['tool_calls_per_task']:.2f}"
                   for m, r in results.items()) + f" tasks={len(tasks)}")


if __name__ == "__main__":
    main()
