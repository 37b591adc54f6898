"""The solver contract, shared by the oracle (``core.py``) and the solvers (``solvers/``).

A solver is ``solve(task, call) -> str``; ``call(name, arguments) -> payload`` runs a tool of the task's
environment, and a solver that cannot parse its instruction raises :class:`OracleParseError`. Kept apart
from ``core.py`` because ``core`` imports the solver registry, which imports every solver.
"""
from __future__ import annotations

from typing import Callable

from ..tasks.schema import Task

CallFn = Callable[[str, dict], dict]
Solver = Callable[[Task, CallFn], str]


class OracleParseError(ValueError):
    """The solver could not parse the instruction (a task outside the generator's templates)."""
