"""Structured configs: a dataclass for each shape of config group option and for each entry config, stored in
Hydra's ConfigStore.

Every YAML file in ``recipes/`` extends its schema through its defaults list (Hydra's "structured config schema"
pattern: ``defaults: [<schema>, _self_]``, the schema stored under the group), so a misspelt key, a key the
schema does not have, or a value of the wrong type fails when Hydra composes the config, before any model loads.

Where each value lives (every default is written once):

* a dataclass the code already runs on is the truth for its fields and their defaults: the ``agent`` group is
  :class:`data_builders.agent.loop.AgentConfig`, the ``pte`` group :class:`data_builders.metrics.pte.PTEConfig`,
  a ``hardware`` profile :class:`data_builders.metrics.hardware.HardwareProfile` (their schemas are derived from
  them below, never copied);
* a default every option of a group shares is the dataclass field's default (``model``: dtype, batch limits);
* anything else is written in the one YAML file that uses it, and its field here is a type without a default.

A node typed ``Any`` or ``dict`` is free-form on purpose; each says why. Hydra's ``+key=value`` still adds a key
to a typed node (it opens the node for it); :func:`check_keys` refuses that too. It runs in
:func:`recipes.compose` and, through :class:`CheckKeys` in ``hydra/settings.yaml``, before every Hydra job.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from hydra.experimental.callback import Callback
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from data_builders.agent.loop import AgentConfig
from data_builders.metrics.hardware import HardwareProfile
from data_builders.metrics.pte import PTEConfig


def derived(cls: type, name: str, exclude: tuple[str, ...] = ()) -> type:
    """A config dataclass with ``cls``'s fields, types and defaults (so they stay written once, in ``cls``), less
    ``exclude``. Needed because a runtime dataclass cannot be a schema as is: it may be frozen (read-only
    nodes refuse overrides) or carry fields that another group holds."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        default = (field(default_factory=f.default_factory) if f.default_factory is not dataclasses.MISSING
                   else field(default=MISSING if f.default is dataclasses.MISSING else f.default))
        fields.append((f.name, hints[f.name], default))
    schema = dataclasses.make_dataclass(name, fields)
    schema.__module__ = __name__     # (make_dataclass's module= needs Python 3.12)
    return schema


# ---------------------------------------------------------------------------------------------- groups
@dataclass
class ModelConfig:
    """``model``: the policy (``data_builders.backends.loading.backend_from_config``)."""
    name: str = MISSING                 # hub id | local directory | .gguf path | "smollm2" (the embedded default)
    gguf_file: Optional[str] = None     # a file inside a hub repo or directory named by ``name``
    adapter: Optional[str] = None       # a peft LoRA directory loaded over the base
    # auto = bfloat16 on a CUDA device with native bf16, else float32 (data_builders.backends.loading.resolve_dtype);
    # or float32 | bfloat16 | float16
    dtype: str = "auto"
    max_batch_size: int = 32
    max_batch_tokens: int = 16384       # padded tokens per forward; long prompts get smaller batches
    device: str = "auto"                # auto = CUDA when available, else CPU


@dataclass
class TrainerConfig:
    """``trainer``: where and how Lightning runs a controller fit (``lightning.Trainer`` arguments of the same
    names; trainers/controller/training.py). The policy recipes (TRL) ignore it: ``accelerate launch`` places them."""
    accelerator: str = MISSING
    devices: Any = MISSING          # an int, "auto", or a list of device indices: Lightning takes each
    strategy: str = MISSING
    num_nodes: int = MISSING
    precision: str = MISSING


@dataclass
class HFBackendConfig:
    name: str = MISSING


@dataclass
class VLLMBackendConfig:
    name: str = MISSING
    max_model_len: Optional[int] = MISSING
    gpu_memory_utilization: float = MISSING
    tensor_parallel_size: int = MISSING
    pipeline_parallel_size: int = MISSING
    data_parallel_size: int = MISSING
    max_num_seqs: Optional[int] = MISSING
    enforce_eager: Optional[bool] = MISSING
    enable_prefix_caching: bool = MISSING
    cpu_kv_cache_gib: int = MISSING             # VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an integer
    cpu_threads: Optional[int] = MISSING
    probe_device: Optional[str] = MISSING
    seed: int = MISSING
    engine_kwargs: Dict[str, Any] = MISSING   # free-form: vllm.LLM's own keyword arguments, passed through


