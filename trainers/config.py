"""``python -m trainers.fit``'s entry config, the ``trainer`` and ``logger`` groups, and what every recipe schema
shares (:class:`Recipe`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, Optional

from omegaconf import DictConfig

from data_builders.backends.config import ModelConfig
from data_builders.config import CaptureSource, CheckpointsConfig
from data_builders.config_fields import param, required
from data_builders.metrics.config import HardwareConfig
from recipes.schema import store

@dataclass
class TrainerConfig:
    """``trainer``: where and how Lightning runs a controller fit (``lightning.Trainer`` arguments of the same
    names; trainers/controller/training.py). The policy recipes (TRL) refuse it: ``accelerate launch`` places them."""
    accelerator: str = param("cpu", "Lightning's accelerator: cpu | gpu | auto | ...")
    devices: Any = param(1, "an int, auto, or a list of device indices: Lightning takes each")
    strategy: str = param("auto", "Lightning's strategy, e.g. ddp (gloo on the CPU)")
    num_nodes: int = param(1, "machines, each running devices processes", ge=1)
    precision: str = param("32-true", "Lightning's precision, e.g. bf16-mixed")


@dataclass
class LoggerConfig:
    """``logger=csv`` and ``logger=none``: a name and nothing else."""
    name: str = required("csv (Lightning CSV logs under the run directory) | none (no run tracking)",
                         choices=("csv", "none"))


@dataclass
class WandbLoggerConfig:
    """``logger=wandb``: online with an API key, offline otherwise (never prompts)."""
    name: str = param("wandb", "the tracker", choices=("wandb",))
    project: str = param("toolwise", "the W&B project")
    group: Optional[str] = param(None, "the W&B group; null = the recipe name")
    mode: str = param("auto", "auto (online with a key, else offline) | online | offline | disabled",
                      choices=("auto", "online", "offline", "disabled"))


def overridden(keys: Iterable[str], prefix: str) -> list[str]:
    """The overridden keys at or under ``prefix`` (a group, a node or a field)."""
    return [k for k in keys if k == prefix or k.startswith(prefix + ".")]


class Recipe:
    """What every recipe schema shares: :meth:`refusals`, the overrides a recipe would silently ignore."""

    # fit groups (or keys) this recipe never reads -> why; an override of one is refused
    UNUSED: ClassVar[Dict[str, str]] = {}

    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        """What is wrong with overriding ``keys`` (the command line's keys and groups) for this recipe, given the
        composed ``cfg``; empty when the recipe reads every one of them."""
        name = cfg.recipe.name
        return [f"{key} (recipe={name} does not read {unused}: {why})"
                for unused, why in cls.UNUSED.items() for key in overridden(keys, unused)]


@dataclass
class FitConfig:
    recipe: Any = required("the recipe group (recipes/recipe/): what is trained")
    model: ModelConfig = required("the policy: the model group (recipes/model/)")
    backend: Any = required("the engine controller recipes build decision points on: the backend group")
    tasks: Any = required("the tasks a recipe trains on (policy) or builds decision points from (controllers)")
    logger: Any = required("run tracking: the logger group")
    hardware: HardwareConfig = required("PTE's γ of pte_grpo's reward: the hardware group")  # type: ignore[valid-type]
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    trainer: TrainerConfig = required("Lightning placement of controller fits: the trainer group")
    source: str = param("tasks", "controller recipes: decision points from the tasks group (tasks) or replayed from "
                                 "captured traffic and labelled without gold (capture: capture.dir)",
                        choices=("tasks", "capture"))
    capture: CaptureSource = param(CaptureSource(), "source=capture: the captured traffic")


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("trainer", "schema", TrainerConfig),
    ("logger", "schema", LoggerConfig),
    ("logger", "wandb_schema", WandbLoggerConfig),
    (None, "fit_schema", FitConfig),
]
store(SCHEMAS)
