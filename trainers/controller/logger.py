"""The ``logger`` group (``recipes/logger/``) → the Lightning logger of a controller fit: W&B by default,
``logger=csv`` for Lightning CSV logs, ``logger=none`` for nothing. The W&B environment and mode rules shared
with the other jobs are in ``trainers.tracking``."""
from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import CSVLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from trainers.tracking import wandb_mode


def make_logger(cfg: DictConfig, run_dir: Path):
    name = cfg.logger.name
    if name == "none":
        return None
    if name == "csv":
        return CSVLogger(save_dir=str(run_dir), name="csv")
    if name == "wandb":
        run_dir.mkdir(parents=True, exist_ok=True)
        logger = WandbLogger(project=cfg.logger.project, group=cfg.logger.get("group") or cfg.recipe.name,
                             name=run_dir.name, save_dir=str(run_dir), offline=wandb_mode(cfg) == "offline",
                             job_type="fit", tags=[cfg.recipe.name])
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        return logger
    raise ValueError(f"logger.name={name!r}: choose wandb, csv or none")


def is_wandb(logger) -> bool:
    return isinstance(logger, WandbLogger)


def log_artifact(logger, directory: Path, *, name: str, kind: str) -> None:
    """The exported directory as a W&B artifact (stored locally when offline, uploaded by ``wandb sync``)."""
    if is_wandb(logger):
        logger.experiment.log_artifact(str(directory), name=name, type=kind)   # = wandb.Artifact + add_dir


def finish(logger) -> None:
    """End the W&B run. Lightning's ``finalize`` leaves it open, and the next ``WandbLogger`` in this process
    (the next job of a Hydra multirun, ``trainers.sweep``) would silently log into it instead of its own run."""
    if is_wandb(logger):
        logger.experiment.finish()
