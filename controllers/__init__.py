"""Learned controllers (probes, pre-call gates, continue/commit gates).

Pure torch: features in, probability out. Imports neither ``data_builders`` nor ``trainers``.
``REGISTRY`` maps a config's ``controller`` name to its class; :func:`load` rebuilds any saved controller.
"""
from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from safetensors import SafetensorError, safe_open

from .base import ContractMismatch, Controller, check_contract_dict, check_tau, check_temperature, make_contract
from .gates import GStepMLP, ToolGateLogistic
from .names import is_repo_id, looks_like_path
from .probe import LinearProbe

REGISTRY: dict[str, type[Controller]] = {c.registry_name: c for c in (LinearProbe, ToolGateLogistic, GStepMLP)}


def register(cls: type[Controller]) -> type[Controller]:
    """Add a controller class under its ``registry_name`` (a gate written outside the package registers its own, so
    :func:`load` rebuilds its checkpoints); usable as a class decorator. Another class under that name is refused."""
    name = getattr(cls, "registry_name", None)
    if not (isinstance(cls, type) and issubclass(cls, Controller) and isinstance(name, str) and name):
        raise TypeError(f"{cls!r}: a Controller subclass with a registry_name")
    if REGISTRY.get(name, cls) is not cls:
        raise ValueError(f"controller name {name!r} is already {REGISTRY[name].__module__}.{REGISTRY[name].__name__}")
    REGISTRY[name] = cls
    return cls


class ControllerLoadError(ValueError):
    """A checkpoint directory that cannot be turned into a controller; the message names the file."""


def _local_dir(path: str | Path) -> Path:
    """The checkpoint directory: ``path`` when it exists locally, else the hub id's snapshot (config and
    safetensors only). A missing path is said to be missing, not looked up as a hub id it cannot be."""
    text = str(path)
    p = Path(text).expanduser()
    if p.is_dir():
        return p
    if p.exists():
        raise ControllerLoadError(f"{p}: a file, not a controller directory (config.json + model.safetensors)")
    if looks_like_path(text) or not is_repo_id(text):
        raise ControllerLoadError(f"{path}: not a controller directory ({p.resolve()} does not exist)")
    try:
        return Path(snapshot_download(text, allow_patterns=["config.json", "model.safetensors", "README.md"]))
    except OSError as e:   # not cached while offline, unknown on the hub, no network: all hub errors are OSErrors
        where = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else f"the hub said: {e}"
        raise ControllerLoadError(
            f"{path}: neither a local directory nor a cached hub id exists: no directory {p.resolve()}, and no "
            f"snapshot of hub id {text!r} in {constants.HF_HUB_CACHE} ({where})") from None


def _check_config(cfg_file: Path) -> dict:
    """``config.json`` parsed and checked field by field, so a bad setting is refused at load, naming the file and
    the field, instead of loading and then flipping or disabling every decision."""
    try:
        cfg = json.loads(cfg_file.read_text())
    except FileNotFoundError:
        raise ControllerLoadError(f"{cfg_file}: missing; not a controller checkpoint") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ControllerLoadError(f"{cfg_file}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ControllerLoadError(f"{cfg_file}: expected a JSON object of the controller's settings "
                                  f"(controller, contract, tau, temperature, ...), got a {type(cfg).__name__}")
    name = cfg.get("controller")
    if name not in REGISTRY:
        raise ControllerLoadError(f"{cfg_file}: unknown controller type {name!r}; known: {sorted(REGISTRY)}")
    checks = {"tau": check_tau, "temperature": check_temperature,
              "contract": lambda c: check_contract_dict(c, REGISTRY[name].input_rank)}
    for field, check in checks.items():
        if field not in cfg and field != "contract":   # τ and temperature have defaults; the contract does not
            continue
        try:
            check(cfg.get(field))
        except ValueError as e:
            raise ControllerLoadError(f"{cfg_file}: field {field!r}: {e}") from None
    return cfg


def load(path: str | Path, *, map_location: str = "cpu") -> Controller:
    """A controller from ``checkpoints/<recipe>/<run>/`` (or a hub id): safetensors only, strict loading, its
    settings and weights checked (finite weights, positive temperature, τ in [0, 1])."""
    root = _local_dir(path)
    name = _check_config(root / "config.json")["controller"]
    weights = root / "model.safetensors"
    if not weights.is_file():
        raise ControllerLoadError(f"{weights}: missing (controllers are stored as safetensors only)")
    try:   # the header alone (milliseconds): a cut-off copy is said to be one, not a deserializing error
        with safe_open(str(weights), framework="pt"):
            pass
    except SafetensorError as e:
        raise ControllerLoadError(f"{weights}: cannot be loaded as a {name} controller: truncated or corrupt, not a "
                                  f"complete safetensors file ({e})") from None
    try:
        controller = REGISTRY[name].from_pretrained(str(root), map_location=map_location, strict=True)
    except (ContractMismatch, ControllerLoadError):
        raise
    except Exception as e:   # safetensors header/size errors, missing or unexpected tensors (strict)
        raise ControllerLoadError(f"{weights}: cannot be loaded as a {name} controller: {e}") from e
    try:
        controller.check_weights()
    except ValueError as e:
        raise ControllerLoadError(f"{weights}: {e}") from None
    return controller


__all__ = ["REGISTRY", "register", "Controller", "ContractMismatch", "ControllerLoadError", "LinearProbe", "ToolGateLogistic",
           "GStepMLP", "load", "make_contract"]
