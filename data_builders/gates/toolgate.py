"""ToolGate (arXiv 2606.03054): a class-balanced logistic gate on [MiniLM embedding ‖ structural features] of the
pending call, read after the policy proposes it and before it runs: execute, or skip it with the loop's no-op tool
message. Labels: forced-answer flips around the call's result."""
from __future__ import annotations

from dataclasses import dataclass

from ..features import Featurizer
from .spec import Gate

FEATURIZER = Featurizer("flip", "toolgate")


def run_input(episode, call):
    """ToolGate's controller input ``[1, 384 + structural]`` for the pending ``call``."""
    # why here: torch, numpy and the featurizer (MiniLM's tables) load with the first decision, never for a reader
    # of the registry (a server that only proxies)
    import numpy as np
    import torch

    from ..features.toolgate import embed_texts, toolgate_state

    text, structural = toolgate_state(episode, call)
    return FEATURIZER.controller_input({"embedding": torch.from_numpy(embed_texts([text])),
                                        "structural": torch.from_numpy(np.asarray(structural)[None])})


def warmup() -> None:
    """Load the MiniLM encoder (~4-5 s here) so a server's first decision does not pay for it."""
    from ..features.toolgate import embed_texts

    embed_texts(["warm-up"])


@dataclass
class ToolGateLogisticArgs:
    """ToolGateLogistic takes no constructor arguments besides its contract."""


GATE = Gate(
    name="toolgate", kind="flip", featurizer=FEATURIZER,
    labeler="data_builders.points.labelers:label_flip",
    replay="data_builders.capture.replay:replay_flip",
    label_rule=lambda cfg: ("label=1 (execute) iff forced answer wrong before the tool output and right after, and "
                            "the episode ends correct"),
    controller="toolgate_logistic", args=ToolGateLogisticArgs, moment="pre_call", run_input=run_input,
    on_error=("execute", "skip"),
    card_action="execute the pending tool call (else it is skipped with a no-op tool message)",
    warmup=warmup, checkpoint_help="the ToolGate controller",
)