@dataclass
class OpenAIBackendConfig:
    name: str = MISSING
    base_url: str = MISSING
    served_model: Optional[str] = MISSING
    tokenizer: Optional[str] = MISSING
    api_key_env: str = MISSING
    max_concurrency: int = MISSING
    timeout_s: float = MISSING
    vllm_extras: bool = MISSING


@dataclass
class BuiltinTasksConfig:
    source: str = MISSING
    n_per_cell: int = MISSING
    seed: int = MISSING
    envs: Optional[List[str]] = MISSING
    difficulties: Optional[List[str]] = MISSING
    hops: str = MISSING


@dataclass
class When2ToolTasksConfig:
    source: str = MISSING
    path: Optional[str] = MISSING
    hops: str = MISSING
    hub_id: str = MISSING
    revision: Optional[str] = MISSING
    envs: Optional[List[str]] = MISSING
    difficulties: Optional[List[str]] = MISSING
    per_cell: Optional[int] = MISSING
    sample_seed: int = MISSING


@dataclass
class GSM8KTasksConfig:
    source: str = MISSING
    path: Optional[str] = MISSING
    distractor: Optional[str] = MISSING
    distractor_seed: int = MISSING
    envs: Optional[List[str]] = MISSING
    difficulties: Optional[List[str]] = MISSING
    per_cell: Optional[int] = MISSING
    sample_seed: int = MISSING


@dataclass
class LoggerConfig:
    """``logger=csv`` and ``logger=none``: a name and nothing else."""
    name: str = MISSING


@dataclass
class WandbLoggerConfig:
    name: str = MISSING
    project: str = MISSING
    group: Optional[str] = MISSING
    mode: str = MISSING


# ``hardware``: a PTE hardware profile; the YAML files are the registry (data_builders/metrics/hardware.py reads them).
HardwareConfig = derived(HardwareProfile, "HardwareConfig")
# ``agent``: the agent loop's settings less the two each run or arm chooses itself (prompt mode, Reason-then-Act).
AgentSettings = derived(AgentConfig, "AgentSettings", exclude=("mode", "reasoning"))
# ``pte``: how trajectories are priced; the profile is the ``hardware`` group.
PTESettings = derived(PTEConfig, "PTESettings", exclude=("hardware",))
# An agent loop with every setting (pte_grpo's training rollouts choose their prompt mode too).
AgentLoopConfig = derived(AgentConfig, "AgentLoopConfig")


@dataclass
class LocalExecutorConfig:
    """``executor=local``: every shard in this process on one engine (data_builders/executors.py)."""
    name: str = MISSING


@dataclass
class RayExecutorConfig:
    """``executor=ray``: shards on Ray actors, one engine each (data_builders/executors.py)."""
    name: str = MISSING
    address: Optional[str] = MISSING        # null = start a local cluster | auto | host:port | ray://host:10001
    workers: int = MISSING                  # actors, each loading one engine
    num_gpus: float = MISSING               # per worker (0.5: two engines share a GPU)
    num_cpus: float = MISSING               # per worker
    torch_threads: Optional[int] = MISSING  # per worker (null = num_cpus, at least 1)
    max_retries: int = MISSING              # times a shard whose worker died is redone
    shard_size: Optional[int] = MISSING     # evaluate/rollout tasks per unit of work (null = spread over workers)
    connect_timeout_s: float = MISSING      # an unreachable address fails after this long


@dataclass
class CheckpointsConfig:
    """``checkpoints``: the committed reference checkpoints (trained on the embedded policy)."""
    tool_sft: str = MISSING                 # the default policy's adapter: one of the releases below
    tool_sft_v1: str = MISSING
    tool_sft_v2: str = MISSING
    tool_sft_v3: str = MISSING
    probe_prefill: str = MISSING
    toolgate: str = MISSING
    g_step: str = MISSING
    pte_grpo: str = MISSING


