"""recipe=probe_prefill|toolgate|g_step end to end on synthetic decision-point datasets (no policy model):
fit → calibrate → export → ``controllers.load``, plus the dataset resolution of ``trainers.controller.points``.

Each dataset is written with the real ``PointStore`` in the layout ``data_builders.build`` produces, with a
learnable signal in a few feature dimensions, so a working trainer must reach a high test AUROC.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from safetensors.torch import load_file

import controllers
import recipes
from data_builders.gates import gate_of_kind
from data_builders.points.store import ManifestMismatch, PointStore, load_points
from trainers.controller.metrics import binary_metrics

BACKEND = "synthetic-policy@0123abcd"
KIND = {"g_step": "commit", "toolgate": "flip", "probe_prefill": "probe"}
CONTROLLER = {"g_step": controllers.GStepMLP, "toolgate": controllers.ToolGateLogistic,
              "probe_prefill": controllers.LinearProbe}
PROBE_LAYERS, PROBE_DIM, PROBE_SIGNAL_LAYER = 4, 16, 2
# Keep CPU time small; everything else is the recipe as shipped.
FAST = {"g_step": ["recipe.train.max_epochs=15"], "toolgate": [], "probe_prefill": ["recipe.points.build.limit=90"]}


# ------------------------------------------------------------------------------------------- datasets
def feature_tensors(kind: str, labels: np.ndarray, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """Gaussian noise with the label shifting a few dimensions by ±1 (one layer only for the probe)."""
    n, sign = len(labels), (2.0 * labels - 1.0)[:, None]
    if kind == "commit":
        from data_builders.features.gstep import N_FEATURES

        x = rng.normal(size=(n, N_FEATURES))
        x[:, 3:11] += sign
        return {"features": torch.tensor(x, dtype=torch.float32)}
    if kind == "flip":
        from data_builders.features.toolgate import EMBEDDING_DIM, structural_names

        emb = rng.normal(size=(n, EMBEDDING_DIM))
        emb[:, :4] += sign
        structural = rng.normal(size=(n, len(structural_names())))
        structural[:, 0] += sign[:, 0]
        return {"embedding": torch.tensor(emb, dtype=torch.float32),
                "structural": torch.tensor(structural, dtype=torch.float32)}
    if kind == "probe":
        h = rng.normal(size=(n, PROBE_LAYERS, PROBE_DIM))
        h[:, PROBE_SIGNAL_LAYER, :4] += 1.5 * sign
        return {"hidden": torch.tensor(h, dtype=torch.float32)}
    raise ValueError(kind)


def write_dataset(root: Path, kind: str, rows: list[dict], tensors: dict[str, torch.Tensor], *,
                  shard_size: int = 64, complete: bool = True, task_source=None, task_hash="synthetic",
                  command: str | None = None, **manifest_over) -> Path:
    """A decision-point dataset as data_builders.build writes it: manifest, parquet + safetensors shards."""
    manifest = {"kind": kind, "task_hash": task_hash, "n_tasks": len({r["task_id"] for r in rows}),
                "task_source": task_source or {"source": "synthetic"}, "backend": BACKEND,
                "featurizer": gate_of_kind(kind).featurizer.id, "label_rule": gate_of_kind(kind).label_rule({"commit_label": "wrong"}),
                "shard_size": shard_size, "builder": {"max_rounds": 4, "val_fraction": 0.15, "seed": 0},
                **manifest_over}
    store = PointStore(root, manifest)
    for i, start in enumerate(range(0, len(rows), shard_size)):
        store.write_shard(i, rows[start:start + shard_size],
                          {k: v[start:start + shard_size] for k, v in tensors.items()})
    if complete:
        store.finalize({"points": len(rows), "positives": int(sum(r["label"] for r in rows))},
                       command=command or f"python -m data_builders.build kind={kind} out_dir={root}")
    return root


def synthetic_rows(labels: np.ndarray, splits: list[str]) -> list[dict]:
    diffs = ("easy", "medium", "hard")
    return [{"point_id": f"t{i:04d}-0", "task_id": f"synthetic/{i:04d}", "split": s, "env": f"Env{i % 3}",
             "category": "ABC"[i % 3], "difficulty": diffs[(i // 3) % 3], "multi_step": i % 7 == 0,
             "label": int(y)} for i, (y, s) in enumerate(zip(labels, splits))]


def synthetic_dataset(root: Path, kind: str, n: int = 400, seed: int = 0, labels=None, **kw) -> Path:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n) if labels is None else np.asarray(labels)
    splits = [("train", "train", "train", "val", "test")[i % 5] for i in range(n)]
    return write_dataset(root, kind, synthetic_rows(labels, splits), feature_tensors(kind, labels, rng), **kw)


def probe_dataset(root: Path, cfg) -> Path:
    """Probe points on the real built-in tasks the recipe's build config names (the bag-of-words baseline
    reads their instructions by task id): one point per task, labelled 1 for category B (missing knowledge),
    with the label's signal in one hidden layer only."""
    from data_builders.build import split_of
    from data_builders.points.store import task_hash
    from data_builders.tasks import tasks_from_config
    from trainers.controller.points import build_config

    build = build_config(cfg)
    tasks = [t for s in build.splits for t in tasks_from_config(build, s)]
    labels = np.array([int(t.category == "B") for t in tasks])
    rows = [{"point_id": f"{t.id}#0", "task_id": str(t.id), "split": split_of(t, build.val_fraction, build.seed),
             "env": t.env.name, "category": t.category, "difficulty": t.difficulty, "multi_step": t.multi_step,
             "label": int(y)} for t, y in zip(tasks, labels)]
    return write_dataset(root, "probe", rows, feature_tensors("probe", labels, np.random.default_rng(1)),
                         shard_size=32, task_hash=task_hash(tasks),
                         task_source=OmegaConf.to_container(build.tasks, resolve=True))


