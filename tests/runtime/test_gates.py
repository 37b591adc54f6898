"""The run-time side of the gate registry (data_builders/gates.py): the runtime API and the agent-loop hooks cover
exactly its gates and decide with its actions (the endpoint's on_error rule: tests/runtime/test_serve.py)."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from data_builders.gates import GATES
from runtime.api import Gates
from runtime.controller_hooks import HARD_PREFILL, SOFT_PREFILL, GStep, ProbePrefill, ToolGate, decide

HOOKS = {g.hook for g in GATES.values()}


@pytest.mark.parametrize("name", sorted(GATES))
def test_the_runtime_api_loads_every_gate_by_its_name(name, tmp_path):
    """``Gates.load(<gate>=dir)`` loads that gate's exported controller into that gate's slot, and only there."""
    from controllers import REGISTRY, make_contract
    from data_builders.features.gstep import N_FEATURES
    from data_builders.features.toolgate import EMBEDDING_DIM, structural_names

    cls = REGISTRY[GATES[name].controller]
    shape = {"probe_prefill": [2, 4], "toolgate": [EMBEDDING_DIM + len(structural_names())],
             "g_step": [N_FEATURES]}[name]
    cls(contract=make_contract(GATES[name].featurizer.id, "m@1", shape)).save_pretrained(tmp_path / name)
    gates = Gates.load(**{name: str(tmp_path / name)})
    assert {g: type(getattr(gates, g)).__name__ for g in GATES if getattr(gates, g) is not None} == {name: cls.__name__}


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


