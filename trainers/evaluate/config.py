"""The evaluator's entry configs (``evaluate``, ``factorized``) and its arms: what trainers.evaluate reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from omegaconf import DictConfig

from data_builders.agent.config import AgentSettings
from data_builders.agent.prompts import MODES, PROMPT_MODES
from data_builders.backends.config import ModelConfig
from data_builders.config import per_gate, PolicyGroups
from data_builders.gates import gates
from data_builders.config_fields import param, required, tau_values
from data_builders.metrics.config import HardwareConfig, PTESettings
from data_builders.tasks.distractors import DISTRACTOR_KINDS
from data_builders.tasks.schema import SPLITS
from recipes.schema import store
from trainers.config import overridden

# the conditions factorized.py owns, by name: read when a config is checked (recipes.schema.vocabulary)
CONDITIONS = "trainers.evaluate.factorized:CONDITIONS"


@dataclass
class GateArm:
    checkpoint: Optional[str] = param(None, "an exported checkpoint of the arm's gate (default: checkpoints.<gate>); "
                                            "null: the arm is off")
    taus: List[Any] = param(["calibrated"], "numbers or calibrated (the checkpoint's own τ); every τ is its own "
                                            "rollout", check=tau_values)


@dataclass
class ArmsBase:
    """The evaluator's arms: every one runs on the same tasks with the same policy and decoding. ``arms.<gate>``:
    a gate's arm, on when it has a checkpoint (``checkpoints.<gate>`` by default: the committed reference gates, or
    one given on the command line); null leaves it out."""
    # sparse is left out: the default policy (tool_sft v3) reads "use tools sparingly" as no_tool, 0.06 calls per
    # task (docs/results.md#the-when2tool-comparison), so it measured nothing no_tool does not
    modes: List[str] = param(["force", "default", "necessary", "no_tool"], "prompt-mode baselines (add sparse "
                                                                         "to run it)", items=PROMPT_MODES)
    reasoning: List[bool] = param([False], "add true for each mode with Reason-then-Act")
    constrained_calls: List[bool] = param([False], "add true for each mode with schema-constrained calls "
                                                   "(<mode>+cc, needs xgrammar)")
    cascade: bool = param(True, "every gate arm's gate together, each at its calibrated τ and default options "
                                "(the probe: soft), when there are two or more")
    # Free-form: each entry's {name, model} is that arm's cache key as written, so no schema may fill in
    # model defaults (it would move every cached policy arm to a new key).
    policies: List[Any] = param([], "more policies as arms (default mode), e.g. [{name: pte_grpo, model: {name: "
                                    "smollm2, adapter: '${checkpoints.pte_grpo}'}}]")
    strict_contracts: bool = param(True, "refuse a controller trained on another policy's features")


Arms = per_gate("Arms", lambda g: (Optional[g.evaluate or GateArm],
                                   param((g.evaluate or GateArm)(checkpoint=f"${{checkpoints.{g.name}}}"),
                                         f"the {g.name} arm (on when it has a checkpoint); null to leave out")),
                base=ArmsBase)


@dataclass
class ReportGroups(PolicyGroups):
    """evaluate and factorized: a policy, one decoding, PTE pricing, a report logged to ``logger``."""
    agent: AgentSettings = required("one decoding for every arm: the agent group")   # type: ignore[valid-type]
    pte: PTESettings = required("how trajectories are priced: the pte group")        # type: ignore[valid-type]
    hardware: HardwareConfig = required("PTE's γ: the hardware group")             # type: ignore[valid-type]
    logger: Any = required("where the report is logged: the logger group")
    split: str = param("test", "the task split", choices=SPLITS)
    limit: Optional[int] = param(16, "first N tasks, interleaved over environment x difficulty; null = all")
    cache_dir: str = param("outputs/eval_cache", "trajectories cached per (task, arm, policy, decoding)")
    out_dir: str = param("${hydra:runtime.output_dir}", "the report")


@dataclass
class Bootstrap:
    """A paired percentile bootstrap over tasks (all conditions, or an arm and the reference, share the resample)."""
    replicates: int = param(2000, "resamples", ge=1)
    seed: int = param(0, "the resampling seed")
    level: float = param(0.95, "the intervals' confidence level", gt=0, lt=1)


@dataclass
class EvaluateConfig(ReportGroups):
    executor: Any = required("where shards of tasks run: the executor group (local | ray)")
    arms: Arms = param(Arms(), "the arms")
    reference: str = param("default", "ΔAcc, ΔTC and ΔAcc/−ΔTC are taken against this arm (When2Tool's Table 3)")
    bootstrap: Bootstrap = param(Bootstrap(), "intervals of accuracy, calls and PTE per arm and of their deltas "
                                              "against the reference (paired over tasks)")
    exclude_points: List[str] = param([], "decision-point datasets whose tasks (every split, by task id) are left "
                                          "out: score controllers on tasks they were not fit or calibrated on, e.g. "
                                          "split=train with a larger train draw (tasks.train_n_per_*) to choose τ "
                                          "without the test split")


@dataclass
class FactorizedConfig(ReportGroups):
    distractors: List[Optional[str]] = param([None, "thematic", "parallel_entity", "hedged", "paraphrase"],
                                             "distractor settings; null = the clean problem",
                                             items=(None,) + DISTRACTOR_KINDS)
    conditions: Optional[List[str]] = param(None, "the conditions, each an evaluator arm; null: every one "
                                                  "(trainers/evaluate/factorized.py)", items=CONDITIONS)
    tool_mode: str = param("force", "the prompt mode of every tool condition (force | default | necessary | "
                                    "sparse)", choices=MODES)
    bootstrap: Bootstrap = param(Bootstrap(), "confidence intervals")

    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        source = cfg.tasks.source
        out = [] if source == "gsm8k" else [f"tasks={source} (the factorized framework runs on GSM8K problems: "
                                            f"tasks=gsm8k tasks.path=<file.jsonl>)"]
        return out + [f"{key} (each setting of `distractors` chooses the distractor)"
                      for key in overridden(keys, "tasks.distractor")]


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
@dataclass
class ShadowCapture:
    dir: Optional[str] = param(None, "the capture directory the endpoint (or the LiteLLM guardrail) wrote (capture.dir)")


ShadowLabels = per_gate("ShadowLabels", lambda g: (Optional[str], param(
    None, f"the gold-free {g.kind} points built from the same capture (python -m data_builders.build source=capture "
          f"kind={g.kind} capture.dir=... out_dir=...): the {g.name} row's accuracy estimate; null = no estimate")),
    doc="Per gate, its gold-free decision points from the captured traffic.")


@dataclass
class ShadowConfig:
    """``python -m trainers.evaluate.shadow``: what enforcing each gate would have done to captured traffic."""
    capture: ShadowCapture = param(ShadowCapture(), "the captured traffic")
    labels: ShadowLabels = param(ShadowLabels(), "per gate: gold-free decision points of the capture")  # type: ignore[valid-type]
    model: ModelConfig = required("the captured policy (its config gives PTE's γ; no weights are loaded)")
    pte: PTESettings = required("how turns are priced: the pte group")        # type: ignore[valid-type]
    hardware: HardwareConfig = required("PTE's γ: the hardware group")       # type: ignore[valid-type]
    logger: Any = required("where the report is logged: the logger group")
    bootstrap: Bootstrap = param(Bootstrap(), "the accuracy estimate's interval (over conversations)")
    out_dir: str = param("${hydra:runtime.output_dir}", "the report")


@dataclass
class PromoteTolerance:
    auroc: float = param(0.0, "refuse a candidate whose AUROC is below the serving gate's by more than this", ge=0)
    accuracy: float = param(0.01, "refuse a candidate whose estimated accuracy change is below the serving gate's by "
                                  "more than this", ge=0)


@dataclass
class PromoteReload:
    endpoint: Optional[str] = param(None, "the endpoint's base URL (http://host:port): POST /admin/reload after install")
    admin_env: str = param("TOOLWISE_ADMIN_KEY", "the variable holding the endpoint's admin key")
    enforce: bool = param(False, "with endpoint: the reload also puts the gate in enforce mode (out of shadow)")
    pid: Optional[int] = param(None, "or: the endpoint's pid, sent SIGHUP after install")
    timeout_s: float = param(120.0, "the reload request's timeout (loading a gate takes seconds)", gt=0)


@dataclass
class PromoteConfig:
    """``python -m trainers.evaluate.promote``: install a refit gate only if it is no worse than the serving one on
    held-out captured traffic (trainers/evaluate/promote.py)."""
    gate: str = required("the gate (data_builders.gates): " + " | ".join(gates()), choices=tuple(gates()))
    candidate: str = required("the refit controller's checkpoint directory")
    serving: str = required("the path the endpoint's gates.<gate> names (a symlink or a checkpoint directory)")
    points: str = required("gold-free decision points of the gate's kind built from the captured traffic")
    split: str = param("test", "the held-out split they are compared on", choices=SPLITS)
    strict: bool = param(True, "refuse a controller trained on another policy's features than the points'")
    tolerance: PromoteTolerance = param(PromoteTolerance(), "how much worse a candidate may be")
    reload: PromoteReload = param(PromoteReload(), "how the endpoint learns of the new gate")
    dry_run: bool = param(False, "compare only")
    bootstrap: Bootstrap = param(Bootstrap(), "intervals over held-out moments")
    out_dir: str = param("${hydra:runtime.output_dir}", "promote.json")


SCHEMAS = [
    (None, "evaluate_schema", EvaluateConfig),
    (None, "promote_schema", PromoteConfig),
    (None, "factorized_schema", FactorizedConfig),
    (None, "shadow_schema", ShadowConfig),
]
store(SCHEMAS)
