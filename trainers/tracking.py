"""Run tracking shared by every job: the W&B mode and environment of the ``logger`` group (``recipes/logger/``)
and the W&B run of a report job. The Lightning logger of a controller fit is ``trainers.controller.logger``.

W&B runs offline when no API key is configured (``WANDB_API_KEY`` or a ``~/.netrc`` entry), so a run never
stops at a login prompt; ``wandb sync <run dir>`` uploads it later. ``logger=csv`` writes Lightning CSV
logs, ``logger=none`` logs nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


def wandb_has_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def wandb_mode(cfg: DictConfig) -> str:
    mode = cfg.logger.get("mode", "auto")
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return ("online" if wandb_has_key() else "offline") if mode == "auto" else mode


def setup_wandb_env(cfg: DictConfig, run_dir: Path) -> None:
    """Environment for libraries that start W&B themselves (TRL's ``report_to``)."""
    if cfg.logger.name != "wandb":
        return
    os.environ.setdefault("WANDB_MODE", wandb_mode(cfg))
    os.environ.setdefault("WANDB_PROJECT", cfg.logger.project)
    os.environ.setdefault("WANDB_DIR", str(run_dir))
    os.environ.setdefault("WANDB_SILENT", "true")


def set_run_group(cfg: DictConfig, run_name: str) -> None:
    """The W&B group of a training run, the same on every rank of a multi-process launch: ``logger.group``, else
    ``<recipe>-<run name>`` (the run name is rank 0's, so all ranks agree). Only rank 0 starts a W&B run (the
    trainer's callback runs on the main process); anything another rank logs joins the group."""
    if cfg.logger.name != "wandb":
        return
    os.environ.setdefault("WANDB_RUN_GROUP", cfg.logger.get("group") or f"{cfg.recipe.name}-{run_name}")


def log_report(cfg: DictConfig, job_type: str, tables: dict[str, tuple[list[str], list[list]]],
               files: list[Path]) -> None:
    """One W&B run for a report job (evaluate, factorized): its tables and PNG plots, config attached."""
    if cfg.logger.name != "wandb":
        return
    import wandb   # why: only logger=wandb needs it (~1.5 s to import); report jobs also run with csv/none

    run = wandb.init(project=cfg.logger.project, group=cfg.logger.get("group") or job_type, job_type=job_type,
                     dir=str(cfg.out_dir), mode=wandb_mode(cfg), config=OmegaConf.to_container(cfg, resolve=True))
    run.log({**{name: wandb.Table(columns=cols, data=rows) for name, (cols, rows) in tables.items()},
             **{f"plots/{f.stem}": wandb.Image(str(f)) for f in files if f.suffix == ".png"}})
    run.finish()


def report_job(cfg: DictConfig, run) -> None:
    """The body of a report command's Hydra main: W&B environment for its output directory, then ``run(cfg)``."""
    setup_wandb_env(cfg, Path(cfg.out_dir))
    run(cfg)
