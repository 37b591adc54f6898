"""One controller fit, the part the recipe (``fit.py``), the probe's baselines (``baselines.py``) and the
training benchmark share: feature tensors per split, a controller built from its decision points' contract,
a Lightning fit, raw logits."""
from __future__ import annotations

import logging
import time
import warnings

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from controllers import REGISTRY, Controller, make_contract
from data_builders.features import FEATURIZERS
from data_builders.points.store import PointSet

from trainers.controller.module import ControllerModule, TensorDataModule, balanced_weights

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
    trainer = L.Trainer(limit_val_batches=1.0 if has_val else 0, max_epochs=t.max_epochs, accelerator="cpu", devices=1,
                        logger=logger or False,
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