# ------------------------------------------------------------------------------------------- configs
def fit_cfg(recipe: str, points_dir: Path, tmp: Path, *overrides: str, logger: str = "none"):
    """The config ``python -m trainers.fit recipe=<recipe> ...`` composes."""
    return recipes.compose("fit", [f"recipe={recipe}", f"logger={logger}", f"recipe.points.dir={points_dir}",
                                   f"recipe.export_dir={tmp / 'ckpt'}", *overrides])


def command_of(cfg) -> str:
    return f"python -m trainers.fit recipe={cfg.recipe.name} logger={cfg.logger.name}"


def run_fit(cfg) -> Path:
    """What ``trainers.fit``'s main does after composing: the recipe function with the run's state."""
    from trainers.controller.fit import fit
    from trainers.recipe import RunInfo

    run = RunInfo(dir=Path(cfg.recipe.export_dir).parent / "run", command=command_of(cfg),
                  report_to=("wandb",) if cfg.logger.name == "wandb" else ())
    fitted = fit(cfg.recipe, cfg, run)
    assert fitted.objective_name == "val_auroc"
    assert fitted.objective == fitted.metrics["splits"]["val"]["all"]["auroc"]
    return fitted.export_dir


@pytest.fixture(scope="module")
def fits(tmp_path_factory):
    """One fit per recipe, made on first use and shared by the checks below."""
    done = {}

    def get(name: str):
        if name not in done:
            tmp = tmp_path_factory.mktemp(name)
            data = tmp / "points"
            cfg = fit_cfg(name, data, tmp, *FAST[name])
            if name == "probe_prefill":
                probe_dataset(data, cfg)
            else:
                synthetic_dataset(data, KIND[name])
            done[name] = (name, cfg, data, run_fit(cfg))
        return done[name]

    return get


@pytest.fixture(params=["g_step", "toolgate", "probe_prefill"])
def fitted(request, fits):
    return fits(request.param)


# ------------------------------------------------------------------------------------------- recomputation
def manual_logits(name: str, weights: dict[str, torch.Tensor], x: torch.Tensor, layers=None) -> torch.Tensor:
    """Raw logits from the saved tensors alone, written out by hand."""
    if name == "probe_prefill":
        x = x[:, layers, :].reshape(len(x), -1)
    z = (x - weights["norm.mean"]) / weights["norm.std"]
    if name in ("toolgate", "probe_prefill"):
        return z @ weights["linear.weight"][0] + weights["linear.bias"][0]
    idx = sorted({int(k.split(".")[1]) for k in weights if k.startswith("mlp.")})
    for j, i in enumerate(idx):
        z = z @ weights[f"mlp.{i}.weight"].T + weights[f"mlp.{i}.bias"]
        if j < len(idx) - 1:
            z = F.gelu(z)                                   # dropout is the identity at inference
    return z[:, 0]


