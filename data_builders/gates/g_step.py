"""G-STEP (arXiv 2605.00136): an MLP continue/commit gate on a fixed-length vector of trajectory, answer and
log-prob statistics, read when the policy gives a final answer: commit it, or continue with one verification
round."""
from __future__ import annotations

from dataclasses import dataclass

from ..config_fields import param
from ..features import Featurizer
from .spec import Gate

FEATURIZER = Featurizer("commit", "gstep")
LABEL_RULES = {"wrong": "label=1 (continue) iff the answer at the decision is wrong",
               "fixed": "label=1 (continue) iff the answer is wrong and one injected verification round makes it right"}


def label_rule(cfg) -> str:
    rule = cfg.get("commit_label", "wrong")
    if rule not in LABEL_RULES:
        raise ValueError(f"commit_label={rule!r}: choose one of {sorted(LABEL_RULES)}")
    return LABEL_RULES[rule]


def run_input(episode, answer_text: str):
    """G-STEP's controller input ``[1, N_FEATURES]`` for the answer ``answer_text``."""
    import numpy as np   # why here: with torch, loaded by the first decision, never by a reader of the registry
    import torch

    from ..features.gstep import gstep_features

    return FEATURIZER.controller_input(
        {"features": torch.from_numpy(np.asarray(gstep_features(episode, answer_text))[None])})


@dataclass
class GStepMLPArgs:
    hidden: int = param(32, "hidden units: the best validation AUROC of recipes/sweep/g_step.yaml on When2Tool "
                            "(docs/results.md)", ge=1)
    depth: int = param(1, "hidden layers", ge=1)
    dropout: float = param(0.1, "dropout between layers", ge=0, lt=1)


GATE = Gate(
    name="g_step", kind="commit", featurizer=FEATURIZER,
    labeler="data_builders.points.labelers:label_commit", label_rule=label_rule,
    replay="data_builders.capture.replay:replay_commit",
    controller="gstep_mlp", args=GStepMLPArgs, moment="on_answer", run_input=run_input,
    on_error=("commit", "continue"),
    card_action="continue with a verification round (else the answer is committed)",
    reads_token_counts=True, reads_logprobs=True, checkpoint_help="the G-STEP controller",
    # held-out When2Tool answers, boxed or plain, lie within 6.1 training standard deviations of the reference's
    # training mean (p99 5.3); a short tool-free chat lies 8.9-9.6 out (no call, a 37-token context where every
    # training episode called a tool over ~1,300 tokens), where the MLP extrapolated to p = 1 and sent every plain
    # chat answer back for verification (benchmarks/gstep_plain_answers.py, docs/results.md)
    support_z=8.0,
)