# ---------------------------------------------------------------------------------------------- recipes
@dataclass
class LoraConfig:
    r: int = MISSING
    alpha: int = MISSING
    dropout: float = MISSING
    target_modules: Any = MISSING   # "all-linear" or a list of module names: peft takes either


@dataclass
class SFTDirectRule:                      # data_builders.oracle.sft.DirectRule
    modes: List[str] = MISSING
    difficulties: List[str] = MISSING
    fraction: float = MISSING
    multi_step: bool = False
    categories: Optional[List[str]] = None   # A B C M; null = every category


@dataclass
class SFTData:
    builtin_per_cell: int = MISSING
    when2tool_path: Optional[str] = MISSING
    when2tool_per_cell: Optional[int] = MISSING
    hops: str = MISSING
    tool_modes: List[str] = MISSING
    direct: List[SFTDirectRule] = MISSING
    call_format: str = MISSING
    val_fraction: float = MISSING
    max_length: int = MISSING
    seed: int = MISSING


@dataclass
class SFTTrain:
    epochs: int = MISSING
    max_steps: int = MISSING
    lr: float = MISSING
    scheduler: str = MISSING
    warmup_ratio: float = MISSING
    batch_size: int = MISSING
    grad_accum: int = MISSING
    logging_steps: int = MISSING
    eval_steps: int = MISSING
    gradient_checkpointing: bool = MISSING
    bf16: bool = MISSING
    fp16: bool = MISSING
    seed: int = MISSING


@dataclass
class ToolSFTRecipe:
    name: str = MISSING
    output_dir: str = MISSING
    data: SFTData = MISSING
    lora: LoraConfig = MISSING
    train: SFTTrain = MISSING


@dataclass
class GRPOData:
    builtin_per_cell: int = MISSING
    difficulties: Optional[List[str]] = MISSING
    envs: Optional[List[str]] = MISSING
    when2tool_path: Optional[str] = MISSING
    when2tool_per_cell: Optional[int] = MISSING
    hops: str = MISSING
    seed: int = MISSING


@dataclass
class GRPOGeneration:
    prompts_per_step: int = MISSING
    num_generations: int = MISSING
    temperature: float = MISSING
    top_p: float = MISSING
    max_completion_length: int = MISSING
    use_vllm: bool = MISSING
    vllm_mode: str = MISSING
    vllm_server_base_url: Optional[str] = MISSING
    vllm_server_host: str = MISSING
    vllm_server_port: int = MISSING


@dataclass
class GRPOReward:
    kind: str = MISSING
    lam: float = MISSING
    normaliser: Any = MISSING       # "auto" or a number (OmegaConf has no str | float)
    otc_c: float = MISSING
    cache_reuse: bool = MISSING
    pte_params: str = MISSING


@dataclass
class GRPOTrain:
    max_steps: int = MISSING
    micro_batch: int = MISSING
    trainable_layers: Optional[int] = MISSING
    lr: float = MISSING
    bf16: bool = MISSING
    fp16: bool = MISSING
    gradient_checkpointing: bool = MISSING
    scheduler: str = MISSING
    warmup_steps: int = MISSING
    beta: float = MISSING
    loss_type: str = MISSING
    scale_rewards: str = MISSING
    seed: int = MISSING


@dataclass
class PTEGRPORecipe:
    name: str = MISSING
    output_dir: str = MISSING
    data: GRPOData = MISSING
    rollout: AgentLoopConfig = MISSING    # type: ignore[valid-type]
    generation: GRPOGeneration = MISSING
    reward: GRPOReward = MISSING
    lora: LoraConfig = MISSING
    train: GRPOTrain = MISSING


@dataclass
class Points:
    # no kind: the recipe's gate's decision-point kind (data_builders.gates), not a setting
    root: str = MISSING
    dir: Optional[str] = MISSING
    # Free-form: keys of the ``build`` entry config set for this recipe; trainers/controller/points.py merges
    # them onto the composed (typed) build config, so a misspelt key fails there.
    build: Dict[str, Any] = MISSING


