"""``recipe=probe_prefill|toolgate|g_step``: fit one controller on its decision points and export it.

Read top to bottom: decision points (built or reused) → controller with its feature contract → Lightning
fit on train (``training.py``) → temperature and τ on val → metrics on every split, by category and
difficulty (plus the probe's baselines) → ``checkpoints/<recipe>/<run>/`` with model card, metrics and
resolved config → W&B.

Under a distributed strategy (``trainer.strategy=ddp trainer.devices=N``) every rank runs this function whole
(Lightning's ``ddp`` re-runs the command per rank): the fits are collective, and calibration, metrics and the
probe's baselines are cheap and the same on every rank, so each rank returns the same objective; only rank 0
writes the export, the card and the metrics, and logs them.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from controllers import Controller
from data_builders.gates import gate_named
from data_builders.points.free_labels import RULES as FREE_RULES
from trainers.controller.baselines import probe_baselines
from trainers.controller.calibration import choose_tau, fit_temperature
from trainers.controller.card import controller_card
from trainers.controller.logger import finish, is_wandb, log_artifact, make_logger
from trainers.controller.metrics import grouped_metrics, metrics_table
from trainers.controller.points import decision_points
from trainers.controller.training import SPLITS, new_controller, raw_logits, split_tensors, train
from trainers.intervals import auroc_interval
from trainers.recipe import Fitted, RunInfo


def calibrate(controller: Controller, cal: DictConfig, val_x, val_y) -> dict:
    logits = raw_logits(controller, val_x)
    controller.temperature = fit_temperature(logits, val_y) if cal.temperature else 1.0
    probs = torch.sigmoid(logits / controller.temperature).numpy()
    controller.tau = choose_tau(probs, val_y.numpy(), cal.tau_method, cal.tau_value)
    return {"temperature": controller.temperature, "tau": controller.tau, "tau_method": cal.tau_method,
            "tau_value": cal.tau_value}


def evaluate(controller: Controller, splits: dict) -> dict:
    """Grouped metrics per split; the whole split's AUROC also gets a 95% stratified bootstrap interval
    (``auroc_ci``: [low, high], None with fewer than two points of a class; trainers/intervals.py)."""
    out = {}
    for s, (x, y, part) in splits.items():
        probs = controller.predict_proba(x).numpy() if len(x) else np.zeros(0)
        labels = y.numpy().astype(int)
        out[s] = grouped_metrics(probs, labels, controller.tau,
                                 {"category": part.points["category"], "difficulty": part.points["difficulty"]})
        if len(labels):
            ci = auroc_interval(probs, labels)
            out[s]["all"]["auroc_ci"] = None if ci is None else [ci[0], ci[1]]
    return out


def fit(recipe: DictConfig, cfg: DictConfig, run: RunInfo) -> Fitted:
    """``recipe=probe_prefill|toolgate|g_step``: build (or reuse) the decision points, fit, calibrate, export.
    The objective a sweep ranks by is the validation AUROC (the grid never looks at test)."""
    start = time.perf_counter()
    kind = gate_named(recipe.name).kind
    points, build = decision_points(cfg, command=run.command)
    label = recipe.points.get("label", "label")
    splits = split_tensors(points, kind, label)
    (x_tr, y_tr, _), (x_va, y_va, _) = splits["train"], splits["val"]
    if len(y_tr) == 0 or y_tr.min() == y_tr.max():
        raise ValueError(f"{build.out_dir}: the train split has {len(y_tr)} points and "
                         f"{int(y_tr.sum()) if len(y_tr) else 0} positives; a controller needs both labels")

    logger = make_logger(cfg, run.dir)
    # a fit on gold-free labels carries their rule in its contract (the test split is still scored on gold)
    controller = new_controller(recipe, points, x_tr, label_rule=None if label == "label" else
                                "gold-free: " + FREE_RULES[kind])
    trained = train(controller, recipe.train, (x_tr, y_tr), (x_va, y_va), cfg.trainer, logger)
    calibration = calibrate(controller, recipe.calibration, x_va, y_va)
    metrics = {"splits": evaluate(controller, splits), "calibration": calibration,
               "train_seconds": trained.seconds, "points": {s: int(len(v[1])) for s, v in splits.items()},
               "dataset": str(Path(build.out_dir)), "label": label}

    if recipe.get("baselines"):
        metrics["baselines"] = probe_baselines(recipe, cfg, points, splits, build)   # collective fits: every rank

    out_dir = run.export_dir(recipe.export_dir)
    val_auroc = metrics["splits"]["val"]["all"].get("auroc")
    objective = float("nan") if val_auroc is None else float(val_auroc)
    if not trained.is_global_zero:     # another rank of a distributed fit: rank 0 exports this same controller
        return Fitted(out_dir, objective, "val_auroc", metrics)
    controller.save_pretrained(out_dir)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out_dir / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (out_dir / "README.md").write_text(controller_card(recipe, controller, metrics, points.manifest, out_dir, run.command))

    test = metrics["splits"]["test"]
    if logger is not None:
        flat = {f"{s}/{k}": v for s in SPLITS for k, v in metrics["splits"][s]["all"].items()
                if isinstance(v, (int, float))}      # numbers only: auroc_ci is a pair (None when undefined)
        flat |= {f"calibration/{k}": v for k, v in calibration.items() if isinstance(v, (int, float))}
        logger.log_metrics(flat)
        log_artifact(logger, out_dir, name=f"{recipe.name}-controller", kind="model")
        logger.finalize("success")

    print(metrics_table(test, f"{recipe.name}: test split, τ={controller.tau:.3f} T={controller.temperature:.2f}"))
    if "baselines" in metrics:
        for name, b in metrics["baselines"].items():
            print(f"baseline {name}: test auroc {b['test']['auroc']}" + (f" ({b['detail']})" if b.get("detail") else ""))
    print(f"decision points: {Path(build.out_dir).resolve()}")
    print(f"controller:      {out_dir.resolve()}  (controllers.load('{out_dir}'))")
    print(f"metrics:         {(out_dir / 'metrics.json').resolve()}")
    if logger is not None:
        if is_wandb(logger):
            print(f"W&B run:         {logger.save_dir} ({logger.experiment.settings.mode})")
        else:   # logger=csv: its experiment has no W&B settings
            print(f"logs:            {logger.log_dir}")
        finish(logger)
    a = test["all"]
    print(f"{recipe.name}: test_auroc={a.get('auroc')} test_accuracy={a.get('accuracy'):.4f} "
          f"test_action_rate={a.get('action_rate'):.4f} points={sum(metrics['points'].values())} "
          f"seconds={time.perf_counter() - start:.1f}")
    return Fitted(out_dir, objective, "val_auroc", metrics)
