"""The gate registry: the one table that says which names belong to one gate.

Each gate is known by several names, one per registry that owns a part of it (the entries of :data:`GATES` below:
the table is the code, so no copy of it here can drift):

* the **gate** name is the controller recipe (``python -m trainers.fit recipe=<gate>``, its checkpoints under
  ``checkpoints/<gate>/``) and the gate of the runtime API and the endpoint (``Gates.load(<gate>=...)``,
  ``gates.<gate>=...``);
* the decision-point **kind** keys the labeler that builds the gate's points
  (:data:`data_builders.points.labelers.LABELERS`) and the featurizer that computes its input at build time and at
  run time (:data:`data_builders.features.FEATURIZERS`);
* the **controller** is the class the recipe fits, by its name in ``controllers.REGISTRY``;
* the **hook** is the :class:`~data_builders.agent.hooks.Hooks` method the gate's run-time hook answers
  (``runtime.controller_hooks``), and **actions** are what that hook decides when the controller's probability is
  at or above τ, and below it;
* **on_error** is what a server applies when the gate itself fails, for each of :data:`ON_ERROR_MODES`.

Entries are names, resolved through those registries (this module imports none of the heavy ones: ``controllers``
is not imported by ``data_builders`` at all, and the labelers load the agent loop only when asked for), so every
layer that needs the mapping (the runtime hooks and API, the controller recipes, the evaluator, the benchmarks)
reads it here instead of restating it. A test checks that every name resolves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .features import FEATURIZERS, Featurizer


@dataclass(frozen=True)
class Gate:
    name: str                   # recipe, checkpoint directory, runtime-API / endpoint gate
    kind: str                   # decision-point kind: LABELERS and FEATURIZERS key
    controller: str             # controllers.REGISTRY name of the class the recipe fits
    hook: str                   # the agent-loop hook (Hooks method) its run-time hook answers
    actions: tuple[str, str]    # the hook's decision when p >= τ, and when p < τ
    # what a server applies when the gate itself fails, per ON_ERROR_MODES: "open" lets the turn through as the
    # policy wrote it, "closed" takes the cautious action
    on_error: tuple[str, str]

    @property
    def featurizer(self) -> Featurizer:
        return FEATURIZERS[self.kind]

    @property
    def labeler(self) -> Callable:
        # why here: the labelers import the agent loop and the backends; a reader of the table needs neither
        from .points.labelers import LABELERS

        return LABELERS[self.kind]


#: how a server resolves a gate that raises (``gates.on_error``); each gate's action for each is its ``on_error``
ON_ERROR_MODES = ("open", "closed")

GATES: dict[str, Gate] = {g.name: g for g in (
    # the probe failing open adds no prefill at all ("none": the policy writes its first turn unprompted)
    Gate("probe_prefill", kind="probe", controller="linear_probe", hook="pre_generation", actions=("use", "skip"),
         on_error=("none", "skip")),
    Gate("toolgate", kind="flip", controller="toolgate_logistic", hook="pre_call", actions=("execute", "skip"),
         on_error=("execute", "skip")),
    Gate("g_step", kind="commit", controller="gstep_mlp", hook="on_answer", actions=("continue", "commit"),
         on_error=("commit", "continue")),
)}
#: decision-point kind -> the gate whose points it builds
BY_KIND: dict[str, Gate] = {g.kind: g for g in GATES.values()}


def gate_named(name: str) -> Gate:
    """The gate named ``name`` (a recipe or runtime gate name), refused with the known names otherwise."""
    if name not in GATES:
        raise ValueError(f"unknown gate {name!r}; gates: {sorted(GATES)}")
    return GATES[name]
