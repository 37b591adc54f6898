"""``recipe=probe_prefill|toolgate|g_step``: fit one controller on its decision points and export it.

Read top to bottom: decision points (built or reused) → controller with its feature contract → Lightning
fit on train → temperature and τ on val → metrics on every split, by category and difficulty (plus the
probe's baselines) → ``checkpoints/<recipe>/<run>/`` with model card, metrics and resolved config → W&B.
"""
from __future__ import annotations

import json
import logging
import time
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from controllers import REGISTRY, Controller, make_contract
from data_builders.features import FEATURIZERS
from data_builders.points.store import PointSet

from trainers.controller.calibration import choose_tau, fit_temperature
from trainers.controller.module import ControllerModule, TensorDataModule, balanced_weights
from trainers.tracking import finish, is_wandb, log_artifact, make_logger
from trainers.controller.metrics import grouped_metrics, metrics_table
from trainers.controller.card import controller_card
from trainers.controller.points import decision_points

SPLITS = ("train", "val", "test")

# Lightning's per-fit banners (GPU/TPU availability, tips) repeat for every fit (the probe baselines run 32);
# warnings and errors still show.
logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)")


def split_tensors(points: PointSet, kind: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, PointSet]]:
    out = {}
    for s in SPLITS:
        part = points.split(s)
        out[s] = (FEATURIZERS[kind].controller_input(part.features), part.labels, part)
    return out


def new_controller(recipe: DictConfig, points: PointSet, x_train: torch.Tensor, **override) -> Controller:
    m = points.manifest
    contract = make_contract(m["featurizer"], m["backend"], x_train.shape[1:], kind=m["kind"],
                             label_rule=m["label_rule"], task_hash=m["task_hash"])
    params = OmegaConf.to_container(recipe.controller, resolve=True)
    cls = REGISTRY[params.pop("type")]
    controller = cls(contract=contract, **{**params, **override})
    controller.fit_standardization(x_train)
    return controller


def train(controller: Controller, t: DictConfig, train_xy, val_xy, logger=None, progress: bool = True) -> float:
    """Fit in place with Lightning; returns the wall time in seconds."""
    L.seed_everything(t.seed, workers=True, verbose=False)
    module = ControllerModule(controller, optimizer=t.optimizer, lr=t.lr, l2=t.l2, weight_decay=t.weight_decay,
                              class_weights=balanced_weights(train_xy[1]) if t.class_balance else (1.0, 1.0),
                              max_iter=t.lbfgs_max_iter)
    data = TensorDataModule(train_xy, val_xy, batch_size=t.batch_size, seed=t.seed)
    has_val = val_xy is not None and len(val_xy[1]) > 0
    trainer = L.Trainer(limit_val_batches=1.0 if has_val else 0,max_epochs=t.max_epochs, accelerator="cpu", devices=1, logger=logger or False,
                        enable_checkpointing=False, enable_progress_bar=progress, enable_model_summary=False,
                        check_val_every_n_epoch=max(1, t.max_epochs // 10), deterministic=True,
                        num_sanity_val_steps=0, log_every_n_steps=1)
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    controller.eval()
    return time.perf_counter() - start


@torch.no_grad()
def raw_logits(controller: Controller, x: torch.Tensor) -> torch.Tensor:
    controller.eval()
    return controller.raw_logits(x) if len(x) else torch.zeros(0)


def calibrate(controller: Controller, cal: DictConfig, val_x, val_y) -> dict:
    logits = raw_logits(controller, val_x)
    controller.temperature = fit_temperature(logits, val_y) if cal.temperature else 1.0
    probs = torch.sigmoid(logits / controller.temperature).numpy()
    controller.tau = choose_tau(probs, val_y.numpy(), cal.tau_method, cal.tau_value)
    return {"temperature": controller.temperature, "tau": controller.tau, "tau_method": cal.tau_method,
            "tau_value": cal.tau_value}


def evaluate(controller: Controller, splits: dict) -> dict:
    out = {}
    for s, (x, y, part) in splits.items():
        probs = controller.predict_proba(x).numpy() if len(x) else np.zeros(0)
        out[s] = grouped_metrics(probs, y.numpy().astype(int), controller.tau,
                                 {"category": part.points["category"], "difficulty": part.points["difficulty"]})
    return out


def fit(recipe: DictConfig, cfg: DictConfig) -> Path:
    start = time.perf_counter()
    kind = recipe.points.kind
    points, build = decision_points(cfg)
    splits = split_tensors(points, kind)
    (x_tr, y_tr, _), (x_va, y_va, _) = splits["train"], splits["val"]
    if len(y_tr) == 0 or y_tr.min() == y_tr.max():
        raise ValueError(f"{build.out_dir}: the train split has {len(y_tr)} points and "
                         f"{int(y_tr.sum()) if len(y_tr) else 0} positives; a controller needs both labels")

    logger = make_logger(cfg)
    controller = new_controller(recipe, points, x_tr)
    train_s = train(controller, recipe.train, (x_tr, y_tr), (x_va, y_va), logger)
    calibration = calibrate(controller, recipe.calibration, x_va, y_va)
    metrics = {"splits": evaluate(controller, splits), "calibration": calibration, "train_seconds": train_s,
               "points": {s: int(len(v[1])) for s, v in splits.items()}, "dataset": str(Path(build.out_dir))}

    if recipe.get("baselines"):
        from trainers.controller.baselines import probe_baselines

        metrics["baselines"] = probe_baselines(recipe, cfg, points, splits, build)

    out_dir = Path(recipe.export_dir)
    controller.save_pretrained(out_dir)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (out_dir / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (out_dir / "README.md").write_text(controller_card(recipe, controller, metrics, points.manifest))

    test = metrics["splits"]["test"]
    if logger is not None:
        flat = {f"{s}/{k}": v for s in SPLITS for k, v in metrics["splits"][s]["all"].items() if v is not None}
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
    return out_dir
