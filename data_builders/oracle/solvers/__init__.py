"""Oracle solvers, one module per environment, discovered automatically.

Each module exports ``SOLVERS: dict[tuple[str, bool], Solver]`` keyed by (environment name,
multi_step), so the single-hop and multi-hop variants of an environment can differ.
"""
from __future__ import annotations

import pkgutil
from importlib import import_module

from ..base import Solver

SOLVERS: dict[tuple[str, bool], Solver] = {}
for _info in pkgutil.iter_modules(__path__):
    for _key, _solve in getattr(import_module(f"{__name__}.{_info.name}"), "SOLVERS", {}).items():
        if _key in SOLVERS:
            raise RuntimeError(f"two oracle solvers for {_key}")
        SOLVERS[_key] = _solve

__all__ = ["SOLVERS"]
