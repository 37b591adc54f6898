"""How often the default policy answers each task template right without a tool: the measurement that keeps or
drops the trivial tier's candidate templates (data_builders/tasks/generators/trivial.py).

    python benchmarks/trivial_tier.py                                   # every candidate, train split
    python benchmarks/trivial_tier.py --tasks trivial_mix --split test  # a task option's unaided-correct share

The policy, its engine and the episode settings are the probe build's (``recipes/build.yaml``: the default
policy, greedy, ``max_rounds``) in ``hard_no_tool`` mode, i.e. exactly the run whose failure is the probe's
"tool needed" label, except ``--max-new-tokens`` (small: the policy answers a hard_no_tool prompt in about 20
tokens; the episodes a turn was cut in are counted, the only ones whose outcome the cap can change).

Candidate mode draws ``--n-per-template`` train tasks of every candidate (``--templates`` to pick some) plus,
for reference, ``--standard-per-cell`` standard built-in tasks per environment x difficulty, and prints one row
per template with its accuracy and whether :data:`~data_builders.tasks.generators.trivial.KEEP_RANGE` keeps it.
``--tasks OPTION`` instead measures the tasks a ``tasks=OPTION`` run selects on ``--split``, per tier and
template, and the share answered right unaided. Ends with one key=value line; trajectories go to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from data_builders.agent.loop import Agent
from data_builders.agent.trajectory import Trajectory, write_trajectories
from data_builders.backends.loading import backend_from_config
from data_builders.points.labelers import agent_config
from data_builders.tasks import interleave, load_tasks, tasks_from_config
from data_builders.tasks.builtin import generate_trivial
from data_builders.tasks.generators import trivial
from data_builders.tasks.schema import Task
from recipes import compose


def group_of(task: Task) -> str:
    """A trivial task's template, else ``standard <environment>``."""
    return task.tags[1] if task.tags[:1] == ("trivial",) else f"standard {task.env.name}"


def table(tasks: list[Task], trajs: list[Trajectory], cap: int, keep_column: bool) -> tuple[str, dict]:
    by: dict[str, list[tuple[Task, Trajectory]]] = defaultdict(list)
    for t, tr in zip(tasks, trajs):
        by[group_of(t)].append((t, tr))
    head = ["template", "environment", "n", "right", "unaided accuracy", "turns cut"] + \
        (["kept"] if keep_column else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    stats = {}
    lo, hi = trivial.KEEP_RANGE
    for name in sorted(by, key=lambda g: (g.startswith("standard"), list(trivial.CANDIDATES).index(g)
                                          if g in trivial.CANDIDATES else 0, g)):
        rows = by[name]
        right = sum(tr.correct for _, tr in rows)
        cut = sum(any(turn.decode_tokens >= cap for turn in tr.turns) for _, tr in rows)
        acc = right / len(rows)
        stats[name] = {"right": right, "n": len(rows), "accuracy": acc, "cut": cut}
        cells = [name, rows[0][0].env.name, str(len(rows)), str(right), f"{acc:.2f}", str(cut)]
        if keep_column:
            cells.append(("yes" if lo <= acc <= hi else "no") if name in trivial.CANDIDATES else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", default="train")
    ap.add_argument("--n-per-template", type=int, default=16)
    ap.add_argument("--templates", nargs="*", default=None, help="candidates to measure (default: all)")
    ap.add_argument("--standard-per-cell", type=int, default=2,
                    help="standard built-in tasks per environment x difficulty measured beside them (0: none)")
    ap.add_argument("--tasks", default=None, help="measure this tasks option (recipes/tasks/) instead")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--seed", type=int, default=0, help="the generators' seed (candidate mode)")
    ap.add_argument("--out", default="outputs/trivial_tier")
    args = ap.parse_args()

    overrides = [f"backend={args.backend}", f"agent.max_new_tokens={args.max_new_tokens}"]
    if args.tasks:
        overrides.append(f"tasks={args.tasks}")
    cfg = compose("build", overrides)
    if args.tasks:
        tasks = tasks_from_config(cfg, args.split)
    else:
        tasks = generate_trivial(args.split, n_per_template=args.n_per_template, seed=args.seed,
                                 templates=args.templates or list(trivial.CANDIDATES))
        if args.standard_per_cell:
            tasks += load_tasks("builtin", split=args.split, n_per_cell=args.standard_per_cell, seed=args.seed)
        tasks = interleave(tasks)   # templates and environments share the batches evenly
    backend = backend_from_config(cfg.model, cfg.backend)
    t0 = time.perf_counter()
    trajs = Agent(backend, agent_config(cfg, "hard_no_tool", len(tasks))).run(tasks)
    seconds = time.perf_counter() - t0

    out = Path(args.out)
    write_trajectories(out / f"hard_no_tool_{args.tasks or 'candidates'}_{args.split}.jsonl", trajs)
    text, stats = table(tasks, trajs, args.max_new_tokens, keep_column=not args.tasks)
    right = sum(tr.correct for tr in trajs)
    tiers = defaultdict(lambda: [0, 0])
    for t, tr in zip(tasks, trajs):
        tier = "trivial" if t.tags[:1] == ("trivial",) else "standard"
        tiers[tier][0] += tr.correct
        tiers[tier][1] += 1
    print(f"\n{len(tasks)} {args.split} tasks ({'tasks=' + args.tasks if args.tasks else 'trivial candidates'}"
          f"{'' if args.tasks else f', {args.n_per_template} per template'}), policy {backend.fingerprint}, "
          f"hard_no_tool, greedy, max_rounds {cfg.max_rounds}, max_new_tokens {args.max_new_tokens}, "
          f"{seconds:.0f} s\n")
    print(text)
    print()
    for tier, (r, n) in sorted(tiers.items()):
        print(f"{tier} tier: {r}/{n} right unaided ({r / n:.3f})")
    if not args.tasks:
        measured = {n: (s["right"], s["n"]) for n, s in stats.items() if n in trivial.CANDIDATES}
        print(f"kept by KEEP_RANGE {trivial.KEEP_RANGE}: {list(trivial.kept(measured))}")
        print(f"MEASURED = {measured}")
    (out / f"summary_{args.tasks or 'candidates'}_{args.split}.json").write_text(json.dumps(
        {"split": args.split, "tasks_option": args.tasks, "policy": backend.fingerprint, "seconds": seconds,
         "max_new_tokens": args.max_new_tokens, "groups": stats, "tiers": dict(tiers)}, indent=2))
    print(f"unaided_correct={right}/{len(tasks)} unaided_correct_fraction={right / len(tasks):.3f} "
          f"tasks={len(tasks)} seconds={seconds:.0f}")


if __name__ == "__main__":
    main()
