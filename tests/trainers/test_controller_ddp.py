"""A controller fit under Lightning DDP (``trainer.strategy=ddp trainer.devices=2``, CPU processes talking
gloo) exports the same controller as one process: the L-BFGS recipe (toolgate) gives every rank the whole
train split, so DDP's gradient all-reduce averages identical gradients and each step is the one-process step.

The DDP fit is the real command line, ``python -m trainers.fit`` in a subprocess: Lightning's ``ddp`` strategy
re-runs that command for rank 1 (it cannot re-run pytest), and rank 0 alone exports.
"""
from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import controllers
import trainers
from tests.trainers.test_controller_fit import fit_cfg, run_fit, synthetic_dataset

REPO = Path(trainers.__file__).resolve().parents[1]


@pytest.mark.slow
def test_ddp_fit_on_two_cpu_processes_exports_the_one_process_controller(tmp_path):
    data = synthetic_dataset(tmp_path / "points", "flip", n=400)
    single = run_fit(fit_cfg("toolgate", data, tmp_path / "single", logger="csv"))
    assert fit_cfg("toolgate", data, tmp_path).recipe.train.optimizer == "lbfgs"

    ddp_dir = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "trainers.fit", "recipe=toolgate", "logger=csv", f"recipe.points.dir={data}",
           f"recipe.export_dir={ddp_dir / 'ckpt'}", f"hydra.run.dir={ddp_dir / 'run'}",
           "trainer.strategy=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]
    # this checkout's packages, whatever toolwise the environment has installed (rank 1 inherits it)
    # with the thread count of the one-process fit (Lightning would give each rank cores / ranks): the same
    # matmul reduction order, so the comparison below sees the algorithm, not thread-count rounding
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": str(torch.get_num_threads()),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("LOCAL_RANK", None)
    # rank 1 inherits this stdout, so the capture ends when both ranks have exited
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]

    # two ranks ran the recipe through and returned the same objective; one exported
    objectives = re.findall(r"^objective val_auroc=(\S+)$", done.stdout, re.M)
    assert len(objectives) == 2 and len(set(objectives)) == 1, out[-4000:]
    assert done.stdout.count("controller:      ") == 1, out[-4000:]
    assert (ddp_dir / "run" / "train_ddp_process_1.log").is_file()      # Lightning's rank-1 Hydra job

    a, b = controllers.load(single), controllers.load(ddp_dir / "ckpt")
    assert type(a) is type(b) is controllers.ToolGateLogistic
    wa, wb = load_file(str(single / "model.safetensors")), load_file(str(ddp_dir / "ckpt" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-4, msg=k)
    assert abs(a.tau - b.tau) <= 1e-4 and abs(a.temperature - b.temperature) <= 1e-4
    assert not torch.equal(wa["linear.weight"], torch.zeros_like(wa["linear.weight"]))   # it did train
    # rank 0 logged its own (unsynchronised) training loss: the whole train split's, not a shard's
    assert train_losses(ddp_dir / "run") == pytest.approx(train_losses(tmp_path / "single" / "run"), abs=1e-5)


def train_losses(run_dir: Path) -> list[float]:
    (log,) = (run_dir / "csv").glob("version_*/metrics.csv")
    losses = [float(r["train/loss"]) for r in csv.DictReader(log.open()) if r.get("train/loss")]
    assert losses
    return losses