@dataclass
class ControllerTrain:
    optimizer: str = MISSING
    lr: float = MISSING
    weight_decay: float = MISSING
    l2: float = MISSING
    batch_size: Optional[int] = MISSING
    max_epochs: int = MISSING
    lbfgs_max_iter: int = MISSING
    class_balance: bool = MISSING
    seed: int = MISSING


@dataclass
class Calibration:
    temperature: bool = MISSING
    tau_method: str = MISSING
    tau_value: float = MISSING


@dataclass
class ProbeBaselines:
    single_layer: bool = MISSING
    bag_of_words: bool = MISSING
    bow_C: float = MISSING


# The ``controller`` node holds the registry class's constructor arguments (controllers/), one shape per class; the
# class is the recipe's gate's (data_builders.gates), so the node does not name it.
@dataclass
class LinearProbeArgs:
    layers: Optional[List[int]] = MISSING


@dataclass
class ToolGateLogisticArgs:
    """ToolGateLogistic takes no constructor arguments besides its contract."""


@dataclass
class GStepMLPArgs:
    hidden: int = MISSING
    depth: int = MISSING
    dropout: float = MISSING


@dataclass
class ControllerRecipe:
    """probe_prefill, toolgate and g_step: one shape but for the controller's own arguments (and probe_prefill's
    baselines)."""
    name: str = MISSING
    export_dir: str = MISSING
    points: Points = MISSING
    controller: Any = MISSING
    train: ControllerTrain = MISSING
    calibration: Calibration = MISSING


@dataclass
class ProbePrefillRecipe(ControllerRecipe):
    controller: LinearProbeArgs = MISSING
    baselines: Optional[ProbeBaselines] = MISSING   # null: the probe alone


@dataclass
class ToolGateRecipe(ControllerRecipe):
    controller: ToolGateLogisticArgs = MISSING


@dataclass
class GStepRecipe(ControllerRecipe):
    controller: GStepMLPArgs = MISSING


# ---------------------------------------------------------------------------------------------- entry configs
# ``backend``, ``tasks``, ``logger`` and ``recipe`` are ``Any``: their options have different shapes, and the
# option's own schema (its defaults list) types the node.
@dataclass
class PolicyGroups:
    model: ModelConfig = MISSING
    backend: Any = MISSING
    tasks: Any = MISSING
    checkpoints: CheckpointsConfig = MISSING


@dataclass
class FitConfig:
    recipe: Any = MISSING
    model: ModelConfig = MISSING
    backend: Any = MISSING
    tasks: Any = MISSING
    logger: Any = MISSING
    hardware: HardwareConfig = MISSING    # type: ignore[valid-type]
    checkpoints: CheckpointsConfig = MISSING
    trainer: TrainerConfig = MISSING


@dataclass
class BuildConfig(PolicyGroups):
    executor: Any = MISSING               # local | ray: their own schemas type it
    kind: str = MISSING
    splits: List[str] = MISSING
    val_fraction: float = MISSING
    seed: int = MISSING
    limit: Optional[int] = MISSING
    shard_size: int = MISSING
    max_rounds: int = MISSING
    max_new_tokens: int = MISSING
    call_format: str = MISSING
    feature_mode: str = MISSING
    layers: Optional[List[int]] = MISSING
    forced_answer_tokens: int = MISSING
    verify_rounds: int = MISSING
    commit_mode: str = MISSING
    commit_label: str = MISSING
    out_dir: str = MISSING
    overwrite: bool = MISSING


@dataclass
class RolloutConfig(PolicyGroups):
    executor: Any = MISSING               # local | ray: their own schemas type it
    agent: AgentSettings = MISSING        # type: ignore[valid-type]
    mode: str = MISSING
    reasoning: bool = MISSING
    split: str = MISSING
    limit: Optional[int] = MISSING
    out_dir: str = MISSING


@dataclass
class ProbeArm:
    checkpoint: str = MISSING
    styles: List[str] = MISSING
    taus: List[Any] = MISSING             # numbers or "calibrated" (OmegaConf has no float | str)


@dataclass
class GateArm:
    checkpoint: str = MISSING
    taus: List[Any] = MISSING             # numbers or "calibrated"


