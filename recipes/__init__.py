"""Hydra config root (``recipes/``): entry configs and config groups (YAML), and the config check (``schema.py``).

A package so that a non-editable install ships the YAML files. The structured configs (schemas) sit beside the code
that reads them and store themselves in Hydra's ConfigStore when imported: each command imports its own before
Hydra composes, and :func:`compose` imports those of the entry config it composes (:data:`ENTRY_SCHEMAS`), so a
command loads no other layer's configs (the endpoint never imports the trainers').
"""
from importlib import import_module
from pathlib import Path

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from .schema import check_config

CONFIG_DIR = str(Path(__file__).resolve().parent)

#: entry config -> the modules whose schemas it is composed with (the command's own imports, named)
ENTRY_SCHEMAS = {
    "fit": ("trainers.config", "trainers.controller.config", "trainers.policy.config"),
    "evaluate": ("trainers.evaluate.config",),
    "factorized": ("trainers.evaluate.config",),
    "shadow": ("trainers.evaluate.config",),
    "promote": ("trainers.evaluate.config",),
    "build": ("data_builders.config",),
    "rollout": ("data_builders.config",),
    "oracle": ("data_builders.config",),
    "sft_data": ("data_builders.config",),
    "serve": ("runtime.serve.config",),
}


def register(*config_names: str) -> None:
    """Store the schemas of ``config_names`` (default: every entry config's) in Hydra's ConfigStore."""
    for name in config_names or ENTRY_SCHEMAS:
        if name not in ENTRY_SCHEMAS:
            raise ValueError(f"unknown entry config {name!r}; entry configs: {sorted(ENTRY_SCHEMAS)}")
        for module in ENTRY_SCHEMAS[name]:
            import_module(module)


def compose(config_name: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """A config composed by Hydra (benchmarks, scripts, a recipe composing another config): defaults lists and
    group overrides such as ``model=smollm2_base backend=vllm`` apply exactly as on the command line, and a key
    no schema declares, a value its field refuses or an override the config would ignore fails as it does before
    a Hydra job (:func:`recipes.schema.check_config`)."""
    register(config_name)
    if GlobalHydra.instance().is_initialized():   # inside a @hydra.main run (or a test's initialize):
        return check_config(hydra_compose(config_name, overrides=list(overrides)), overrides)   # same root, compose directly
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return check_config(hydra_compose(config_name, overrides=list(overrides)), overrides)
