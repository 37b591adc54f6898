"""The gate registry (data_builders/gates.py) is complete and agrees with the registries it names: every labeler,
featurizer and controller class belongs to exactly one gate, every gate's names resolve, and the table in its
docstring is the table in its code."""
from __future__ import annotations

import typing

import pytest

import controllers
import data_builders.gates
from data_builders.agent.hooks import Hooks
from data_builders.features import FEATURIZERS
from data_builders.gates import BY_KIND, GATES, gate_named
from data_builders.points.labelers import LABELERS


def test_every_labeler_featurizer_and_controller_belongs_to_one_gate():
    kinds = [g.kind for g in GATES.values()]
    assert len(set(kinds)) == len(kinds) == len(GATES)
    assert set(kinds) == set(LABELERS) == set(FEATURIZERS)
    assert sorted(g.controller for g in GATES.values()) == sorted(controllers.REGISTRY)
    assert len({g.hook for g in GATES.values()}) == len(GATES)
    assert BY_KIND == {g.kind: g for g in GATES.values()}


@pytest.mark.parametrize("name", sorted(GATES))
def test_each_gate_resolves_through_the_registries(name):
    gate = GATES[name]
    assert gate.name == name and gate_named(name) is gate
    assert gate.labeler is LABELERS[gate.kind]
    assert gate.featurizer is FEATURIZERS[gate.kind] and gate.featurizer.kind == gate.kind
    assert controllers.REGISTRY[gate.controller].registry_name == gate.controller
    # the hook is one of the agent loop's three, and a run-time hook overriding it decides between the actions
    assert gate.hook in vars(Hooks) and callable(getattr(Hooks, gate.hook))
    positive, negative = gate.actions
    assert positive != negative
    returns = typing.get_type_hints(getattr(Hooks, gate.hook))["return"]
    if typing.get_origin(returns) is typing.Literal:     # pre_call, on_answer: the hook returns the action itself
        assert set(typing.get_args(returns)) == set(gate.actions)


def test_an_unknown_gate_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown gate 'probe'; gates: \['g_step', 'probe_prefill', 'toolgate'\]"):
        gate_named("probe")
