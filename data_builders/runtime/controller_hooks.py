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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from controllers import Controller
from data_builders.agent.hooks import EpisodeView, Hooks, PromptState
from data_builders.features import FEATURIZERS
from data_builders.features.gstep import gstep_features
from data_builders.features.toolgate import embed_texts, toolgate_state

# SPEC §7.4: soft prefill = one first-person sentence plus a newline; hard = a forced prefix.
SOFT_PREFILL = {"skip": "I can solve this directly without using a tool.\n",
                "use": "I need to use a tool for this question.\n"}
HARD_PREFILL = {"skip": "\\boxed{", "use": {"xml": "<tool_call>\n", "native": '{"name": "'}}


def prefill_text(decision: Literal["skip", "use"], style: str, call_format: str = "xml") -> str:
    if style == "soft":
        return SOFT_PREFILL[decision]
    if style == "hard":
        text = HARD_PREFILL[decision]
        return text[call_format] if isinstance(text, dict) else text
    raise ValueError(f"prefill style {style!r}: choose soft or hard")


def checked(controller: Controller, kind: str, policy: str | None, *, strict: bool = True) -> Controller:
    """The controller, after checking it was trained on ``kind`` features of ``policy``."""
    controller.check_contract(featurizer=FEATURIZERS[kind].id, backend=policy if strict else None)
    return controller.eval()


@dataclass
class ProbePrefill(Hooks):
    probe: Controller
    tau: float | None = None          # None: the probe's calibrated τ
    style: str = "soft"
    call_format: str = "xml"

    def __post_init__(self):
        self.hidden_layers = list(range(self.probe.contract["input_shape"][0]))

    def probability(self, state: PromptState) -> float:
        x = FEATURIZERS["probe"].controller_input({"hidden": torch.as_tensor(state.hidden)[None]})
        return float(self.probe.predict_proba(x)[0])

    def pre_generation(self, task, state: PromptState) -> str | None:
        tau = self.probe.tau if self.tau is None else self.tau
        decision = "use" if self.probability(state) >= tau else "skip"
        return prefill_text(decision, self.style, self.call_format)


@dataclass
class ToolGate(Hooks):
    gate: Controller
    tau: float | None = None

    def probability(self, episode: EpisodeView, call) -> float:
        text, structural = toolgate_state(episode, call)
        x = FEATURIZERS["flip"].controller_input({"embedding": torch.from_numpy(embed_texts([text])),
                                                 "structural": torch.from_numpy(np.asarray(structural)[None])})
        return float(self.gate.predict_proba(x)[0])

    def pre_call(self, episode: EpisodeView, call):
        tau = self.gate.tau if self.tau is None else self.tau
        return "execute" if self.probability(episode, call) >= tau else "skip"


@dataclass
class GStep(Hooks):
    gate: Controller
    tau: float | None = None

    def probability(self, episode: EpisodeView, answer_text: str) -> float:
        x = FEATURIZERS["commit"].controller_input(
            {"features": torch.from_numpy(np.asarray(gstep_features(episode, answer_text))[None])})
        return float(self.gate.predict_proba(x)[0])

    def on_answer(self, episode: EpisodeView, answer_text: str):
        tau = self.gate.tau if self.tau is None else self.tau
        return "continue" if self.probability(episode, answer_text) >= tau else "commit"


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
