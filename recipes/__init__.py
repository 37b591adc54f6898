"""Hydra config root (``recipes/``): entry configs, config groups, and their structured configs (``schema.py``).

A package so that a non-editable install ships the YAML files, and so that importing it (every entry point
imports ``CONFIG_DIR`` from here) registers the schemas in Hydra's ConfigStore before any config is composed.
"""
from pathlib import Path

from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from .schema import check_config, register

CONFIG_DIR = str(Path(__file__).resolve().parent)

register()


def compose(config_name: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """A config composed by Hydra (benchmarks, scripts, a recipe composing another config): defaults lists and
    group overrides such as ``model=smollm2_base backend=vllm`` apply exactly as on the command line, and a key
    no schema declares, a value its field refuses or an override the config would ignore fails as it does before
    a Hydra job (:func:`recipes.schema.check_config`)."""
    if GlobalHydra.instance().is_initialized():   # inside a @hydra.main run (or a test's initialize):
        return check_config(hydra_compose(config_name, overrides=list(overrides)), overrides)   # same root, compose directly
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return check_config(hydra_compose(config_name, overrides=list(overrides)), overrides)
