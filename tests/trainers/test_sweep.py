"""A real local sweep: ``python -m trainers.fit -m`` over a 2-point grid. Each job's ``main`` returns its
validation objective; the RecordObjective callback writes what the jobs returned, and ``trainers.sweep`` ranks
it — no log or metrics-file scraping (lightning-hydra-template's tests/test_sweeps.py does the same)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainers.test_controller_fit import synthetic_dataset
from trainers import sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_multirun_jobs_return_their_validation_auroc_and_are_ranked(tmp_path):
    data = synthetic_dataset(tmp_path / "points", "flip", n=200)
    sweep_dir = tmp_path / "multirun"
    cmd = [sys.executable, "-m", "trainers.fit", "-m", "recipe=toolgate", "logger=none",
           f"recipe.points.dir={data}", "recipe.train.l2=0.0,10.0", f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    records = [json.loads(line) for line in (sweep_dir / "objectives.jsonl").read_text().splitlines()]
    assert sorted(r["job"] for r in records) == [0, 1]
    for r in records:
        # the value the job returned is its exported controller's validation AUROC, nothing else
        metrics = json.loads((sweep_dir / str(r["job"]) / "export" / "metrics.json").read_text())
        assert math.isclose(r["objective"], metrics["splits"]["val"]["all"]["auroc"])
        assert any(o.startswith("recipe.train.l2=") for o in r["overrides"])
    # sweep candidates export into their job directory, never into checkpoints/
    assert not (REPO / "checkpoints" / "toolgate" / sweep_dir.name).exists()
    ranked = sweep.ranked_runs(sweep_dir, "maximize")
    assert [v for v, _ in ranked] == sorted((r["objective"] for r in records), reverse=True)
