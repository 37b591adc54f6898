"""``python -m trainers.fit recipe=<name>``: one entry point for every trainer.

Each recipe is a YAML file in ``recipes/recipe/`` whose ``name`` selects a ``fit(recipe, cfg, run)`` function
from :func:`recipes` (the policy recipes and one per gate). Runs are tracked by the ``logger`` group: W&B, online when a key is configured and offline
otherwise, so a run never blocks on a login prompt.

``main`` returns the run's validation objective (``Fitted.objective``), so Hydra sweepers (basic, Optuna) and
W&B agents rank runs directly, without scraping logs.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from data_builders.backends import malloc
from data_builders.gates import gates
from recipes import CONFIG_DIR
# the schemas of the fit config and of every recipe, stored before Hydra composes
import trainers.config  # noqa: F401
import trainers.controller.config  # noqa: F401
import trainers.policy.config  # noqa: F401
from trainers.recipe import Fitted, RunInfo
from trainers.tracking import setup_wandb_env

# recipe name -> "module:function"; imported lazily so one recipe's heavy dependencies never load for another.
# Every gate of the registry (data_builders.gates) is a controller recipe of its own name.
POLICY_RECIPES = {"tool_sft": "trainers.policy.sft:fit", "pte_grpo": "trainers.policy.grpo:fit",
                  "tool_dpo": "trainers.policy.dpo:fit"}
CONTROLLER_FIT = "trainers.controller.fit:fit"


def recipes() -> dict[str, str]:
    return {**POLICY_RECIPES, **{name: CONTROLLER_FIT for name in gates()}}


def is_rank_zero() -> bool:
    """The launching process of a multi-process run (Lightning DDP, torchrun, accelerate): the launchers set these
    variables in the processes they start. Read from the environment so this entry point stays light."""
    return all(int(os.environ.get(k, 0) or 0) == 0 for k in ("RANK", "LOCAL_RANK", "NODE_RANK"))


def launched_rank() -> int | None:
    """This process's global rank when ``torchrun``/``accelerate launch`` started it (torch elastic sets
    ``TORCHELASTIC_RUN_ID``), else None (one process, or Lightning's own DDP launcher, which passes its ranks
    their Hydra settings itself)."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    return int(os.environ.get("RANK", "0"))


def rank_overrides(argv: list[str]) -> list[str]:
    """Hydra settings for a non-zero rank of an ``accelerate launch``/``torchrun`` job, so that it writes no file
    rank 0 writes: no ``.hydra/`` copy of the config, and its log in ``fit_rank<N>.log`` instead of ``fit.log``.
    Every rank composes the same config (the recipe and its export directory are agreed on after the process
    group starts: ``trainers.policy.common.shared_run``), as Lightning's launcher does for its ranks."""
    rank = launched_rank()
    if not rank or any(a.startswith(("hydra.job.name=", "hydra.output_subdir=")) for a in argv):
        return []
    return ["hydra.output_subdir=null", f"hydra.job.name=fit_rank{rank}"]


def resolve(name: str):
    known = recipes()
    if name not in known:
        raise SystemExit(f"unknown recipe {name!r}; available: {sorted(known)}")
    module, func = known[name].split(":")
    return getattr(importlib.import_module(module), func)


@malloc.cli_opt_in   # this process is the job's: CPU backends may tune malloc (data_builders/backends/malloc.py)
@hydra.main(config_path=CONFIG_DIR, config_name="fit", version_base="1.3")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    run = RunInfo(dir=Path(hc.runtime.output_dir),
                  command="python -m trainers.fit " + " ".join(hc.overrides.task),
                  report_to=("wandb",) if cfg.logger.name == "wandb" else (),
                  multirun=hc.mode == RunMode.MULTIRUN)
    setup_wandb_env(cfg, run.dir)
    if is_rank_zero():   # one copy of the run's record, not one per rank
        (run.dir / "recipe.yaml").write_text(OmegaConf.to_yaml(cfg.recipe, resolve=True))
    fitted: Fitted = resolve(cfg.recipe.name)(cfg.recipe, cfg, run)
    # one write with its newline: under a multi-process launch every rank prints this line to the same pipe, and
    # print's separate write of "\n" let two ranks' lines run together
    print(f"objective {fitted.objective_name}={fitted.objective:.6g}\n", end="", flush=True)
    return fitted.objective


if __name__ == "__main__":
    sys.argv += rank_overrides(sys.argv[1:])
    sys.exit(main())
