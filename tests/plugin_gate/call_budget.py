"""A fourth gate written outside toolwise, as docs/architecture.md ("Add a controller") tells a user to: one module,
registered by naming it (``TOOLWISE_GATES=call_budget``), nothing inside the package edited.

``call_budget`` decides before each proposed call (the ``pre_call`` moment, ToolGate's) from four numbers about the
call and the question, with a logistic controller of its own class; its label is whether the episode that proposed
the call ended correct (a call worth executing). A toy, but every part a gate has: spec, featurizer (this module:
``FEATURIZER_NAME``, ``FEATURIZER_VERSION``, ``FEATURE_NAMES``, ``controller_input``), labeler, controller class,
recipe args.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np
import torch
import controllers
from controllers import ToolGateLogistic
from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent
from data_builders.features import Featurizer
from data_builders.gates import Gate
from data_builders.points.labelers import agent_config, base_row

FEATURIZER_NAME = "call_budget"
FEATURIZER_VERSION = 1
FEATURE_NAMES = ("round", "calls_before", "args_chars", "question_digits")
FEATURIZER = Featurizer("call_budget", __name__, package=None)     # the featurizer is this module


def features(episode, call) -> np.ndarray:
    """The one featurizer, at build time (the labeler's hook) and at run time (the gate's hook)."""
    return np.array([episode.round, len(episode.calls), len(json.dumps(call.arguments, sort_keys=True)),
                     len(re.findall(r"\d", episode.task.instruction))], dtype=np.float32)


def controller_input(tensors: dict) -> torch.Tensor:
    return tensors["features"].float()


def run_input(episode, call) -> torch.Tensor:
    return FEATURIZER.controller_input({"features": torch.from_numpy(features(episode, call)[None])})


class _Recorder(Hooks):
    def __init__(self):
        self.points: list[tuple[str, np.ndarray]] = []

    def pre_call(self, episode, call):
        self.points.append((str(episode.task.id), features(episode, call)))
        return "execute"


def label_call_budget(backend, tasks, splits, cfg, progress=None):
    """One point per proposed call of a default-mode episode; label 1 iff that episode ended correct."""
    recorder = _Recorder()
    trajs = Agent(backend, agent_config(cfg, "default", len(tasks)), recorder).run(tasks, on_done=progress)
    correct = {str(t.task_id): t.correct for t in trajs}
    split_of = {str(t.id): (t, s) for t, s in zip(tasks, splits)}
    rows, feats = [], []
    for k, (task_id, x) in enumerate(recorder.points):
        task, split = split_of[task_id]
        rows.append(base_row(task, split, f"{task_id}:{k}", int(correct[task_id])))
        feats.append(x)
    x = np.stack(feats) if feats else np.zeros((0, len(FEATURE_NAMES)), np.float32)
    return rows, {"features": torch.from_numpy(x)}


@controllers.register
class CallBudgetLogistic(ToolGateLogistic):
    """A logistic regression on the four numbers: ToolGate's model under a registry name of its own (a gate's class
    may be any Controller; reusing one shows the registration, not a new model)."""

    registry_name = "call_budget_logistic"


@dataclass
class CallBudgetArgs:
    """CallBudgetLogistic takes no constructor arguments besides its contract."""


GATE = Gate(
    name="call_budget", kind="call_budget", featurizer=FEATURIZER, labeler=f"{__name__}:label_call_budget",
    label_rule=lambda cfg: "label=1 (execute) iff the default-mode episode that proposed the call ends correct",
    controller=CallBudgetLogistic.registry_name, args=CallBudgetArgs, moment="pre_call", run_input=run_input,
    on_error=("execute", "skip"), card_action="execute the pending tool call (else it is skipped)",
)
