"""Probe&Prefill (When2Tool, arXiv 2605.09252): a linear probe on the policy's hidden states of the first prompt,
read before generation starts; its decision picks a response prefill — soft: a first-person sentence the model may
still overrule; hard: a forced prefix that commits it to a call or an answer
(docs/guide.md#when2tool-the-probe-pipeline)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from ..config_fields import param, tau_values
from ..features import Featurizer
from ..protocol import ANSWER_PREFILL, CALL_PREFILL, PREFILL_STYLES
from .spec import Gate

SOFT_PREFILL = {"skip": "I can solve this directly without using a tool.\n",
                "use": "I need to use a tool for this question.\n"}
HARD_PREFILL = {"skip": ANSWER_PREFILL, "use": CALL_PREFILL}
FEATURIZER = Featurizer("probe", "probe")


def prefill_text(decision: str, style: str = "soft", call_format: str = "xml") -> str | None:
    """The response prefill for a decision ("use" | "skip"; "none", the gate failing open: no prefill)."""
    if decision == "none":
        return None
    if style == "soft":
        return SOFT_PREFILL[decision]
    if style == "hard":
        text = HARD_PREFILL[decision]
        return text[call_format] if isinstance(text, dict) else text
    raise ValueError(f"prefill style {style!r}: choose one of {PREFILL_STYLES}")


def run_input(state):
    """The probe's controller input ``[1, layers, d]`` from the prefill's hidden states (a PromptState)."""
    import torch   # why here: a server that only proxies (no gate loaded) never loads torch

    return FEATURIZER.controller_input({"hidden": torch.as_tensor(state.hidden)[None]})


@dataclass
class LinearProbeArgs:
    layers: Optional[List[int]] = param(None, "hidden-state layers read; null = all layers")


@dataclass
class ProbeBaselines:
    """What Probe&Prefill is reported beside."""
    single_layer: bool = param(True, "the best single-layer probe")
    bag_of_words: bool = param(True, "a bag-of-words logistic regression on the instruction")
    bow_C: float = param(1.0, "its inverse regularisation strength", gt=0)


@dataclass
class ProbeArm:
    checkpoint: Optional[str] = param(None, "an exported probe_prefill checkpoint (default: "
                                            "checkpoints.probe_prefill); null: the arm is off")
    styles: List[str] = param(["soft", "hard"], "response prefills: soft (a sentence) | hard (a forced prefix)",
                              items=PREFILL_STYLES)
    taus: List[Any] = param([0.1, 0.3, 0.5, 0.7, 0.9], "numbers or calibrated (the checkpoint's own τ; OmegaConf "
                                                          "has no float | str); every τ is its own rollout",
                               check=tau_values)


GATE = Gate(
    name="probe_prefill", kind="probe", featurizer=FEATURIZER,
    labeler="data_builders.points.labelers:label_probe",
    replay="data_builders.capture.replay:replay_probe",
    label_rule=lambda cfg: "label=1 (tool needed) iff the policy's greedy hard_no_tool episode is incorrect",
    controller="linear_probe", args=LinearProbeArgs, moment="pre_generation", run_input=run_input,
    # failing open adds no prefill at all ("none": the policy writes its first turn unprompted)
    on_error=("none", "skip"),
    card_action="call tools for this task (else the response is prefilled to answer directly)",
    label="probe", act=lambda action, style="soft", call_format="xml": prefill_text(action, style, call_format),
    options={"style": "soft"},
    hidden_layers=lambda controller: list(range(controller.contract["input_shape"][0])),
    one_point_per_task=True,
    recipe_fields=(("baselines", Optional[ProbeBaselines], param(ProbeBaselines(), "null: the probe alone")),),
    evaluate=ProbeArm,
    checkpoint_help="the Probe&Prefill controller",
)