@dataclass
class Arms:
    modes: List[str] = MISSING
    reasoning: List[bool] = MISSING
    # true: each mode arm again with agent.constrained_calls (named "<mode>+cc"); a default keeps older configs valid
    constrained_calls: List[bool] = field(default_factory=lambda: [False])
    probe: Optional[ProbeArm] = MISSING
    toolgate: Optional[GateArm] = MISSING
    g_step: Optional[GateArm] = MISSING
    cascade: bool = MISSING
    # Free-form: each entry's {name, model} is that arm's cache key as written, so no schema may fill in
    # model defaults (it would move every cached policy arm to a new key).
    policies: List[Any] = MISSING
    strict_contracts: bool = MISSING


@dataclass
class ReportGroups(PolicyGroups):
    """evaluate and factorized: a policy, one decoding, PTE pricing, a report logged to ``logger``."""
    agent: AgentSettings = MISSING        # type: ignore[valid-type]
    pte: PTESettings = MISSING            # type: ignore[valid-type]
    hardware: HardwareConfig = MISSING    # type: ignore[valid-type]
    logger: Any = MISSING
    split: str = MISSING
    limit: Optional[int] = MISSING
    cache_dir: str = MISSING
    out_dir: str = MISSING


@dataclass
class EvaluateConfig(ReportGroups):
    executor: Any = MISSING               # local | ray: their own schemas type it
    arms: Arms = MISSING
    reference: str = MISSING


@dataclass
class Bootstrap:
    replicates: int = MISSING
    seed: int = MISSING
    level: float = MISSING


@dataclass
class FactorizedConfig(ReportGroups):
    distractors: List[Optional[str]] = MISSING
    conditions: List[str] = MISSING
    tool_mode: str = MISSING
    bootstrap: Bootstrap = MISSING


@dataclass
class OracleConfig:
    tasks: Any = MISSING
    split: str = MISSING
    limit: Optional[int] = MISSING
    out_dir: str = MISSING


@dataclass
class DirectAnswers:
    difficulties: Optional[List[str]] = MISSING
    envs: Optional[List[str]] = MISSING


@dataclass
class SFTDataConfig:
    tasks: Any = MISSING
    split: str = MISSING
    limit: Optional[int] = MISSING
    modes: List[str] = MISSING
    reasoning: bool = MISSING
    call_format: str = MISSING
    direct: DirectAnswers = MISSING
    out_dir: str = MISSING


@dataclass
class ServeUpstream:                     # upstream=http: an OpenAI-compatible server
    kind: str = "http"
    base_url: str = MISSING
    api_key_env: Optional[str] = MISSING     # the variable holding the upstream's own key (null: none)
    models: Optional[List[str]] = MISSING    # null: the upstream's /v1/models
    timeout_s: float = MISSING
    connect_timeout_s: float = MISSING
    retries: int = MISSING
    max_connections: int = MISSING


@dataclass
class ServeLocalUpstream:                # upstream=local: toolwise's own backend (model + backend groups) in-process
    kind: str = "local"
    models: Optional[List[str]] = MISSING    # ids clients may ask for; null: the policy's model id
    max_tokens: int = MISSING                # completion budget when a request sets none
    temperature: float = MISSING             # when a request sets none


@dataclass
class ServeGates:
    toolgate: Optional[str] = MISSING
    g_step: Optional[str] = MISSING
    probe_prefill: Optional[str] = MISSING   # upstream=local only: the probe reads the policy's hidden states
    prefill_style: str = MISSING             # soft | hard (the probe's response prefill)
    policy: Optional[str] = MISSING
    strict: bool = MISSING
    on_error: str = MISSING                  # open | closed
    max_reasks: int = MISSING
    max_continues: int = MISSING
    logprobs: Optional[bool] = MISSING
    concurrency: int = MISSING


@dataclass
class ServeAuth:
    env: Optional[str] = MISSING
    file: Optional[str] = MISSING


@dataclass
class ServeLimits:
    max_body_bytes: int = MISSING
    max_messages: int = MISSING


@dataclass
class ServeConfig:
    host: str = MISSING
    port: int = MISSING
    log_level: str = MISSING
    upstream: Any = MISSING                  # http | local: their own schemas type it
    model: ModelConfig = MISSING             # upstream=local: the policy served
    backend: Any = MISSING                   # upstream=local: its engine (hf | vllm)
    checkpoints: CheckpointsConfig = MISSING
    gates: ServeGates = MISSING
    auth: ServeAuth = MISSING
    limits: ServeLimits = MISSING


