"""One controller fit, the part the recipe (``fit.py``), the probe's baselines (``baselines.py``) and the
training benchmark share: feature tensors per split, a controller built from its decision points' contract,
a Lightning fit placed by the ``trainer`` group (``recipes/trainer/``), raw logits.

Distributed fits (``trainer.strategy=ddp trainer.devices=N``): with ``ddp`` Lightning re-runs the whole command
in N-1 more processes, so every rank runs the recipe top to bottom and each ``train`` call is collective: all
ranks must make the same calls in the same order (the recipe does; only rank 0 writes, see ``fit.py``).
"""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from controllers import REGISTRY, Controller, make_contract
from data_builders.gates import gate_named, gate_of_kind
from data_builders.points.store import PointSet

from trainers.controller.module import ControllerModule, TensorDataModule, balanced_weights

SPLITS = ("train", "val", "test")

# Lightning's per-fit banners (GPU/TPU availability, tips) repeat for every fit (the probe baselines run 32);
# warnings and errors still show.
logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message=".*isinstance\\(treespec, LeafSpec\\)")


def split_tensors(points: PointSet, kind: str, label: str = "label"
                  ) -> dict[str, tuple[torch.Tensor, torch.Tensor, PointSet]]:
    """Each split's (controller input, labels, points). ``label``: the column train and val learn from (the test
    split is always ``label``); points that column leaves unlabelled (-1) are left out of train and val."""
    if label != "label" and label not in points.points.column_names:
        raise ValueError(f"recipe.points.label={label}: the dataset has no {label!r} column (build it with "
                         f"free_labels=true, or from captured traffic)")
    out = {}
    for s in SPLITS:
        part = points.split(s)
        if s != "test" and label != "label":
            part = part.select(i for i, y in enumerate(part.points[label]) if y >= 0)
            y = torch.tensor(part.points[label], dtype=torch.float32)
        else:
            y = part.labels
        out[s] = (gate_of_kind(kind).featurizer.controller_input(part.features), y, part)
    return out


def new_controller(recipe: DictConfig, points: PointSet, x_train: torch.Tensor, label_rule: str | None = None,
                   **override) -> Controller:
    """``label_rule``: the rule of the labels it learns from, when not the dataset's own (gold-free labels)."""
    m = points.manifest
    names = gate_of_kind(m["kind"]).featurizer.feature_names
    # the tools the flip points' calls named: which tools the gate has seen (its card and the evaluator say
    # when a decision is about a tool outside them; the features themselves name no tool)
    tools = sorted(set(points.points["tool"])) if "tool" in points.points.column_names else None
    contract = make_contract(m["featurizer"], m["backend"], x_train.shape[1:], kind=m["kind"],
                             label_rule=label_rule or m["label_rule"], task_hash=m["task_hash"],
                             **({"feature_names": list(names)} if names is not None else {}),
                             **({"tools_seen": tools} if tools is not None else {}))
    # the recipe names the gate, the gate its controller class; the recipe's controller node is that class's arguments
    cls = REGISTRY[gate_named(recipe.name).controller]
    params = OmegaConf.to_container(recipe.controller, resolve=True)
    # the initial weights are part of the run: seeded, so a rerun, or the same fit on N ranks, starts alike
    L.seed_everything(recipe.train.seed, workers=True, verbose=False)
    controller = cls(contract=contract, **{**params, **override})
    controller.fit_standardization(x_train)
    return controller


@dataclass(frozen=True)
class Trained:
    seconds: float          # wall time of the fit
    is_global_zero: bool    # rank 0 of a distributed fit (always true in one process): the rank that exports


def train(controller: Controller, t: DictConfig, train_xy, val_xy, trainer_cfg: DictConfig, logger=None,
          progress: bool = True) -> Trained:
    """Fit in place with Lightning, placed by ``trainer_cfg`` (the ``trainer`` group)."""
    L.seed_everything(t.seed, workers=True, verbose=False)
    module = ControllerModule(controller, optimizer=t.optimizer, lr=t.lr, l2=t.l2, weight_decay=t.weight_decay,
                              class_weights=balanced_weights(train_xy[1]) if t.class_balance else (1.0, 1.0),
                              max_iter=t.lbfgs_max_iter)
    data = TensorDataModule(train_xy, val_xy, batch_size=t.batch_size, seed=t.seed)
    has_val = val_xy is not None and len(val_xy[1]) > 0
    trainer = L.Trainer(limit_val_batches=1.0 if has_val else 0, max_epochs=t.max_epochs,
                        # accelerator, devices, strategy, num_nodes, precision: lightning.Trainer's own arguments
                        **OmegaConf.to_container(trainer_cfg, resolve=True),
                        # Full-batch L-BFGS must see the whole train split at every step, so under DDP each rank
                        # gets all of it (no DistributedSampler shard): DDP's all-reduce then averages identical
                        # gradients, and every rank takes the one-process step. AdamW minibatches are sharded
                        # the usual DDP way (an effective batch of batch_size x world size).
                        use_distributed_sampler=t.optimizer != "lbfgs",
                        logger=logger or False,
                        enable_checkpointing=False, enable_progress_bar=progress, enable_model_summary=False,
                        check_val_every_n_epoch=max(1, t.max_epochs // 10), deterministic=True,
                        num_sanity_val_steps=0, log_every_n_steps=1)
    start = time.perf_counter()
    trainer.fit(module, datamodule=data)
    controller.eval()
    return Trained(time.perf_counter() - start, trainer.is_global_zero)


@torch.no_grad()
def raw_logits(controller: Controller, x: torch.Tensor) -> torch.Tensor:
    controller.eval()
    return controller.raw_logits(x) if len(x) else torch.zeros(0)
