"""The run-time side of the gate registry (data_builders/gates/): one generic hook answers each gate's moment with its
actions, the cascade asks gates in order, and the runtime API loads any gate by its name (the endpoint's on_error
rule: tests/runtime/test_serve.py)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from data_builders.agent.hooks import PromptState
from data_builders.gates import MOMENTS, gate_named, gates
from runtime.api import Gates
from runtime.controller_hooks import Cascade, GateHook, decide


def _saved(name: str, tmp_path) -> str:
    from controllers import REGISTRY, make_contract
    from data_builders.features.gstep import N_FEATURES
    from data_builders.features.toolgate import EMBEDDING_DIM, structural_names

    gate = gate_named(name)
    shape = {"probe_prefill": [2, 4], "toolgate": [EMBEDDING_DIM + len(structural_names())],
             "g_step": [N_FEATURES]}[name]
    REGISTRY[gate.controller](contract=make_contract(gate.featurizer.id, "m@1", shape)).save_pretrained(tmp_path / name)
    return str(tmp_path / name)


@pytest.mark.parametrize("name", ["probe_prefill", "toolgate", "g_step"])
def test_the_runtime_api_loads_a_gate_by_its_name_into_its_moment(name, tmp_path):
    """``Gates.load(<gate>=dir)`` loads that gate's exported controller under its name, asked at its moment only."""
    gates_ = Gates.load(**{name: _saved(name, tmp_path)}, tokenizer=None)
    assert list(gates_.controllers) == [name] and getattr(gates_, name) is gates_.controllers[name]
    assert {m: gates_.at(m) for m in MOMENTS} == {m: [name] if m == gate_named(name).moment else [] for m in MOMENTS}
    other = next(g for g in gates() if g != name)
    assert getattr(gates_, other) is None           # a registered gate not loaded
    with pytest.raises(ValueError, match="unknown gate 'toolgat'"):
        getattr(gates_, "toolgat")


def test_a_checkpoint_of_one_gate_is_refused_under_another_name(tmp_path):
    from controllers import ContractMismatch

    with pytest.raises(ContractMismatch):
        Gates.load(g_step=_saved("toolgate", tmp_path))
    with pytest.raises(ValueError, match=r"checkpoints: unknown gate\(s\) \['gstep'\]"):
        Gates.load(gstep=_saved("g_step", tmp_path))


def _any_input(name: str):
    """The gate with a run-time input that needs no state (the controllers below ignore it)."""
    return dataclasses.replace(gate_named(name), run_input=lambda *state: torch.zeros(1, 1))


def _fixed(p: float, tau: float = 0.5, shape=(2, 4)):
    return SimpleNamespace(predict_proba=lambda x: torch.tensor([p]), tau=tau,
                           contract={"input_shape": list(shape)})


@pytest.mark.parametrize("name", ["probe_prefill", "toolgate", "g_step"])
def test_a_decision_takes_the_gates_actions_at_tau(name):
    gate = _any_input(name)
    assert decide(gate, _fixed(0.75), None).action == gate.actions[0]                  # calibrated τ 0.5
    assert decide(gate, _fixed(0.75), None, tau=0.75).action == gate.actions[0]       # p >= τ
    d = decide(gate, _fixed(0.75), None, tau=0.9)
    assert (d.action, d.gate, d.probability, d.tau) == (gate.actions[1], name, 0.75, 0.9) and d.latency_ms >= 0


def test_the_generic_hook_answers_its_gates_moment_only_and_the_probe_with_its_prefill():
    probe = GateHook("probe_prefill", _fixed(0.9), options={"style": "hard", "call_format": "xml"})
    hidden = torch.zeros(2, 4)
    assert probe.hidden_layers == [0, 1]
    assert probe.pre_generation(None, PromptState("p", [], hidden, [0, 1])) == "<tool_call>\n"     # use: a call
    probe.tau = 0.95
    assert probe.pre_generation(None, PromptState("p", [], hidden, [0, 1])) == "\\boxed{"          # skip: an answer
    # the other moments pass through as the loop's defaults
    assert probe.pre_call(None, None) == "execute" and probe.on_answer(None, "x") == "commit"
    with pytest.raises(ValueError, match="prefill style 'loud'"):
        GateHook("probe_prefill", _fixed(0.9), options={"style": "loud"})


def test_the_cascade_lets_the_first_gate_that_acts_decide():
    gate = _any_input("toolgate")
    passes, skips = GateHook(gate, _fixed(0.9)), GateHook(gate, _fixed(0.1))
    assert Cascade(passes, skips).pre_call(None, None) == "skip"
    assert Cascade(passes).pre_call(None, None) == "execute"
    assert Cascade().pre_call(None, None) == "execute" and Cascade().on_answer(None, "a") == "commit"
    assert Cascade().pre_generation(None, None) is None and Cascade().hidden_layers is None
    probe = GateHook("probe_prefill", _fixed(0.9))
    with pytest.raises(ValueError, match="one gate that reads the prompt's hidden states"):
        Cascade(probe, GateHook("probe_prefill", _fixed(0.1)))