def test_export_directory_and_loaded_controller(fitted):
    name, cfg, data, out = fitted
    assert out == Path(cfg.recipe.export_dir)
    for f in ("model.safetensors", "config.json", "README.md", "metrics.json", "train_config.yaml"):
        assert (out / f).is_file(), f
    manifest = json.loads((data / "manifest.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    c = controllers.load(out)
    assert type(c) is CONTROLLER[name]
    assert c.tau == metrics["calibration"]["tau"] and c.temperature == metrics["calibration"]["temperature"]
    assert c.contract["backend"] == manifest["backend"] == BACKEND
    assert c.contract["featurizer"] == gate_of_kind(KIND[name]).featurizer.id == manifest["featurizer"]
    assert c.contract["kind"] == KIND[name] and c.contract["label_rule"] == manifest["label_rule"]
    assert c.contract["task_hash"] == manifest["task_hash"]
    c.check_contract(featurizer=manifest["featurizer"], backend=manifest["backend"])
    points = load_points(data)
    assert metrics["points"] == {s: points.points["split"].count(s) for s in ("train", "val", "test")}
    assert metrics["dataset"] == str(data)
    assert metrics["calibration"]["tau_method"] == cfg.recipe.calibration.tau_method
    x0 = gate_of_kind(KIND[name]).featurizer.controller_input(points.features)
    assert c.contract["input_shape"] == list(x0.shape[1:])
    # the resolved config is the one that ran
    saved = OmegaConf.load(out / "train_config.yaml")
    assert saved.recipe.name == name and saved.recipe.points.dir == str(data)
    assert saved.recipe.export_dir == str(out)


def test_learns_the_signal_and_the_export_is_what_was_evaluated(fitted):
    name, cfg, data, out = fitted
    metrics = json.loads((out / "metrics.json").read_text())
    test_all = metrics["splits"]["test"]["all"]
    assert test_all["auroc"] > 0.9, test_all
    assert metrics["splits"]["train"]["all"]["auroc"] > 0.9
    assert set(metrics["splits"]["test"]) == {"all", "category", "difficulty", "category×difficulty"}
    c = controllers.load(out)
    points = load_points(data)
    weights = load_file(str(out / "model.safetensors"))
    for split in ("val", "test"):
        part = points.split(split)
        x = gate_of_kind(KIND[name]).featurizer.controller_input(part.features)
        p = c.predict_proba(x)
        by_hand = torch.sigmoid(manual_logits(name, weights, x, getattr(c, "layers", None)) / c.temperature)
        torch.testing.assert_close(p, by_hand, rtol=1e-4, atol=1e-5)
        assert torch.equal(c.decide(x), p >= c.tau)
        # metrics.json was computed with exactly this controller on exactly these points
        again = binary_metrics(p.numpy(), part.labels.numpy().astype(int), c.tau)
        saved = metrics["splits"][split]["all"]
        assert again["n"] == saved["n"] and again["action_rate"] == pytest.approx(saved["action_rate"])
        assert again["accuracy"] == pytest.approx(saved["accuracy"])
        if saved["auroc"] is not None:
            assert again["auroc"] == pytest.approx(saved["auroc"], abs=1e-6)
            # its stratified bootstrap interval (trainers/intervals.py) brackets it
            lo, hi = saved["auroc_ci"]
            assert lo <= saved["auroc"] <= hi and hi - lo < 0.5


def test_calibration_follows_the_recipe(fitted):
    name, cfg, data, out = fitted
    metrics = json.loads((out / "metrics.json").read_text())
    cal, rc = metrics["calibration"], cfg.recipe.calibration
    assert 0.05 <= cal["temperature"] <= 20.0 and cal["tau_value"] == rc.tau_value
    if rc.tau_method == "fixed":
        assert cal["tau"] == rc.tau_value
    elif rc.tau_method == "max_acc_loss":                     # toolgate: missed positives on val within budget
        assert metrics["splits"]["val"]["all"]["missed"] <= rc.tau_value + 1e-12
    # T and τ are those of the validation split: recomputed from the exported controller's raw val logits
    from trainers.controller.calibration import choose_tau, fit_temperature

    c = controllers.load(out).eval()
    val = load_points(data).split("val")
    with torch.no_grad():
        logits = c.logits(gate_of_kind(KIND[name]).featurizer.controller_input(val.features))
    assert fit_temperature(logits, val.labels) == pytest.approx(c.temperature, rel=1e-4)
    probs = torch.sigmoid(logits / c.temperature).numpy()
    assert choose_tau(probs, val.labels.numpy(), rc.tau_method, rc.tau_value) == pytest.approx(c.tau, rel=1e-5)


def test_model_card_describes_the_controller(fitted):
    name, cfg, data, out = fitted
    card = (out / "README.md").read_text()
    metrics = json.loads((out / "metrics.json").read_text())
    assert card.startswith("---\n") and "library_name: toolwise" in card
    assert f"# {name}: `{CONTROLLER[name].registry_name}`" in card
    assert command_of(cfg) in card and BACKEND in card
    assert f"python -m data_builders.build kind={KIND[name]} out_dir={data}" in card   # how the points were built
    assert f"τ = {metrics['calibration']['tau']:.4f}" in card
    assert f'controllers.load("{out}")' in card
    assert ("## Baselines" in card) == (name == "probe_prefill")


def test_probe_baselines(fits):
    name, cfg, data, out = fits("probe_prefill")
    b = json.loads((out / "metrics.json").read_text())["baselines"]
    assert set(b) == {"best single-layer probe", "bag-of-words logistic regression"}
    single = b["best single-layer probe"]
    # the signal lives in one layer: validation picks it, and it alone separates test
    assert single["layer"] == PROBE_SIGNAL_LAYER and single["test"]["auroc"] > 0.9
    assert len(single["val_auroc_by_layer"]) == PROBE_LAYERS
    assert single["detail"] == f"layer {PROBE_SIGNAL_LAYER} of {PROBE_LAYERS}, chosen on val"
    # labels are "category B" and the instruction text names the task: the words predict it, which they
    # only can if each point is matched with its own task's instruction
    assert b["bag-of-words logistic regression"]["test"]["auroc"] > 0.8



def test_the_single_layer_baseline_says_when_nothing_was_chosen_on_val(tmp_path):
    """No val points (a custom task file's small build): the last layer is a default, and the report says so
    instead of "chosen on val"."""
    from trainers.controller.baselines import single_layer
    from trainers.controller.fit import split_tensors

    data = tmp_path / "points"
    cfg = fit_cfg("probe_prefill", data, tmp_path, "recipe.points.build.limit=90")
    probe_dataset(data, cfg)
    splits = split_tensors(load_points(data, kind="probe"), "probe")
    splits["val"] = tuple(t[:0] if hasattr(t, "shape") else t for t in splits["val"])
    result = single_layer(cfg.recipe, load_points(data, kind="probe"), splits, cfg.trainer)
    assert result["layer"] == PROBE_LAYERS - 1 and set(result["val_auroc_by_layer"].values()) == {None}
    assert result["detail"] == f"layer {PROBE_LAYERS - 1} of {PROBE_LAYERS}, the last layer: no val points to choose on"

def test_bag_of_words_reads_the_instructions_of_the_datasets_own_tasks(tmp_path):
    """A points.dir dataset built with other task settings than this fit's config (here: 90 tasks per split,
    the recipe says 48; the README builds with tasks=when2tool) still gets its own instructions: the baseline
    reads the task source recorded in the manifest, not the fit run's tasks group."""
    from trainers.controller.baselines import bag_of_words
    from trainers.controller.fit import split_tensors
    from trainers.controller.points import build_config

    data = tmp_path / "points"
    probe_dataset(data, fit_cfg("probe_prefill", data, tmp_path, "recipe.points.build.limit=90"))
    cfg = fit_cfg("probe_prefill", data, tmp_path)                  # the recipe as shipped: limit 48
    points = load_points(data, kind="probe")
    test_ids = set(points.split("test").points["task_id"])
    assert cfg.recipe.points.build.limit == 48 and len(test_ids) == 90
    result = bag_of_words(points, split_tensors(points, "probe"), build_config(cfg), C=1.0)
    assert result["test"]["auroc"] > 0.8


# ------------------------------------------------------------------------------------------- refusals
def test_single_label_train_split_is_refused_naming_the_dataset(tmp_path):
    n = 60
    labels = np.array([0 if i % 5 < 3 else i % 2 for i in range(n)])    # train rows (i % 5 < 3) all 0
    data = synthetic_dataset(tmp_path / "one-label", "commit", n=n, labels=labels)
    with pytest.raises(ValueError, match=re.escape(str(data)) + r": the train split has 36 points and 0 positives"):
        run_fit(fit_cfg("g_step", data, tmp_path))
    assert not (tmp_path / "ckpt").exists()


def test_missing_or_incomplete_points_dir_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"points.dir=.*nowhere: no complete decision-point dataset"):
        run_fit(fit_cfg("g_step", tmp_path / "nowhere", tmp_path))
    half = synthetic_dataset(tmp_path / "half", "commit", n=30, complete=False)
    with pytest.raises(FileNotFoundError, match=r"half: no complete decision-point dataset .*kind=commit"):
        run_fit(fit_cfg("g_step", half, tmp_path))


def test_points_of_another_featurizer_are_refused(tmp_path):
    other = synthetic_dataset(tmp_path / "v2", "commit", n=30, featurizer={"name": "gstep", "version": 99})
    with pytest.raises(ManifestMismatch, match=r"featurizer: on disk .*'version': 99"):
        run_fit(fit_cfg("g_step", other, tmp_path))
    # a dataset of another kind (the toolgate's flip points) under the G-STEP recipe
    flip = synthetic_dataset(tmp_path / "flip", "flip", n=30)
    with pytest.raises(ManifestMismatch, match=r"kind: on disk 'flip', requested 'commit'"):
        run_fit(fit_cfg("g_step", flip, tmp_path))


# ------------------------------------------------------------------------------------------- trainers.controller.points
@pytest.fixture
def fake_build(monkeypatch):
    """data_builders.build.run replaced by a writer of a small synthetic dataset; records its calls."""
    import data_builders.build

    calls = []

    def run(cfg, command=None):
        calls.append(cfg)
        synthetic_dataset(Path(cfg.out_dir), cfg.kind, n=40, seed=len(calls), command=command)
        return {"points": 40}

    monkeypatch.setattr(data_builders.build, "run", run)
    return calls


def points_cfg(tmp_path, *overrides):
    return fit_cfg("g_step", "null", tmp_path, f"recipe.points.root={tmp_path / 'points'}", *overrides)


@pytest.mark.slow
def test_decision_points_builds_once_then_reuses(tmp_path, fake_build):
    from trainers.controller.points import build_config, decision_points

    cfg = points_cfg(tmp_path)
    points, build = decision_points(cfg)
    out = Path(build.out_dir)
    assert len(fake_build) == 1 and Path(fake_build[0].out_dir) == out
    assert out.parent == tmp_path / "points" / "commit" and re.fullmatch(r"builtin-[0-9a-f]{10}", out.name)
    assert len(points) == 40 and points.manifest["complete"]
    # the dataset records how it was made: the fit command that built it
    assert points.manifest["build_command"].startswith("python -m trainers.fit")
    # the build config: build.yaml for the kind, the fit run's groups, the recipe's points.build on top
    assert build.kind == "commit" and build.limit == cfg.recipe.points.build.limit and build.commit_label == "wrong"
    assert build.agent.verify_rounds == cfg.recipe.points.build.agent.verify_rounds == 1
    assert build.tasks.source == "builtin" and build.model.name == "smollm2"
    assert "hydra" not in build

    again, build2 = decision_points(points_cfg(tmp_path))
    assert len(fake_build) == 1 and build2.out_dir == build.out_dir           # reused, not rebuilt
    assert again.points["point_id"] == points.points["point_id"]
    # out_dir / overwrite are not part of the identity
    assert build_config(points_cfg(tmp_path, "+recipe.points.build.overwrite=true")).out_dir == build.out_dir

    _, other = decision_points(points_cfg(tmp_path, "recipe.points.build.limit=12"))
    assert len(fake_build) == 2 and other.out_dir != build.out_dir and other.limit == 12
    assert Path(other.out_dir).parent == out.parent
    # another policy is another dataset too
    assert build_config(points_cfg(tmp_path, "model=smollm2_base")).out_dir not in (build.out_dir, other.out_dir)


def test_decision_points_resumes_an_incomplete_build(tmp_path, fake_build):
    from trainers.controller.points import build_config, decision_points

    cfg = points_cfg(tmp_path)
    out = Path(build_config(cfg).out_dir)
    synthetic_dataset(out, "commit", n=40, seed=1, complete=False)     # a build that was killed
    decision_points(cfg)
    assert len(fake_build) == 1                                          # handed back to the builder


def test_the_dataset_identity_holds_the_resolved_dtype_not_the_word(tmp_path):
    """model.dtype=auto is float32 on the CPU: the same dataset as an explicit float32 (datasets built before
    auto was the default are reused), another one than bfloat16 states."""
    from trainers.controller.points import build_config

    cpu = lambda *o: build_config(points_cfg(tmp_path, "model.device=cpu", *o)).out_dir  # noqa: E731
    assert points_cfg(tmp_path).model.dtype == "auto"
    assert cpu() == cpu("model.dtype=float32") != cpu("model.dtype=bfloat16")


def test_points_dir_is_used_as_is(tmp_path, fake_build):
    from trainers.controller.points import decision_points

    data = synthetic_dataset(tmp_path / "mine", "commit", n=40)
    points, build = decision_points(fit_cfg("g_step", data, tmp_path))
    assert fake_build == [] and build.out_dir == str(data) and len(points) == 40


def test_csv_logger_writes_the_training_curve_and_the_final_metrics(tmp_path):
    import csv

    data = synthetic_dataset(tmp_path / "points", "flip", n=150)
    out = run_fit(fit_cfg("toolgate", data, tmp_path, logger="csv"))
    assert (out / "model.safetensors").is_file()
    (log,) = (tmp_path / "run" / "csv").glob("version_*/metrics.csv")
    rows = list(csv.DictReader(log.open()))
    assert "train/loss" in rows[0] and "val/auroc" in rows[0]
    final = [r for r in rows if r.get("test/auroc")]
    metrics = json.loads((out / "metrics.json").read_text())
    assert final and float(final[-1]["test/auroc"]) == pytest.approx(metrics["splits"]["test"]["all"]["auroc"])


# ------------------------------------------------------------------------------------------- W&B
@pytest.mark.slow
def test_wandb_logger_writes_one_offline_run_per_fit_with_the_artifact(tmp_path, monkeypatch):
    """Two fits in one process, as the jobs of a local sweep (a Hydra multirun) run: each gets its own offline
    run in its run directory, holding its metrics and its exported controller as a model artifact."""
    import wandb

    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    data = synthetic_dataset(tmp_path / "points", "flip", n=150)
    try:
        outs = [run_fit(fit_cfg("toolgate", data, tmp_path / job, logger="wandb")) for job in ("0", "1")]
        assert wandb.run is None                     # each fit finishes its run
    finally:
        wandb.finish()
    for job, out in zip(("0", "1"), outs):
        runs = list((tmp_path / job / "run" / "wandb").glob("offline-run-*"))   # `wandb sync` uploads it later
        assert len(runs) == 1, list((tmp_path / job / "run").rglob("*"))
        (log,) = runs[0].glob("run-*.wandb")
        record = log.read_bytes()
        for _ in range(100):            # wandb-core's writer may still be flushing the log when finish returns
            if b"toolgate-controller" in record:
                break
            time.sleep(0.1)
            record = log.read_bytes()
        # the run log holds the model artifact (its name, a manifest entry per exported file) and the metrics
        assert b"toolgate-controller" in record
        for f in out.iterdir():
            assert f.name.encode() in record, f.name
        assert b"test/auroc" in record and b"calibration/tau" in record
