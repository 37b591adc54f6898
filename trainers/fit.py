"""``python -m trainers.fit recipe=<name>``: one entry point for every trainer.

Each recipe is a YAML file in ``recipes/recipe/`` whose ``name`` selects a ``fit(cfg)`` function from
``RECIPES``. Runs are tracked by the ``logger`` group: W&B, online when a key is configured and offline
otherwise, so a run never blocks on a login prompt.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from recipes import CONFIG_DIR

from .tracking import setup_wandb_env

# recipe name -> "module:function"; imported lazily so one recipe's heavy dependencies never load for another.
# Each function takes (recipe, cfg): the recipe node and the whole composed config.
RECIPES = {
    "tool_sft": "trainers.sft:fit",
    "probe_prefill": "trainers.controller_fit:fit",
    "toolgate": "trainers.controller_fit:fit",
    "g_step": "trainers.controller_fit:fit",
    "pte_grpo": "trainers.grpo:fit",
}


def resolve(name: str):
    if name not in RECIPES:
        raise SystemExit(f"unknown recipe {name!r}; available: {sorted(RECIPES)}")
    module, func = RECIPES[name].split(":")
    return getattr(importlib.import_module(module), func)


@hydra.main(config_path=CONFIG_DIR, config_name="fit", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    setup_wandb_env(cfg, run_dir)
    recipe = cfg.recipe
    OmegaConf.set_struct(recipe, False)
    recipe.report_to = ["wandb"] if cfg.logger.name == "wandb" else []   # TRL recipes
    recipe.run_dir = str(run_dir)
    recipe.command = "python -m trainers.fit " + " ".join(HydraConfig.get().overrides.task)
    if HydraConfig.get().mode == RunMode.MULTIRUN and "export_dir" in recipe:
        recipe.export_dir = str(run_dir / "controller")   # sweep candidates stay with their job (trainers/sweep.py)
    (run_dir / "recipe.yaml").write_text(OmegaConf.to_yaml(recipe, resolve=True))
    resolve(recipe.name)(recipe, cfg)


if __name__ == "__main__":
    sys.exit(main())
