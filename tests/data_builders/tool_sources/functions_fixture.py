"""Functions for the functions-source tests: ordinary tools, and the misbehaviours a source must survive.

The docstrings are Google style with an ``Args:`` section because ``transformers.utils.get_json_schema`` (which
builds the tool schemas) requires it.
"""
from __future__ import annotations

import os
import time
from json import dumps  # imported, not defined here: a module source must not offer it as a tool


def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length between units.

    Args:
        value: The length to convert.
        from_unit: The unit of value (m, km or cm).
        to_unit: The unit to convert to (m, km or cm).
    """
    factors = {"m": 1.0, "km": 1000.0, "cm": 0.01}
    return value * factors[from_unit] / factors[to_unit]


def worker_pid() -> int:
    """The id of the process that runs the tools."""
    return os.getpid()


def describe(name: str, tags: list[str] | None = None) -> dict:
    """A record about a name.

    Args:
        name: The name.
        tags: Optional labels.
    """
    return {"name": name, "tags": tags or [], "note": "café"}


def hang(seconds: float) -> str:
    """Block for a while.

    Args:
        seconds: How long to block.
    """
    time.sleep(seconds)
    return "woke up"


def fail(message: str) -> str:
    """Raise an error.

    Args:
        message: The error message.
    """
    raise ValueError(message)


def crash() -> str:
    """Kill the process that runs the tools."""
    os._exit(3)


def flood(n: int) -> str:
    """A long answer.

    Args:
        n: How many characters.
    """
    return "y" * n


def _helper() -> None:
    """Private: not a tool."""
