"""Re-score stored trajectories with the current When2Tool scorer and count the verdicts that change.

    PYTHONPATH=. python benchmarks/rescore_trajectories.py [PATH ...]

(``PYTHONPATH=.`` where the installed toolwise is another checkout, as for the other benchmarks.)

PATHs are trajectory JSONL files or folders (searched recursively for ``*.jsonl``); the default is the
evaluator's cache (``outputs/eval_cache``, see ``recipes/evaluate.yaml``) and ``/tmp/evalcache_before``.
Each record keeps its final response, gold and verdict (``data_builders/agent/trajectory.py``), and the
agent loop sets ``correct = is_correct(final_response, gold)``, so re-scoring needs no model: a changed
verdict means the scorer changed, and so whether the evaluator's comparison must be re-run.

JSONL files whose records are not trajectories (task files, point stores) are skipped and counted; a
trajectory file that fails the schema validator is reported with the validator's message (file, line,
task, field) and makes the exit status 1. Nothing is written. Prints the files, the trajectories, the
changed verdicts (old→new counts, then one line per changed task) and ends with
``trajectories=… changed=…``.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from data_builders.agent.trajectory import TrajectoryError, read_trajectories
from data_builders.tasks.scoring import extract_boxed, is_correct

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = (REPO / "outputs" / "eval_cache", Path("/tmp/evalcache_before"))
# Keys every trajectory record has and other JSONL records (tasks, points) lack.
TRAJECTORY_KEYS = frozenset({"schema_version", "final_response", "gold", "correct"})


def jsonl_files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(p.rglob("*.jsonl")))
        elif p.is_file():
            out.append(p)
    return out


def holds_trajectories(path: Path) -> bool:
    """Judged on the first non-blank line; an unreadable first line is left to the validator."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(record, dict) and TRAJECTORY_KEYS <= record.keys()
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="JSONL files or folders (default: %(default)s)",
                    default=list(DEFAULT_PATHS))
    args = ap.parse_args(argv)

    missing = [p for p in args.paths if not p.exists()]
    files = jsonl_files(args.paths)
    traj_files = [f for f in files if holds_trajectories(f)]
    total, broken = 0, 0
    changes: collections.Counter[str] = collections.Counter()
    answers_changed = 0
    lines: list[str] = []
    for path in traj_files:
        try:
            for t in read_trajectories(path):
                total += 1
                new = is_correct(t.final_response, t.gold)
                answers_changed += extract_boxed(t.final_response) != t.answer
                if new != t.correct:
                    changes[f"{t.correct}→{new}"] += 1
                    lines.append(f"  {t.task_id}  {t.correct}→{new}  answer={extract_boxed(t.final_response)!r} "
                                 f"gold={t.gold!r}  ({path})")
        except (TrajectoryError, ValueError, UnicodeDecodeError) as e:
            broken += 1
            print(f"unreadable: {e}", file=sys.stderr)

    for p in missing:
        print(f"not found: {p}")
    print(f"files: {len(files)} .jsonl, {len(traj_files)} with trajectories "
          f"({len(files) - len(traj_files)} other skipped, {broken} unreadable)")
    print(f"trajectories: {total}")
    print(f"stored answers that extract differently now: {answers_changed}")
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(changes.items())) or "none"
    print(f"verdicts changed: {sum(changes.values())} ({counts})")
    for line in lines:
        print(line)
    print(f"trajectories={total} changed={sum(changes.values())}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
