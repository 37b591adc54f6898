"""The data_builders commands' entry configs (``build``, ``rollout``, ``oracle``, ``sft_data``) and the groups every
command shares: the committed checkpoints, the executors, the sandbox."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, List, Optional

from omegaconf import DictConfig

# the groups these entry configs select by their defaults lists (``tasks``, ``hardware``, ``pte``: typed by each
# option's schema), stored on import with this module's
import data_builders.metrics.config  # noqa: F401
import data_builders.tasks.config  # noqa: F401
from data_builders.agent.config import AgentSettings
from data_builders.agent.prompts import CALL_FORMATS, PROMPT_MODES
from data_builders.backends.config import ModelConfig
from data_builders.config_fields import param, required
from data_builders.gates import gates
from data_builders.tasks import SOURCE_ENVS
from data_builders.tasks.schema import DIFFICULTIES, SPLITS
from recipes.schema import store

BUILD_KINDS = tuple(gate.kind for gate in gates().values())   # the decision-point kinds, one per gate


@dataclass
class SandboxConfig:
    """Where model-written code runs (data_builders/environments/sandbox.py; docs/sandbox.md)."""
    require_isolation: bool = param(False, "true: refuse to run model-written code without the OS boundary "
                                           "(namespaces and seccomp), naming what is missing and how to enable it")


@dataclass
class CaptureSource:
    """``source=capture``: decision moments from the endpoint's (or the LiteLLM guardrail's) ``capture.dir``
    (data_builders/capture/)."""
    dir: Optional[str] = param(None, "the capture directory (capture-*.jsonl)")
    test_fraction: float = param(0.2, "share of conversations held out as the test split (by a hash of the "
                                      "conversation's first request id); val_fraction of the rest is val", ge=0, lt=1)


@dataclass
class LocalExecutorConfig:
    """``executor=local``: every shard in this process on one engine (data_builders/executors.py)."""
    name: str = param("local", "the executor", choices=("local",))


@dataclass
class RayExecutorConfig:
    """``executor=ray``: shards on Ray actors, one engine each (data_builders/executors.py)."""
    name: str = param("ray", "the executor", choices=("ray",))
    address: Optional[str] = param(None, "null = start a local cluster | auto = join the running one | host:port "
                                         "| ray://host:10001")
    workers: int = param(2, "actors, each loading one engine", ge=1)
    num_gpus: float = param(0.0, "per worker: 1 = a GPU each, 0.5 = two engines per GPU (vLLM: also lower "
                                 "gpu_memory_utilization)", ge=0)
    num_cpus: float = param(1.0, "per worker", gt=0)
    torch_threads: Optional[int] = param(None, "per worker; null = num_cpus (at least 1), so workers do not "
                                               "oversubscribe the cores", ge=1)
    max_retries: int = param(2, "times a shard whose worker died (killed, OOM, node lost) is redone, then an "
                                "error", ge=0)
    shard_size: Optional[int] = param(None, "evaluate/rollout: tasks per unit of work; null = an arm's tasks "
                                            "spread evenly over workers", ge=1)
    connect_timeout_s: float = param(30.0, "an address that cannot be reached fails after this long", gt=0)


@dataclass
class PolicyCheckpoints:
    """``checkpoints``: the committed reference checkpoints (trained on the embedded policy); an option lists
    its release paths (checkpoints/reference.yaml)."""
    tool_sft: str = required("the default policy's adapter: one of the tool_sft releases below")
    tool_sft_v1: str = required("tool_sft v1 (call demonstrations only)")
    tool_sft_v2: str = required("tool_sft v2 (the v2 mixture)")
    tool_sft_v3: str = required("tool_sft v3 (v2 continued on the v3 mixture)")
    pte_grpo: str = required("the pte_grpo policy adapter")


def per_gate(cls_name: str, make_field, base: type | None = None, doc: str = "") -> type:
    """A config dataclass with one field per gate of the registry, named by the gate (``checkpoints.<gate>``,
    ``arms.<gate>``, ``gates.<gate>``, ``gates.taus.<gate>``); ``make_field(gate)`` gives (type, field)."""
    fields = [(g.name, *make_field(g)) for g in gates().values()]
    cls = dataclasses.make_dataclass(cls_name, fields, bases=(base,) if base else ())
    cls.__module__, cls.__doc__ = __name__, doc or (base.__doc__ if base else None)
    return cls


# each gate's controller (checkpoints/reference.yaml sets the committed ones; null: none committed)
CheckpointsConfig = per_gate("CheckpointsConfig", lambda g: (Optional[str], param(None, g.checkpoint_help or
                                                                                   f"the {g.name} controller")),
                             base=PolicyCheckpoints)


# ``backend``, ``tasks``, ``logger`` and ``recipe`` are ``Any``: their options have different shapes, and the
# option's own schema (its defaults list) types the node.
@dataclass
class PolicyGroups:
    model: ModelConfig = required("the policy: the model group (recipes/model/)")
    backend: Any = required("its engine: the backend group (recipes/backend/)")
    tasks: Any = required("the tasks: the tasks group (recipes/tasks/)")
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    sandbox: SandboxConfig = param(SandboxConfig(), "the sandbox of the environments that run model-written code")


@dataclass
class BuildConfig(PolicyGroups):
    #: the agent settings a build reads (its episodes are greedy, one per task and kind, with the loop's own limits)
    AGENT_KEYS: ClassVar[tuple] = ("max_rounds", "max_new_tokens", "call_format", "verify_rounds")

    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        """An override of an agent setting the build does not read (its labels come from greedy episodes)."""
        return [f"{key} (data_builders.build reads only agent.{', agent.'.join(cls.AGENT_KEYS)})"
                for key in keys if key.startswith("agent.") and key.split(".")[1] not in cls.AGENT_KEYS]

    executor: Any = required("where shards of tasks run: the executor group (local | ray)")
    kind: str = param(BUILD_KINDS[0], "the decision-point kind, one per gate (data_builders.gates): "
                               + " | ".join(BUILD_KINDS), choices=BUILD_KINDS)
    splits: List[str] = param(["train", "test"], "task splits to build; a val split is carved out of train by "
                                                 "task id", items=SPLITS)
    val_fraction: float = param(0.15, "share of train tasks assigned to val", ge=0, lt=1)
    seed: int = param(0, "val assignment")
    limit: Optional[int] = param(None, "first N tasks per split (interleaved over environment x difficulty); null "
                                       "= all")
    shard_size: int = param(32, "tasks per shard (= per batched rollout); part of the dataset's identity", ge=1)
    agent: AgentSettings = required(  # type: ignore[valid-type]
        "the agent group: the build reads its rounds, tokens, call format and verification rounds (labels come from "
        "greedy episodes)")
    feature_mode: str = param("default", "probe: the prompt mode the deployed probe reads", choices=PROMPT_MODES)
    layers: Optional[List[int]] = param(None, "probe: hidden-state indices (null = all)")
    forced_answer_tokens: int = param(24, "flip: tokens generated after the forced \\boxed{", ge=1)
    commit_mode: str = param("default", "commit: the prompt mode of its rollouts", choices=PROMPT_MODES)
    commit_label: str = param("wrong", "commit: wrong (continue iff the answer is wrong) | fixed (... and "
                                       "verification fixes it)", choices=("wrong", "fixed"))
    free_labels: bool = param(False, "also label every point without its gold answer (column free_label, by "
                                     "agreement: data_builders/points/free_labels.py), to measure those labels "
                                     "against gold and fit on them (recipe.points.label=free_label)")
    agreement_scorer: Optional[Any] = param(None, "gold-free labels: how two answers are compared where no task "
                                                  "scorer is known (source=capture); null = When2Tool's comparison of "
                                                  "the boxed answers | a scorer spec, e.g. {kind: judge, base_url: "
                                                  "..., model: ...}")
    source: str = param("tasks", "tasks: run the policy on the tasks group | capture: replay the decision moments "
                                 "of captured traffic (capture.dir) and label them without gold",
                        choices=("tasks", "capture"))
    capture: CaptureSource = param(CaptureSource(), "source=capture: the captured traffic")
    out_dir: Optional[str] = param(None, "the dataset directory; null = outputs/points/<kind>/<tasks.source> "
                                         "(source=capture: outputs/points/<kind>/capture)")
    overwrite: bool = param(False, "true: delete an existing build in out_dir instead of resuming it")


@dataclass
class RolloutConfig(PolicyGroups):
    executor: Any = required("where shards of tasks run: the executor group (local | ray)")
    agent: AgentSettings = required("decoding and rounds: the agent group")   # type: ignore[valid-type]
    mode: str = param("default", "the prompt mode: force | default | necessary | sparse | no_tool | hard_no_tool | "
                                 "cot")
    reasoning: bool = param(False, "Reason-then-Act")
    split: str = param("test", "the task split", choices=SPLITS)
    limit: Optional[int] = param(None, "first N tasks, interleaved over environment x difficulty; null = all")
    out_dir: str = param("${hydra:runtime.output_dir}", "trajectories (JSONL) and the summary")


@dataclass
class OracleConfig:
    tasks: Any = required("the tasks: the tasks group")
    split: str = param("test", "the task split", choices=SPLITS)
    limit: Optional[int] = param(None, "first N tasks; null = all")
    out_dir: str = param("${hydra:runtime.output_dir}", "oracle_runs.jsonl: one record per task")


@dataclass
class DirectAnswers:
    """Cells that also get a direct-answer (no tool) example."""
    difficulties: Optional[List[str]] = param(["easy"], "null = every difficulty", items=DIFFICULTIES)
    envs: Optional[List[str]] = param(None, "null = every single-hop environment", items=SOURCE_ENVS["when2tool"])


@dataclass
class SFTDataConfig:
    tasks: Any = required("the tasks: the tasks group")
    split: str = param("train", "only train: test tasks never enter training data", choices=SPLITS)
    limit: Optional[int] = param(None, "first N tasks; null = all")
    modes: List[str] = param(["default"], "prompt modes to render each demonstration in", items=PROMPT_MODES)
    reasoning: bool = param(False, "Reason-then-Act demonstrations")
    call_format: str = param("xml", "the tool-call format demonstrated", choices=CALL_FORMATS)
    direct: DirectAnswers = param(DirectAnswers(), "direct answers")
    out_dir: str = param("${hydra:runtime.output_dir}", "the chat data")


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("checkpoints", "schema", CheckpointsConfig),
    ("executor", "local_schema", LocalExecutorConfig),
    ("executor", "ray_schema", RayExecutorConfig),
    (None, "build_schema", BuildConfig),
    (None, "rollout_schema", RolloutConfig),
    (None, "oracle_schema", OracleConfig),
    (None, "sft_data_schema", SFTDataConfig),
]
store(SCHEMAS)