# (group or None for an entry config, schema name, dataclass): what register() stores.
SCHEMAS: list[tuple[str | None, str, type]] = [
    ("model", "schema", ModelConfig),
    ("trainer", "schema", TrainerConfig),
    ("backend", "hf_schema", HFBackendConfig),
    ("backend", "vllm_schema", VLLMBackendConfig),
    ("backend", "openai_schema", OpenAIBackendConfig),
    ("tasks", "builtin_schema", BuiltinTasksConfig),
    ("tasks", "when2tool_schema", When2ToolTasksConfig),
    ("tasks", "gsm8k_schema", GSM8KTasksConfig),
    ("logger", "schema", LoggerConfig),
    ("logger", "wandb_schema", WandbLoggerConfig),
    ("hardware", "schema", HardwareConfig),
    ("agent", "schema", AgentSettings),
    ("pte", "schema", PTESettings),
    ("checkpoints", "schema", CheckpointsConfig),
    ("executor", "local_schema", LocalExecutorConfig),
    ("executor", "ray_schema", RayExecutorConfig),
    ("recipe", "tool_sft_schema", ToolSFTRecipe),
    ("recipe", "pte_grpo_schema", PTEGRPORecipe),
    ("recipe", "probe_prefill_schema", ProbePrefillRecipe),
    ("recipe", "toolgate_schema", ToolGateRecipe),
    ("recipe", "g_step_schema", GStepRecipe),
    (None, "fit_schema", FitConfig),
    (None, "build_schema", BuildConfig),
    (None, "rollout_schema", RolloutConfig),
    (None, "evaluate_schema", EvaluateConfig),
    (None, "factorized_schema", FactorizedConfig),
    (None, "oracle_schema", OracleConfig),
    (None, "sft_data_schema", SFTDataConfig),
    ("upstream", "http_schema", ServeUpstream),
    ("upstream", "local_schema", ServeLocalUpstream),
    (None, "serve_schema", ServeConfig),
]


def register() -> None:
    """Store every schema in Hydra's ConfigStore (idempotent: storing a name again replaces it)."""
    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node)


# ---------------------------------------------------------------------------------------------- key check
def unknown_keys(cfg: DictConfig | ListConfig, path: str = "") -> list[str]:
    """Keys of dataclass-typed nodes that their dataclass does not declare (added with Hydra's ``+``), as
    dotted paths. The ``hydra`` node is Hydra's own."""
    node_type = OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None
    declared = {f.name for f in dataclasses.fields(node_type)} if dataclasses.is_dataclass(node_type) else None
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    out = []
    for key, value in items:
        if not path and key == "hydra":
            continue
        where = f"{path}[{key}]" if isinstance(cfg, ListConfig) else f"{path}.{key}" if path else str(key)
        if declared is not None and key not in declared:
            out.append(f"{where} (not a field of {node_type.__name__})")
        # a typed None node comes back as a container that holds None (OmegaConf has no public is_none)
        if isinstance(value, (DictConfig, ListConfig)) and not value._is_none():
            out.extend(unknown_keys(value, where))
    return out


def check_keys(cfg: DictConfig) -> DictConfig:
    """``cfg`` itself, or a ConfigCompositionException naming every key no schema declares."""
    bad = unknown_keys(cfg)
    if bad:
        raise ConfigCompositionException(f"unknown config key(s): {', '.join(bad)}; recipes/schema.py lists the "
                                          f"fields of each node (a '+' override cannot add one)")
    return cfg


class CheckKeys(Callback):
    """Hydra callback (``hydra.callbacks`` in ``hydra/settings.yaml``): :func:`check_keys` before each job.

    Hydra turns an exception raised in a callback into a warning and runs the job anyway, so a bad key ends
    the command with ``SystemExit`` (which it does not catch) and the exception's message instead."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_keys(config)
        except ConfigCompositionException as e:
            raise SystemExit(f"Error composing the config: {e}") from e
