"""The run-time side of the gate registry (data_builders/gates.py): the runtime API, the agent-loop hooks and the
endpoint's on_error rule cover exactly its gates, and decide with its actions."""
from __future__ import annotations

import dataclasses
import inspect
import time
from types import SimpleNamespace

import pytest
import torch

from data_builders.gates import GATES
from runtime.api import Gates
from runtime.controller_hooks import HARD_PREFILL, SOFT_PREFILL, GStep, ProbePrefill, ToolGate, decide

HOOKS = {g.hook for g in GATES.values()}


def test_the_runtime_api_loads_every_gate_by_its_name():
    assert set(GATES) <= {f.name for f in dataclasses.fields(Gates)}
    assert set(GATES) <= set(inspect.signature(Gates.load).parameters)


@pytest.mark.parametrize("cls, name", [(ProbePrefill, "probe_prefill"), (ToolGate, "toolgate"), (GStep, "g_step")])
def test_each_run_time_hook_answers_its_gates_hook_only(cls, name):
    assert {h for h in HOOKS if h in vars(cls)} == {GATES[name].hook}


def test_the_probes_prefills_are_its_actions():
    assert set(SOFT_PREFILL) == set(HARD_PREFILL) == set(GATES["probe_prefill"].actions)


@pytest.mark.parametrize("name", sorted(GATES))
def test_a_decision_takes_the_gates_actions_at_tau(name):
    controller = SimpleNamespace(predict_proba=lambda x: torch.tensor([0.75]), tau=0.5)
    assert decide(name, controller, None, None, time.perf_counter()).action == GATES[name].actions[0]
    assert decide(name, controller, None, 0.75, time.perf_counter()).action == GATES[name].actions[0]  # p >= τ
    assert decide(name, controller, None, 0.9, time.perf_counter()).action == GATES[name].actions[1]


