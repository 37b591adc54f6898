"""The Lightning side of controller training: one module for every binary controller, one data module.

A controller (``controllers``) is a plain ``nn.Module``; :class:`ControllerModule` wraps it with the loss,
the optimiser and the validation metrics, so the exported artifact is the controller alone.

Loss: class-balanced binary cross-entropy — each sample weighted ``N / (2·n_class)``, scikit-learn's
``class_weight="balanced"`` — plus ``l2/2·‖W‖²`` on the weight matrices (not biases), the penalty of seed
002's logistic probe (scikit-learn's ``C`` is ``1 / (l2·N)``). ``optimizer=lbfgs`` minimises that convex
objective full-batch, as scikit-learn's solver does (the probe and the ToolGate logistic gate);
``adamw`` trains the G-STEP MLP in minibatches.
"""
from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torchmetrics.classification import BinaryAUROC

from controllers import Controller


def balanced_weights(y: torch.Tensor) -> tuple[float, float]:
    """(weight of a negative, weight of a positive): ``N / (2·n_class)``; 1.0 for an absent class."""
    n, pos = len(y), float(y.sum())
    neg = n - pos
    return (n / (2 * neg) if neg else 1.0), (n / (2 * pos) if pos else 1.0)


class ControllerModule(L.LightningModule):
    def __init__(self, controller: Controller, *, optimizer: str = "lbfgs", lr: float = 1.0, l2: float = 1e-2,
                 weight_decay: float = 0.0, class_weights: tuple[float, float] = (1.0, 1.0), max_iter: int = 100):
        super().__init__()
        if optimizer not in ("lbfgs", "adamw"):
            raise ValueError(f"optimizer={optimizer!r}: choose lbfgs or adamw")
        self.controller = controller
        self.optimizer_name, self.lr, self.l2, self.weight_decay = optimizer, lr, l2, weight_decay
        self.class_weights, self.max_iter = class_weights, max_iter
        self.automatic_optimization = optimizer != "lbfgs"
        self.val_auroc = BinaryAUROC()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.controller.raw_logits(x)

    def objective(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        w_neg, w_pos = self.class_weights
        w = torch.where(y > 0.5, w_pos, w_neg)
        bce = F.binary_cross_entropy_with_logits(self(x), y, weight=w)
        penalty = sum((p ** 2).sum() for n, p in self.controller.named_parameters() if n.endswith("weight"))
        return bce + 0.5 * self.l2 * penalty, bce

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.automatic_optimization:
            loss, bce = self.objective(x, y)
            self.log_dict({"train/loss": loss, "train/bce": bce}, prog_bar=True, on_epoch=True, on_step=False)
            return loss
        # LBFGS: one optimizer.step runs up to max_iter closure evaluations on the full batch.
        opt = self.optimizers()
        last = {}

        def closure():
            opt.zero_grad()
            loss, bce = self.objective(x, y)
            self.manual_backward(loss)
            last.update(loss=loss.detach(), bce=bce.detach())
            return loss

        opt.step(closure=closure)
        self.log_dict({"train/loss": last["loss"], "train/bce": last["bce"]}, prog_bar=True, on_epoch=True,
                      on_step=False)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.val_auroc.update(logits, y.long())
        self.log("val/bce", F.binary_cross_entropy_with_logits(logits, y), prog_bar=True)

    def on_validation_epoch_end(self):
        try:
            self.log("val/auroc", self.val_auroc.compute(), prog_bar=True)
        except Exception:   # one class only in val: AUROC undefined, nothing to log
            pass
        self.val_auroc.reset()

    def configure_optimizers(self):
        if self.optimizer_name == "lbfgs":
            return torch.optim.LBFGS(self.controller.parameters(), lr=self.lr, max_iter=self.max_iter,
                                     history_size=20, line_search_fn="strong_wolfe", tolerance_grad=1e-6,
                                     tolerance_change=1e-9)
        return torch.optim.AdamW(self.controller.parameters(), lr=self.lr, weight_decay=self.weight_decay)


class TensorDataModule(L.LightningDataModule):
    """Feature/label tensors of the train and val splits; ``batch_size=None`` means full batch."""

    def __init__(self, train: tuple[torch.Tensor, torch.Tensor], val: tuple[torch.Tensor, torch.Tensor] | None,
                 *, batch_size: int | None = None, seed: int = 0):
        super().__init__()
        self.train, self.val, self.batch_size, self.seed = train, val, batch_size, seed

    def _loader(self, xy, shuffle: bool) -> DataLoader:
        ds = TensorDataset(*xy)
        bs = self.batch_size or max(len(ds), 1)
        return DataLoader(ds, batch_size=bs, shuffle=shuffle and bs < len(ds),
                          generator=torch.Generator().manual_seed(self.seed))

    def train_dataloader(self):
        return self._loader(self.train, shuffle=True)

    def val_dataloader(self):
        return self._loader(self.val, shuffle=False) if self.val is not None and len(self.val[1]) else []
