"""Hyper-parameter grids: one W&B sweep spec per recipe in ``recipes/sweep/``, runnable two ways.

* W&B: ``wandb sweep recipes/sweep/g_step.yaml`` then ``wandb agent <id>``; each agent run is
  ``python -m trainers.fit recipe=g_step ${args_no_hyphens}`` (the spec's ``command``).
* Locally, without W&B: ``python -m trainers.sweep recipes/sweep/g_step.yaml [overrides...]`` runs the same
  grid as a Hydra multirun (``python -m trainers.fit -m recipe=g_step key=v1,v2 ...``) and prints the runs
  ranked by the spec's metric (a validation metric: the grid never looks at test).

In a multirun each job exports its controller into its own job directory (``outputs/multirun/...``), not
``checkpoints/``: sweep candidates are not releases.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

SWEEP_DIR = Path(__file__).resolve().parents[1] / "recipes" / "sweep"


def load_spec(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists() and (SWEEP_DIR / f"{path}.yaml").exists():
        p = SWEEP_DIR / f"{path}.yaml"
    spec = OmegaConf.to_container(OmegaConf.load(p))
    for key in ("command", "parameters", "metric"):
        if key not in spec:
            raise ValueError(f"{p}: sweep spec has no {key!r}")
    return spec


def recipe_override(spec: dict) -> str:
    hits = [c for c in spec["command"] if isinstance(c, str) and c.startswith("recipe=")]
    if len(hits) != 1:
        raise ValueError(f"sweep command must contain exactly one recipe=<name>: {spec['command']}")
    return hits[0]


def _values(name: str, p: dict) -> list:
    if "values" in p:
        return list(p["values"])
    if "value" in p:
        return [p["value"]]
    raise ValueError(f"parameter {name!r}: a local grid needs 'values' or 'value' (got {sorted(p)})")


def _fmt(v) -> str:
    return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)


def multirun_overrides(spec: dict) -> list[str]:
    """The Hydra multirun overrides of the spec's grid: ``recipe=…`` then ``key=v1,v2,…`` per parameter."""
    return [recipe_override(spec)] + [f"{k}={','.join(map(_fmt, _values(k, p)))}" for k, p in spec["parameters"].items()]


def sample_point(spec: dict, seed: int = 0) -> list[str]:
    """One point of the grid as ``trainers.fit`` overrides, as a W&B agent would pass them."""
    rng = random.Random(seed)
    return [recipe_override(spec)] + [f"{k}={_fmt(rng.choice(_values(k, p)))}" for k, p in spec["parameters"].items()]


def ranked_runs(sweep_dir: Path, metric: str, goal: str) -> list[tuple[float | None, str]]:
    split, name = metric.split("/", 1)
    rows = []
    for m in sorted(sweep_dir.glob("*/controller/metrics.json")):
        value = json.loads(m.read_text())["splits"][split]["all"].get(name)
        overrides = (m.parent.parent / ".hydra" / "overrides.yaml")
        label = " ".join(OmegaConf.load(overrides)) if overrides.exists() else m.parent.parent.name
        rows.append((value, label))
    sign = -1 if goal == "maximize" else 1
    return sorted(rows, key=lambda r: (r[0] is None, sign * (r[0] or 0)))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    spec = load_spec(argv[0])
    recipe = recipe_override(spec).split("=", 1)[1]
    stamp = __import__("time").strftime("%Y-%m-%d_%H-%M-%S")
    sweep_dir = Path("outputs/multirun") / recipe / stamp
    cmd = [sys.executable, "-m", "trainers.fit", "-m", *multirun_overrides(spec), *argv[1:],
           f"hydra.sweep.dir={sweep_dir}"]
    print("running: " + " ".join(cmd[1:]))
    rc = subprocess.call(cmd)
    metric = spec["metric"]
    print(f"\n{metric['name']} ({metric['goal']}), {sweep_dir}:")
    for value, label in ranked_runs(sweep_dir, metric["name"], metric["goal"]):
        print(f"  {'-' if value is None else f'{value:.4f}':>8}  {label}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
