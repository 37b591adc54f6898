"""Hyper-parameter grids: one W&B sweep spec per recipe in ``recipes/sweep/``, runnable two ways.

* W&B: ``wandb sweep recipes/sweep/g_step.yaml`` then ``wandb agent <id>``; each agent run is
  ``python -m trainers.fit recipe=g_step ${args_no_hyphens}`` (the spec's ``command``).
* Locally, without W&B: ``python -m trainers.sweep recipes/sweep/g_step.yaml [overrides...]`` runs the same
  grid as a Hydra multirun (``python -m trainers.fit -m recipe=g_step key=v1,v2 ...``) and prints the runs
  ranked by the objective each job returned (a validation metric: the grid never looks at test).
* Any Hydra sweeper (e.g. Optuna's, ``hydra/sweeper=optuna``) optimises ``trainers.fit``'s return value directly;
  nothing here is needed for it.

What is left here is only what a W&B spec needs to run without W&B: expanding its grid into multirun overrides,
and reading the objectives back (:class:`RecordObjective`). In a multirun each job exports into its own job
directory (``outputs/multirun/...``), not ``checkpoints/``: sweep candidates are not releases.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

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


class RecordObjective(Callback):
    """Hydra callback (``hydra.callbacks`` in fit.yaml): each job's return value, the validation objective that
    ``trainers.fit``'s main returns, goes to ``<sweep dir>/objectives.jsonl`` with the job's overrides, so a
    local grid is ranked from what the runs returned, not from files a recipe happens to write."""

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        if job_return.status != JobStatus.COMPLETED or config.hydra.mode != RunMode.MULTIRUN:
            return
        record = {"job": config.hydra.job.num, "overrides": list(job_return.overrides or []),
                  "objective": job_return.return_value}
        with open(Path(config.hydra.sweep.dir) / "objectives.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")


def ranked_runs(sweep_dir: Path, goal: str) -> list[tuple[float | None, str]]:
    path = sweep_dir / "objectives.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    sign = -1 if goal == "maximize" else 1
    runs = [(r["objective"], " ".join(r["overrides"])) for r in rows]
    nan = lambda v: v is None or v != v  # noqa: E731  (a run whose val split had one label has no AUROC)
    return sorted(runs, key=lambda r: (nan(r[0]), 0 if nan(r[0]) else sign * r[0]))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    spec = load_spec(argv[0])
    recipe = recipe_override(spec).split("=", 1)[1]
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    sweep_dir = Path("outputs/multirun") / recipe / stamp
    cmd = [sys.executable, "-m", "trainers.fit", "-m", *multirun_overrides(spec), *argv[1:],
           f"hydra.sweep.dir={sweep_dir}"]
    print("running: " + " ".join(cmd[1:]))
    rc = subprocess.call(cmd)
    metric = spec["metric"]
    print(f"\n{metric['name']} ({metric['goal']}), {sweep_dir}:")
    for value, label in ranked_runs(sweep_dir, metric["goal"]):
        print(f"  {'-' if value is None else f'{value:.4f}':>8}  {label}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
