"""Promote (trainers/evaluate/promote.py): a candidate better on held-out captured moments is installed behind the
serving path (a symlink repointed atomically, a directory moved aside) and the endpoint told; a worse one is refused
with nothing changed; a controller of another policy, or points not from captured traffic, are refused."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import recipes
from controllers import REGISTRY, make_contract
from data_builders.gates import gates_at
from data_builders.points.store import PointStore
from trainers.evaluate import promote

GATE = gates_at("pre_call")[0]          # the ToolGate: it skips a call below τ
POLICY = "scripted@0"


def dataset(root, source="capture", n=60, seed=0, splits=("test",)):
    """Moments whose first feature carries the label (label 1: the call was needed), dealt to ``splits`` in turn."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) % 3 == 0).astype(int)
    x = rng.normal(size=(n, GATE.featurizer.controller_input({"embedding": torch.zeros(1, 384),
                                                                 "structural": torch.zeros(1, 15)}).shape[1]))
    x[:, :20] = np.where(labels == 1, 5.0, -5.0)[:, None] + 0.1 * x[:, :20]     # 20 columns: a fit finds it
    manifest = {"kind": GATE.kind, "task_hash": "x", "n_tasks": n, "n_shards": 1, "task_source": {"source": source},
                "backend": POLICY, "featurizer": GATE.featurizer.id, "label_rule": "gold-free", "shard_size": n,
                "builder": {}}
    rows = [{"point_id": f"r{i}:c", "task_id": f"r{i}", "split": splits[i % len(splits)], "env": "capture",
             "category": "capture",
             "difficulty": "", "multi_step": False, "label": int(labels[i])} for i in range(n)]
    tensors = {"embedding": torch.tensor(x[:, :384], dtype=torch.float32),
               "structural": torch.tensor(x[:, 384:], dtype=torch.float32)}
    with PointStore(root, manifest) as store:
        store.write_shard(0, rows, tensors)
        store.finalize({"points": n})
    return x


def controller(path, x, weight: float, policy=POLICY):
    """A ToolGate whose probability rises with the first feature (weight > 0: it tells needed calls apart)."""
    contract = make_contract(GATE.featurizer.id, policy, [x.shape[1]], kind=GATE.kind,
                             feature_names=list(GATE.featurizer.feature_names or []) or None)
    contract = {k: v for k, v in contract.items() if v is not None}
    c = REGISTRY[GATE.controller](contract=contract, tau=0.5)
    c.fit_standardization(torch.tensor(x, dtype=torch.float32))
    with torch.no_grad():
        c.linear.weight.zero_()
        c.linear.weight[0, 0] = weight
        c.linear.bias.fill_(0.0)
    c.save_pretrained(path)
    return path


def cfg(tmp_path, candidate, serving, points, *over):
    return recipes.compose("promote", [f"gate={GATE.name}", f"candidate={candidate}", f"serving={serving}",
                                       f"points={points}", f"out_dir={tmp_path / 'out'}", "bootstrap.replicates=200",
                                       *over])


def test_a_better_candidate_is_installed_and_a_worse_one_refused(tmp_path, capsys):
    x = dataset(tmp_path / "points")
    good, bad = controller(tmp_path / "good", x, 4.0), controller(tmp_path / "bad", x, -4.0)
    serving = tmp_path / "serving"
    serving.symlink_to(bad, target_is_directory=True)
    result = promote.run(cfg(tmp_path, good, serving, tmp_path / "points"))
    assert result["accepted"] and serving.resolve() == good.resolve()
    assert result["candidate"]["auroc"] == 1.0 and result["serving"]["auroc"] == 0.0
    # the bad gate skips the needed calls (label 1, p < τ): an estimated loss the good one does not have
    assert result["serving"]["acc_change"] == pytest.approx(-1 / 3) and result["candidate"]["acc_change"] == 0
    said = capsys.readouterr().out
    assert "accepted: " in said and "reload the endpoint: kill -HUP" in said
    with pytest.raises(SystemExit) as refused:
        promote.run(cfg(tmp_path, bad, serving, tmp_path / "points"))
    assert refused.value.code == 1 and serving.resolve() == good.resolve()       # nothing changed
    assert "refused: AUROC" in capsys.readouterr().out
    assert not json.loads((tmp_path / "out" / "promote.json").read_text())["accepted"]


def test_a_serving_directory_is_moved_aside(tmp_path):
    x = dataset(tmp_path / "points")
    good = controller(tmp_path / "good", x, 4.0)
    serving = controller(tmp_path / "serving", x, -4.0)
    promote.run(cfg(tmp_path, good, serving, tmp_path / "points"))
    assert not serving.is_symlink() and (serving / "config.json").read_bytes() == (good / "config.json").read_bytes()
    [previous] = tmp_path.glob("serving.previous-*")
    assert (previous / "model.safetensors").is_file()


def test_other_policies_and_task_points_are_refused(tmp_path):
    x = dataset(tmp_path / "points")
    other = controller(tmp_path / "other", x, 4.0, policy="another-model@1")
    serving = controller(tmp_path / "serving", x, -4.0)
    with pytest.raises(ValueError, match="another-model@1"):
        promote.run(cfg(tmp_path, other, serving, tmp_path / "points"))
    dataset(tmp_path / "task_points", source="builtin")
    with pytest.raises(ValueError, match="not built from captured traffic"):
        promote.run(cfg(tmp_path, serving, serving, tmp_path / "task_points"))


def test_a_refit_on_captured_points_is_promoted_over_a_worse_serving_gate(tmp_path, capsys):
    """The refit step as ``trainers.fit recipe=toolgate`` runs it on a capture build's points, then promote."""
    from trainers.controller.fit import fit
    from trainers.recipe import RunInfo

    x = dataset(tmp_path / "points", n=120, splits=("train", "train", "val", "test"))
    cfg_fit = recipes.compose("fit", [f"recipe={GATE.name}", f"recipe.points.dir={tmp_path / 'points'}", "logger=none",
                                      f"recipe.export_dir={tmp_path / 'refit'}"])
    fitted = fit(cfg_fit.recipe, cfg_fit, RunInfo(dir=tmp_path / "run", command="test"))
    assert fitted.metrics["splits"]["test"]["all"]["auroc"] > 0.95
    serving = tmp_path / "serving"
    serving.symlink_to(controller(tmp_path / "bad", x, -4.0), target_is_directory=True)
    result = promote.run(cfg(tmp_path, fitted.export_dir, serving, tmp_path / "points"))
    assert result["accepted"] and serving.resolve() == fitted.export_dir.resolve()


def test_the_command_line_refuses_with_exit_status_1(tmp_path):
    import subprocess
    import sys

    x = dataset(tmp_path / "points")
    good, bad = controller(tmp_path / "good", x, 4.0), controller(tmp_path / "bad", x, -4.0)
    proc = subprocess.run([sys.executable, "-m", "trainers.evaluate.promote", f"gate={GATE.name}", f"candidate={bad}",
                           f"serving={good}", f"points={tmp_path / 'points'}", f"out_dir={tmp_path / 'o'}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=recipes.CONFIG_DIR.rsplit("/", 1)[0],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "refused: AUROC" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
