"""The evaluator's entry configs (``evaluate``, ``factorized``) and its arms: what trainers.evaluate reads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from omegaconf import DictConfig

from data_builders.agent.config import AgentSettings
from data_builders.agent.prompts import MODES, PROMPT_MODES
from data_builders.config import per_gate, PolicyGroups
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
SCHEMAS = [
    (None, "evaluate_schema", EvaluateConfig),
    (None, "factorized_schema", FactorizedConfig),
]
store(SCHEMAS)
