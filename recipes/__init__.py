"""Hydra config root (``recipes/``). A package only so that a non-editable install ships the YAML files."""
from pathlib import Path

CONFIG_DIR = str(Path(__file__).resolve().parent)
