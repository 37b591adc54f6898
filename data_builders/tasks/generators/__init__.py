"""Built-in task generators, one module per environment, and their registry.

Each module in this package that defines ``GENERATOR`` (an :class:`~.common.EnvGenerator`) is
registered (``MULTIHOP_GENERATOR`` for a three-step chain variant); ``generate_builtin`` (``..builtin``) walks ``GENERATORS`` in When2Tool's env_no order.
"""
from __future__ import annotations

import pkgutil
from importlib import import_module

from ..schema import ENV_CATEGORY
from .common import EnvGenerator

_ENV_ORDER = {name: i for i, name in enumerate(ENV_CATEGORY)}  # ENV_CATEGORY is in env_no order


def _discover(attr: str) -> dict[str, EnvGenerator]:
    found: dict[str, EnvGenerator] = {}
    for info in pkgutil.iter_modules(__path__):
        gen = getattr(import_module(f"{__name__}.{info.name}"), attr, None)
        if gen is None:
            continue
        if gen.env in found:
            raise RuntimeError(f"two {attr}s for {gen.env}: {info.name} and another module")
        found[gen.env] = gen
    return dict(sorted(found.items(), key=lambda kv: _ENV_ORDER.get(kv[0], len(_ENV_ORDER))))


GENERATORS: dict[str, EnvGenerator] = _discover("GENERATOR")                   # single-hop, one per environment
MULTIHOP_GENERATORS: dict[str, EnvGenerator] = _discover("MULTIHOP_GENERATOR")  # three-step chains

__all__ = ["EnvGenerator", "GENERATORS", "MULTIHOP_GENERATORS"]
