"""When2Tool tool environments (SPEC §2-3) and their registry.

``make_environment(task.env)`` builds a fresh environment for one episode; ``ENVIRONMENTS`` maps
each schema name (``"CalculatorEnv"``, ...) to its class.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ToolEnvironment, serialize
from .calculator import CalculatorEnv
from .historical_year import HistoricalYearEnv
from .list_manipulation import ListManipulationEnv

ENVIRONMENTS: dict[str, type[ToolEnvironment]] = {
    cls.name: cls for cls in (CalculatorEnv, HistoricalYearEnv, ListManipulationEnv)
}


def make_environment(spec: Any) -> ToolEnvironment:
    """A fresh environment for one episode from an ``EnvSpec`` (name, tools, parameters).

    A plain mapping with the same keys is accepted too, so raw task JSON can be used directly.
    """
    if isinstance(spec, Mapping):
        name, tools, parameters = spec.get("name"), spec.get("tools"), spec.get("parameters")
    else:
        name, tools, parameters = spec.name, spec.tools, spec.parameters
    cls = ENVIRONMENTS.get(name)
    if cls is None:
        raise ValueError(f"Unknown environment {name!r}; known environments: {sorted(ENVIRONMENTS)}")
    return cls(parameters=parameters, tools=tools)


__all__ = [
    "ENVIRONMENTS",
    "CalculatorEnv",
    "HistoricalYearEnv",
    "ListManipulationEnv",
    "ToolEnvironment",
    "make_environment",
    "serialize",
]
