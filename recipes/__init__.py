"""Hydra config root (``recipes/``). A package only so that a non-editable install ships the YAML files."""
from pathlib import Path

CONFIG_DIR = str(Path(__file__).resolve().parent)


def compose(config_name: str, overrides: list[str] | tuple[str, ...] = ()):
    """A config composed by Hydra (benchmarks, scripts, a recipe composing another config): defaults lists and
    group overrides such as ``model=smollm2_bare backend=vllm`` apply exactly as on the command line."""
    from hydra import compose as hydra_compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():   # inside a @hydra.main run (or a test's initialize):
        return hydra_compose(config_name, overrides=list(overrides))   # same config root, compose directly
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return hydra_compose(config_name, overrides=list(overrides))
