"""The oracle policy (docs/guide.md#when2tool-the-oracle): parse each instruction, issue the right tool calls, format
the answer.

A solver is ``solve(task, call) -> str``: it reads ``task.instruction``, calls tools through
``call(name, arguments) -> payload`` (the task's real environment, through the full tool-runtime
pipeline; a payload with ``success: false`` raises ``OracleParseError``) and returns the text that goes
inside ``\\boxed{}``. Solvers live one module per environment in ``solvers/``; each module exports
``SOLVERS = {(env_name, multi_step): solve}``; the contract they share is in ``base.py``.

The oracle proves the environments reproduce the benchmark's gold answers and supplies the
tool-use demonstrations for SFT (``sft.py``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..environments import make_environment
from ..tasks.scoring import compare_values
from ..tasks.schema import Task
from .base import OracleParseError, Solver
from .solvers import SOLVERS

# Reading a passage or retrieving by search is not mechanical, and CodeExecutor multi-hop
# steps 2-3 are prose. These environments are reported but not held to 100%.
NON_DETERMINISTIC = frozenset({"RetrieverEnv", "HistoricalYearEnv", "GameRuleEnv"})


@dataclass
class OracleStep:
    name: str
    arguments: dict[str, Any]
    result: dict[str, Any]


@dataclass
class OracleRun:
    task: Task
    steps: list[OracleStep] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None

    @property
    def correct(self) -> bool:
        return self.answer is not None and compare_values(self.answer, self.task.answer)

    @property
    def deterministic(self) -> bool:
        """Whether the mechanical oracle can be exact on this task (its answer needs no reading)."""
        if self.task.env.name in NON_DETERMINISTIC:
            return False
        return not (self.task.multi_step and self.task.env.name == "CodeExecutorEnv")


def solver_for(task: Task) -> Solver:
    key = (task.env.name, bool(task.multi_step))
    if key not in SOLVERS:
        raise KeyError(f"no oracle solver for {task.env.name} (multi_step={task.multi_step}); "
                       f"known: {sorted(SOLVERS)}")
    return SOLVERS[key]


def run_oracle(task: Task) -> OracleRun:
    """Solve one task against a fresh environment. Never raises for a bad task: the error is recorded."""
    env = make_environment(task.env)
    run = OracleRun(task)

    def call(name: str, arguments: dict) -> dict:
        out = env.call(name, copy.deepcopy(arguments))
        run.steps.append(OracleStep(name, arguments, out))
        if not out.get("success"):  # a mechanical oracle never expects a failing call
            raise OracleParseError(f"{name}({arguments}) failed: {out.get('message')}")
        return out

    try:
        run.answer = str(solver_for(task)(task, call))
    except Exception as exc:  # a parse failure or an unexpected payload: report it per task
        run.error = f"{type(exc).__name__}: {exc}"
    return run
