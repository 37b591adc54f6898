"""Controllers in the agent loop: one run-time hook for any gate of the registry (``data_builders.gates``), and the
cascade of several.

A :class:`GateHook` answers its gate's moment (``pre_generation``, ``pre_call`` or ``on_answer``): it computes the
controller's input with the gate's featurizer — the one its labeler used at build time — inside the same hook call,
thresholds the controller's probability at τ and returns the gate's action (the probe's: its response prefill).
Loading checks the controller's contract against the policy it will steer: a gate trained on one policy's
trajectories refuses another's.

The decision itself (:func:`decide`: featurize → probability → threshold at τ) is shared with the runtime API
(``runtime.api``), which serves the same gates to agents toolwise did not write.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from controllers import Controller
from data_builders.agent.hooks import Hooks
from data_builders.gates import MOMENTS, Gate, gate_named


def checked(controller: Controller, gate_name: str, policy: str | None, *, strict: bool = True) -> Controller:
    """The controller, after checking it was trained on the features of gate ``gate_name``'s featurizer, computed
    on ``policy``."""
    featurizer = gate_named(gate_name).featurizer
    controller.check_contract(featurizer=featurizer.id, backend=policy if strict else None,
                              feature_names=featurizer.feature_names)
    return controller.eval()


@dataclass
class GateDecision:
    gate: str          # the gate's name (data_builders.gates)
    action: str        # one of its moment's actions (pre_call: execute|skip; on_answer: continue|commit; ...)
    probability: float
    tau: float
    latency_ms: float  # featurizing + the controller's forward (what a deployment adds per decision)
    support: float | None = None    # the input's largest |z| under the training statistics (Controller.support_distance)
    reason: str | None = None       # "out_of_support": past the support limit, the open action was taken


def decide(gate: Gate | str, controller: Controller, *state: Any, tau: float | None = None,
           support_z: float | None = None) -> GateDecision:
    """``gate``'s decision at its moment's ``state`` (the hook's arguments after the task: a PromptState; an
    EpisodeView and the pending call; an EpisodeView and the answer text), thresholded at τ (None: the
    controller's calibrated τ). ``support_z``: an input with a feature further than this many training standard
    deviations from the training mean is outside what the controller learned from, and the gate takes its open
    action (what the moment does with no gate: commit, execute, no prefill) with ``reason="out_of_support"``
    instead of acting on its extrapolation; None: always decide."""
    gate = gate_named(gate) if isinstance(gate, str) else gate
    started = time.perf_counter()
    x = gate.run_input(*state)
    p = float(controller.predict_proba(x)[0])
    # a controller that is not toolwise's Controller (anything with predict_proba and tau) reports no support
    measure = getattr(controller, "support_distance", None)
    distance = measure(x) if measure is not None else None
    support = None if distance is None else float(distance[0])
    tau = float(controller.tau if tau is None else tau)
    positive, negative = gate.actions
    action, reason = positive if p >= tau else negative, None
    if support_z is not None and support is not None and support > support_z:
        action, reason = gate.on_error[0], "out_of_support"
    return GateDecision(gate.name, action, p, tau, (time.perf_counter() - started) * 1e3, support, reason)


@dataclass
class GateHook(Hooks):
    """A gate in toolwise's own agent loop: the registry's ``gate`` (or its name) with its loaded controller.
    ``options``: the hook's options over the gate's defaults (the probe's ``style`` and ``call_format``)."""

    gate: Gate | str
    controller: Controller
    tau: float | None = None          # None: the controller's calibrated τ
    options: dict = field(default_factory=dict)
    # the support limit (decide); "gate": the gate's own (Gate.support_z), as the runtime API's default, so the loop
    # and a server decide alike on the same state
    support_z: float | None | str = "gate"

    def __post_init__(self):
        self.gate = gate_named(self.gate) if isinstance(self.gate, str) else self.gate
        if self.support_z == "gate":
            self.support_z = self.gate.support_z
        self.options = {**self.gate.options, **self.options}
        self.gate.act(self.gate.actions[1], **self.options)      # an unknown option value fails here, not per task
        if self.gate.hidden_layers is not None:
            self.hidden_layers = self.gate.hidden_layers(self.controller)

    def decision(self, *state: Any) -> GateDecision:
        return decide(self.gate, self.controller, *state, tau=self.tau, support_z=self.support_z)

    def probability(self, *state: Any) -> float:
        return self.decision(*state).probability

    def respond(self, *state: Any):
        """What the hook returns at its moment: the action as the loop takes it (the probe's prefill text)."""
        return self.gate.act(self.decision(*state).action, **self.options)

    def pre_generation(self, task, state):
        return self.respond(state) if self.gate.moment == "pre_generation" else super().pre_generation(task, state)

    def pre_call(self, episode, call):
        return self.respond(episode, call) if self.gate.moment == "pre_call" else super().pre_call(episode, call)

    def on_answer(self, episode, answer_text):
        if self.gate.moment == "on_answer":
            return self.respond(episode, answer_text)
        return super().on_answer(episode, answer_text)


class Cascade(Hooks):
    """Several gates together, each at its own moment. Gates at the same moment are asked in the order given; the
    first whose answer differs from what the moment does with no gate (:data:`~data_builders.gates.MOMENTS`) decides."""

    def __init__(self, *hooks: GateHook):
        self.hooks = list(hooks)
        layers = [h.hidden_layers for h in hooks if h.hidden_layers is not None]
        if len(layers) > 1:   # the loop reads one set of layers per first prompt, which each such gate reads whole
            raise ValueError("a cascade takes one gate that reads the prompt's hidden states")
        self.hidden_layers = layers[0] if layers else None

    def _ask(self, moment: str, default, *args):
        for hook in self.hooks:
            if hook.gate.moment == moment:
                answer = getattr(hook, moment)(*args)
                if answer != default:
                    return answer
        return default

    def pre_generation(self, task, state):
        return self._ask("pre_generation", None, task, state)

    def pre_call(self, episode, call):
        return self._ask("pre_call", MOMENTS["pre_call"]["passes"], episode, call)

    def on_answer(self, episode, answer_text):
        return self._ask("on_answer", MOMENTS["on_answer"]["passes"], episode, answer_text)
