"""``python -m trainers.fit recipe=<name>``: one entry point for every trainer.

Each recipe is a YAML file in ``recipes/recipe/`` whose ``name`` selects a ``fit(cfg)`` function from
``RECIPES``. W&B is used when a key is configured and logs offline otherwise, so a run never blocks on a
login prompt.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from recipes import CONFIG_DIR

# recipe name -> "module:function"; imported lazily so one recipe's heavy dependencies never load for another.
RECIPES = {
    "tool_sft": "trainers.sft:fit",
}


def wandb_has_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")


def setup_wandb(cfg: DictConfig, run_dir: Path) -> None:
    if "wandb" not in cfg.report_to:
        return
    if not wandb_has_key():
        os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_PROJECT", cfg.wandb_project)
    os.environ.setdefault("WANDB_DIR", str(run_dir))
    os.environ.setdefault("WANDB_SILENT", "true")


def resolve(name: str):
    if name not in RECIPES:
        raise SystemExit(f"unknown recipe {name!r}; available: {sorted(RECIPES)}")
    module, func = RECIPES[name].split(":")
    return getattr(importlib.import_module(module), func)


@hydra.main(config_path=CONFIG_DIR, config_name="fit", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    setup_wandb(cfg, run_dir)
    recipe = cfg.recipe
    OmegaConf.set_struct(recipe, False)
    recipe.report_to = list(cfg.report_to)
    recipe.run_dir = str(run_dir)
    recipe.command = "python -m trainers.fit " + " ".join(HydraConfig.get().overrides.task)
    (run_dir / "recipe.yaml").write_text(OmegaConf.to_yaml(recipe, resolve=True))
    resolve(recipe.name)(recipe)


if __name__ == "__main__":
    sys.exit(main())
