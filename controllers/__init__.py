"""Learned controllers (probes, pre-call gates, continue/commit gates).

Pure torch: features in, probability out. Imports neither ``data_builders`` nor ``trainers``.
``REGISTRY`` maps a config's ``controller`` name to its class; :func:`load` rebuilds any saved controller.
"""
from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import snapshot_download

from .base import ContractMismatch, Controller, make_contract
from .gates import GStepMLP, ToolGateLogistic
from .probe import LinearProbe

REGISTRY: dict[str, type[Controller]] = {c.registry_name: c for c in (LinearProbe, ToolGateLogistic, GStepMLP)}


class ControllerLoadError(ValueError):
    """A checkpoint directory that cannot be turned into a controller; the message names the file."""


def _local_dir(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        return p
    if len(p.parts) == 2 and not p.exists():   # a hub id: fetch only the config and the safetensors file
        return Path(snapshot_download(str(path), allow_patterns=["config.json", "model.safetensors", "README.md"]))
    raise ControllerLoadError(f"{path}: not a controller directory")


def load(path: str | Path, *, map_location: str = "cpu") -> Controller:
    """A controller from ``checkpoints/<recipe>/<run>/`` (or a hub id): safetensors only, strict loading."""
    root = _local_dir(path)
    cfg_file = root / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except FileNotFoundError:
        raise ControllerLoadError(f"{cfg_file}: missing; not a controller checkpoint") from None
    except json.JSONDecodeError as e:
        raise ControllerLoadError(f"{cfg_file}: not valid JSON ({e})") from None
    name = cfg.get("controller")
    if name not in REGISTRY:
        raise ControllerLoadError(f"{cfg_file}: unknown controller type {name!r}; known: {sorted(REGISTRY)}")
    weights = root / "model.safetensors"
    if not weights.is_file():
        raise ControllerLoadError(f"{weights}: missing (controllers are stored as safetensors only)")
    try:
        return REGISTRY[name].from_pretrained(str(root), map_location=map_location, strict=True)
    except (ContractMismatch, ControllerLoadError):
        raise
    except Exception as e:   # safetensors header/size errors, missing or unexpected tensors (strict)
        raise ControllerLoadError(f"{weights}: cannot be loaded as a {name} controller: {e}") from e


__all__ = ["REGISTRY", "Controller", "ContractMismatch", "ControllerLoadError", "LinearProbe", "ToolGateLogistic",
           "GStepMLP", "load", "make_contract"]
