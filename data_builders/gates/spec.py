"""A gate's spec (:class:`Gate`) and the decision moments it can sit at; the registry that finds the specs is the
package (``data_builders.gates``), which every gate module imports this from."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable

from ..features import Featurizer

#: the decision moments a gate can sit at (the agent loop's hooks): each moment's pair of actions (p >= τ, p < τ)
#: and what it does with no gate there (the hook's default, which is also what a gate failing open applies)
MOMENTS: dict[str, dict[str, Any]] = {
    "pre_generation": {"actions": ("use", "skip"), "passes": "none"},      # none: no response prefill
    "pre_call": {"actions": ("execute", "skip"), "passes": "execute"},
    "on_answer": {"actions": ("continue", "commit"), "passes": "commit"},
}
#: how a server resolves a gate that raises (``gates.on_error``); each gate's action for each is its ``on_error``
ON_ERROR_MODES = ("open", "closed")


def _identity(action: str, **_: Any) -> str:
    return action


@dataclass(frozen=True)
class Gate:
    name: str                   # recipe, checkpoint directory, arm, runtime-API / endpoint gate
    kind: str                   # decision-point kind (data_builders.build kind=...)
    featurizer: Featurizer      # build time = run time
    labeler: str                # "module:function" building a shard's points (see data_builders/points/labelers.py)
    label_rule: Callable[[Any], str]    # the build settings -> the label rule, in words (the manifest records it)
    controller: str             # controllers.REGISTRY name of the class the recipe fits
    args: type                  # the dataclass of that class's constructor arguments (``recipe.controller``)
    moment: str                 # MOMENTS key: the agent-loop hook the gate's run-time hook answers
    # the controller's input ``[1, ...]`` from that moment's state (the hook's arguments after the task:
    # (PromptState,) | (EpisodeView, call) | (EpisodeView, answer_text)), through ``featurizer``
    run_input: Callable[..., Any]
    on_error: tuple[str, str]   # per ON_ERROR_MODES: open lets the turn through as if no gate were there
    card_action: str            # the model card's "p >= τ means ..."
    # optional parts -------------------------------------------------------------------------------------------
    # "module:function" labelling captured moments of its kind without gold (data_builders/capture/replay.py):
    # ``python -m data_builders.build source=capture kind=<kind>``; "" = the gate cannot learn from captured traffic
    replay: str = ""
    label: str = ""             # its name in the evaluator's arm names and cache keys (default: name)
    # the hook's return value for an action and the hook's options (default: the action itself); the probe's
    # is the response prefill of its style
    act: Callable[..., Any] = _identity
    options: dict = field(default_factory=dict)       # the hook's options at the gate's defaults (e.g. style)
    hidden_layers: Callable[[Any], list[int]] | None = None   # pre_generation: the layers its controller reads
    warmup: Callable[[], Any] | None = None            # what its first decision would load lazily (a server warms it)
    reads_token_counts: bool = False     # the runtime API needs the policy's tokenizer for messages without usage
    reads_logprobs: bool = False         # the endpoint requests token log-probs from the upstream for it
    one_point_per_task: bool = False     # its labeler yields exactly one point per task (a build checks it)
    recipe_fields: tuple = ()            # more recipe fields: (name, type, dataclasses.field)
    evaluate: Any = None                 # the evaluator arm's config dataclass (default: checkpoint + τ grid)
    checkpoint_help: str = ""            # ``checkpoints.<name>`` in words
    # at run time (runtime API, endpoint, guardrail), an input with a feature further than this many training
    # standard deviations from the training mean gets the open action, reason "out_of_support" (None: always decide)
    support_z: float | None = None

    def __post_init__(self):
        if self.moment not in MOMENTS:
            raise ValueError(f"gate {self.name!r}: moment {self.moment!r} is not one of {sorted(MOMENTS)}")
        allowed = set(MOMENTS[self.moment]["actions"]) | {MOMENTS[self.moment]["passes"]}
        if len(self.on_error) != len(ON_ERROR_MODES) or not set(self.on_error) <= allowed:
            raise ValueError(f"gate {self.name!r}: on_error {self.on_error} must be among {sorted(allowed)}")
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def actions(self) -> tuple[str, str]:
        """What the gate's hook decides when the controller's probability is at or above τ, and below it."""
        return MOMENTS[self.moment]["actions"]

    @property
    def labeler_fn(self) -> Callable:
        module, func = self.labeler.split(":")
        return getattr(import_module(module), func)

    @property
    def replay_fn(self) -> Callable:
        if not self.replay:
            raise ValueError(f"gate {self.name!r} (kind {self.kind}) has no replay labeler: its points cannot be "
                             f"built from captured traffic (source=capture)")
        module, func = self.replay.split(":")
        return getattr(import_module(module), func)
