"""When2Tool tool environments and their registry (docs/guide.md#when2tool-environments).

``make_environment(task.env)`` builds a fresh environment for one episode; ``ENVIRONMENTS`` maps
each schema name (``"CalculatorEnv"``, ...) to its class.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import inspect
import pkgutil
from importlib import import_module

from .base import ToolEnvironment, serialize
from .calculator import CalculatorEnv
from .historical_year import HistoricalYearEnv
from .list_manipulation import ListManipulationEnv


def _discover() -> dict[str, type[ToolEnvironment]]:
    """Every ToolEnvironment subclass defined in a module of this package, by its schema name.

    Discovery (rather than a hand-kept list) means adding an environment is adding one module."""
    found: dict[str, type[ToolEnvironment]] = {}
    for info in pkgutil.iter_modules(__path__):
        module = import_module(f"{__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, ToolEnvironment) and cls is not ToolEnvironment and cls.__module__ == module.__name__:
                if cls.name in found and found[cls.name] is not cls:
                    raise RuntimeError(f"two environments named {cls.name}")
                found[cls.name] = cls
    return dict(sorted(found.items()))


ENVIRONMENTS: dict[str, type[ToolEnvironment]] = _discover()


def make_environment(spec: Any) -> ToolEnvironment:
    """A fresh environment for one episode from an ``EnvSpec`` (name, tools, parameters; with ``sources``: the
    task's own tool sources, :mod:`data_builders.tool_sources.environment`).

    A plain mapping with the same keys is accepted too, so raw task JSON can be used directly.
    """
    if isinstance(spec, Mapping):
        name, tools, parameters = spec.get("name"), spec.get("tools"), spec.get("parameters")
    else:
        name, tools, parameters = spec.name, spec.tools, spec.parameters
    if getattr(spec, "sources", None):
        # A team's own tools (MCP servers, Python functions, recorded traces), not a When2Tool environment.
        from ..tool_sources.environment import environment_for

        return environment_for(spec)
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
