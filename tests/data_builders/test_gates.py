"""The gate registry (data_builders/gates/): each gate is one module exporting one spec, found by discovery; every
name a spec gives resolves, and a gate module outside the package is registered by naming it."""
from __future__ import annotations

import sys
import textwrap

import pytest

import controllers
import data_builders.gates as registry
from data_builders.agent.hooks import Hooks
from data_builders.gates import MOMENTS, gate_named, gate_of_kind, gates, gates_at


def test_the_builtin_gates_are_found_in_the_loops_order():
    assert list(gates()) == ["probe_prefill", "toolgate", "g_step"]
    assert [g.moment for g in gates().values()] == ["pre_generation", "pre_call", "on_answer"]
    assert [g.name for g in gates_at("pre_call")] == ["toolgate"]


@pytest.mark.parametrize("name", ["probe_prefill", "toolgate", "g_step"])
def test_each_gate_resolves_through_the_registries(name):
    gate = gate_named(name)
    assert gate.name == name and gate_of_kind(gate.kind) is gate
    assert gate.featurizer.kind == gate.kind and gate.featurizer.id["version"] >= 1
    assert callable(gate.labeler_fn) and gate.labeler_fn.__name__.startswith("label_")
    assert controllers.REGISTRY[gate.controller].registry_name == gate.controller
    # the moment is one of the agent loop's hooks; the gate's actions are that moment's, on_error among them
    assert gate.moment in vars(Hooks) and gate.actions == MOMENTS[gate.moment]["actions"]
    assert set(gate.on_error) <= {*gate.actions, MOMENTS[gate.moment]["passes"]}
    # failing open lets the turn through as no gate would (the hook's default); failing closed takes an action
    assert gate.on_error[0] == MOMENTS[gate.moment]["passes"] and gate.on_error[1] in gate.actions
    assert isinstance(gate.label_rule({"commit_label": "wrong"}), str)


def test_an_unknown_gate_or_kind_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown gate 'probe'; gates: \['g_step', 'probe_prefill', 'toolgate'\]"):
        gate_named("probe")
    with pytest.raises(ValueError, match=r"unknown decision-point kind 'flips'; kinds: \['commit', 'flip', 'probe'\]"):
        gate_of_kind("flips")


def test_a_spec_at_an_unknown_moment_or_with_a_foreign_on_error_is_refused():
    spec = dict(gate_named("toolgate").__dict__)
    with pytest.raises(ValueError, match="moment 'post_call'"):
        registry.Gate(**{**spec, "moment": "post_call"})
    with pytest.raises(ValueError, match="on_error"):
        registry.Gate(**{**spec, "on_error": ("commit", "skip")})


@pytest.fixture
def outside_module(tmp_path, monkeypatch):
    """A gate module on sys.path outside the package, named by TOOLWISE_GATES; the registry found again after."""
    def write(name: str, body: str) -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv(registry.GATES_ENV, name)
        return name
    yield write
    monkeypatch.delenv(registry.GATES_ENV, raising=False)
    for mod in [m for m in sys.modules if m.startswith("outside_gate")]:
        del sys.modules[mod]
    registry.reload()


def test_a_gate_module_outside_the_package_is_registered_by_naming_it(outside_module):
    outside_module("outside_gate_ok", """
        import dataclasses
        from data_builders.gates import Gate, gate_named
        GATE = dataclasses.replace(gate_named("toolgate"), name="other_gate", kind="other_kind", label="")
    """)
    found = registry.reload()
    assert list(found)[-2:] == ["other_gate", "g_step"]      # by moment: pre_call gates before on_answer
    assert gate_of_kind("other_kind").name == "other_gate" and gate_named("other_gate").label == "other_gate"


def test_a_gate_module_that_reuses_a_name_or_exports_nothing_is_refused(outside_module):
    outside_module("outside_gate_dup", """
        from data_builders.gates import gate_named
        GATE = gate_named("g_step")
    """)
    with pytest.raises(ValueError, match="'outside_gate_dup': name 'g_step' / kind 'commit' is already the gate"):
        registry.reload()
    outside_module("outside_gate_none", "X = 1\n")
    with pytest.raises(ValueError, match="'outside_gate_none' exports no GATE"):
        registry.reload()
    outside_module("outside_gate_missing_dep", "import not_a_module_anywhere\n")
    with pytest.raises(ImportError, match="gate module 'outside_gate_missing_dep'.*cannot be imported"):
        registry.reload()
