"""Controllers in the agent loop: the run-time hooks that load an exported controller and decide.

Each hook computes its controller's input with the featurizer the labeler used at build time
(``data_builders.features``), inside the same hook call, so a controller sees at run time exactly the
features it was trained on. Loading checks the controller's contract against the policy it will steer:
a gate trained on one policy's trajectories refuses another's.

* :class:`ProbePrefill` — ``pre_generation``: all-layer hidden states of the first prompt → probe → a
  response prefill (When2Tool, arXiv 2605.09252): soft = a first-person sentence, hard = a forced prefix.
* :class:`ToolGate` — ``pre_call``: summary embedding + structural features → execute or skip.
* :class:`GStep` — ``on_answer``: the G-STEP vector → continue (one verification round) or commit.
* :class:`Cascade` — any of the three together.

The decision itself (featurize → probability → threshold at τ) is one function per gate
(:func:`toolgate_decision`, :func:`gstep_decision`, :func:`probe_decision`), shared with the runtime API
(``runtime.api``) that serves the same gates to agents toolwise did not write.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from controllers import Controller
from data_builders.agent.hooks import EpisodeView, Hooks, PromptState
from data_builders.features.gstep import gstep_features
from data_builders.gates import GATES, gate_named
from data_builders.features.toolgate import embed_texts, toolgate_state
from data_builders.protocol import ANSWER_PREFILL, CALL_PREFILL, PREFILL_STYLES

# Probe&Prefill's two prefill styles (docs/guide.md#when2tool-the-probe-pipeline): soft = one first-person sentence
# plus a newline, a hint the model may still overrule; hard = a forced prefix that commits it to a call or an answer.
SOFT_PREFILL = {"skip": "I can solve this directly without using a tool.\n",
                "use": "I need to use a tool for this question.\n"}
HARD_PREFILL = {"skip": ANSWER_PREFILL, "use": CALL_PREFILL}


def prefill_text(decision: Literal["skip", "use"], style: str, call_format: str = "xml") -> str:
    if style == "soft":
        return SOFT_PREFILL[decision]
    if style == "hard":
        text = HARD_PREFILL[decision]
        return text[call_format] if isinstance(text, dict) else text
    raise ValueError(f"prefill style {style!r}: choose one of {PREFILL_STYLES}")


def checked(controller: Controller, gate_name: str, policy: str | None, *, strict: bool = True) -> Controller:
    """The controller, after checking it was trained on the features of gate ``gate_name``'s featurizer, computed
    on ``policy``."""
    featurizer = gate_named(gate_name).featurizer
    controller.check_contract(featurizer=featurizer.id, backend=policy if strict else None,
                              feature_names=featurizer.feature_names)
    return controller.eval()


# ---- the decision code: the hooks below and the runtime API (runtime/api.py) both call these,
# so a gate thresholds and featurizes the same way inside toolwise's loop and behind a user's agent.
@dataclass
class GateDecision:
    gate: str          # "toolgate" | "g_step" | "probe_prefill"
    action: str        # toolgate: "execute"|"skip"; g_step: "continue"|"commit"; probe: "use"|"skip"
    probability: float
    tau: float
    latency_ms: float  # featurizing + the controller's forward (what a deployment adds per decision)


def toolgate_input(episode: EpisodeView, call) -> torch.Tensor:
    """ToolGate's controller input ``[1, 384 + structural]`` for the pending ``call``."""
    text, structural = toolgate_state(episode, call)
    return GATES["toolgate"].featurizer.controller_input({"embedding": torch.from_numpy(embed_texts([text])),
                                                          "structural": torch.from_numpy(np.asarray(structural)[None])})


def gstep_input(episode: EpisodeView, answer_text: str) -> torch.Tensor:
    """G-STEP's controller input ``[1, N_FEATURES]`` for the answer ``answer_text``."""
    return GATES["g_step"].featurizer.controller_input(
        {"features": torch.from_numpy(np.asarray(gstep_features(episode, answer_text))[None])})


def probe_input(state: PromptState) -> torch.Tensor:
    """The probe's controller input ``[1, layers, d]`` from the prefill's hidden states."""
    return GATES["probe_prefill"].featurizer.controller_input({"hidden": torch.as_tensor(state.hidden)[None]})


def decide(gate: str, controller: Controller, x: torch.Tensor, tau: float | None, started: float) -> GateDecision:
    """Threshold the controller's probability at τ (None: its calibrated τ); ``started`` is the
    ``time.perf_counter()`` at which featurizing began."""
    p = float(controller.predict_proba(x)[0])
    tau = float(controller.tau if tau is None else tau)
    positive, negative = GATES[gate].actions
    return GateDecision(gate, positive if p >= tau else negative, p, tau, (time.perf_counter() - started) * 1e3)


def toolgate_decision(gate: Controller, episode: EpisodeView, call, tau: float | None = None) -> GateDecision:
    t0 = time.perf_counter()
    return decide("toolgate", gate, toolgate_input(episode, call), tau, t0)


def gstep_decision(gate: Controller, episode: EpisodeView, answer_text: str, tau: float | None = None) -> GateDecision:
    t0 = time.perf_counter()
    return decide("g_step", gate, gstep_input(episode, answer_text), tau, t0)


def probe_decision(probe: Controller, state: PromptState, tau: float | None = None) -> GateDecision:
    t0 = time.perf_counter()
    return decide("probe_prefill", probe, probe_input(state), tau, t0)


# ---- the hooks of toolwise's own agent loop
@dataclass
class ProbePrefill(Hooks):
    probe: Controller
    tau: float | None = None          # None: the probe's calibrated τ
    style: str = "soft"
    call_format: str = "xml"

    def __post_init__(self):
        self.hidden_layers = list(range(self.probe.contract["input_shape"][0]))

    def decision(self, state: PromptState) -> GateDecision:
        return probe_decision(self.probe, state, self.tau)

    def probability(self, state: PromptState) -> float:
        return self.decision(state).probability

    def pre_generation(self, task, state: PromptState) -> str | None:
        return prefill_text(self.decision(state).action, self.style, self.call_format)


@dataclass
class ToolGate(Hooks):
    gate: Controller
    tau: float | None = None

    def decision(self, episode: EpisodeView, call) -> GateDecision:
        return toolgate_decision(self.gate, episode, call, self.tau)

    def probability(self, episode: EpisodeView, call) -> float:
        return self.decision(episode, call).probability

    def pre_call(self, episode: EpisodeView, call):
        return self.decision(episode, call).action


@dataclass
class GStep(Hooks):
    gate: Controller
    tau: float | None = None

    def decision(self, episode: EpisodeView, answer_text: str) -> GateDecision:
        return gstep_decision(self.gate, episode, answer_text, self.tau)

    def probability(self, episode: EpisodeView, answer_text: str) -> float:
        return self.decision(episode, answer_text).probability

    def on_answer(self, episode: EpisodeView, answer_text: str):
        return self.decision(episode, answer_text).action


class Cascade(Hooks):
    """Probe&Prefill before generation, ToolGate before each call, G-STEP at each answer (any subset)."""

    def __init__(self, probe: ProbePrefill | None = None, gate: ToolGate | None = None, gstep: GStep | None = None):
        self.probe, self.gate, self.gstep = probe, gate, gstep
        self.hidden_layers = probe.hidden_layers if probe else None

    def pre_generation(self, task, state):
        return self.probe.pre_generation(task, state) if self.probe else None

    def pre_call(self, episode, call):
        return self.gate.pre_call(episode, call) if self.gate else "execute"

    def on_answer(self, episode, answer_text):
        return self.gstep.on_answer(episode, answer_text) if self.gstep else "commit"
