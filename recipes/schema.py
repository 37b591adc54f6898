"""Structured configs: a dataclass for each shape of config group option and for each entry config, stored in
Hydra's ConfigStore.

Every YAML file in ``recipes/`` extends its schema through its defaults list (Hydra's "structured config schema"
pattern: ``defaults: [<schema>, _self_]``, the schema stored under the group), so a misspelt key, a key the
schema does not have, or a value of the wrong type fails when Hydra composes the config, before any model loads.

Where each value lives (every default is written once, as TRL's ``GRPOConfig`` and litgpt's ``TrainArgs`` write
theirs):

* each field here carries its default and a one-line help (``metadata["help"]``), and the checks its value
  must pass (``choices``, bounds: :func:`param`); a YAML file carries only what its option or recipe changes;
* a field whose value each option of its group sets (a model's name, a hardware profile's figures, the
  committed checkpoints) has no default and is marked required (:func:`required`); so is a group node, which
  the entry config's defaults list selects;
* a dataclass the code already runs on is the truth for its fields and their defaults: the ``agent`` group is
  :class:`data_builders.agent.loop.AgentConfig`, the ``pte`` group :class:`data_builders.metrics.pte.PTEConfig`,
  a ``hardware`` profile :class:`data_builders.metrics.hardware.HardwareProfile` (their schemas are derived from
  them below, never copied).

A node typed ``Any`` or ``dict`` is free-form on purpose; each says why. :func:`check_config` runs in
:func:`recipes.compose` and, through :class:`CheckConfig` in ``hydra/settings.yaml``, before every Hydra job: it
refuses a key no schema declares (Hydra's ``+key=value`` opens a typed node for it), a value outside its field's
checks, and an override of a group or key the chosen recipe does not read (each recipe schema's ``refusals``).
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import math
import operator
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, Iterable, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

from data_builders.agent.loop import AgentConfig
from data_builders.backends import DTYPES as BACKEND_DTYPES
from data_builders.agent.prompts import ALL_MODES, CALL_FORMATS, MODE_ALIASES, MODES
from data_builders.config_fields import param, required, tau_values
from data_builders.gates import ON_ERROR_MODES, gates
from data_builders.metrics.hardware import HardwareProfile
from data_builders.metrics.pte import PARAM_CONVENTIONS, PTEConfig
from data_builders.protocol import PREFILL_STYLES
from data_builders.tasks import SOURCE_ENVS, bfcl
from data_builders.tasks.builtin import N_PER_CELL, TIERS
from data_builders.tasks.distractors import DISTRACTOR_KINDS
from data_builders.tasks.schema import DIFFICULTIES, SPLITS
from data_builders.tasks.when2tool import HUB_ID


# ---------------------------------------------------------------------------------------------- fields
def derived(cls: type, name: str, exclude: tuple[str, ...] = (), required_help: dict[str, str] | None = None) -> type:
    """A config dataclass with ``cls``'s fields, types and defaults (so they stay written once, in ``cls``), less
    ``exclude``. Needed because a runtime dataclass cannot be a schema as is: it may be frozen (read-only
    nodes refuse overrides) or carry fields that another group holds. A field of ``cls`` without a default is
    required; ``required_help`` says what each such field holds (the others are documented in ``cls``)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        if f.default_factory is not dataclasses.MISSING:
            default = field(default_factory=f.default_factory)
        elif f.default is not dataclasses.MISSING:
            default = field(default=f.default)
        else:
            default = required((required_help or {})[f.name])
        fields.append((f.name, hints[f.name], default))
    schema = dataclasses.make_dataclass(name, fields)
    schema.__module__ = __name__     # (make_dataclass's module= needs Python 3.12)
    return schema


def positive_or_auto(value: Any) -> str | None:
    if value == "auto" or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        return None
    return "must be auto or a positive number"


# Values the code checks too, late (after models load); here so a typo fails when the config is composed.
PROMPT_MODES = ALL_MODES + tuple(MODE_ALIASES)
HOPS = ("single", "multi", "both")
DTYPES = ("auto", *BACKEND_DTYPES)                          # data_builders.backends.loading.resolve_dtype
BUILD_KINDS = tuple(gate.kind for gate in gates().values())   # the decision-point kinds, one per gate
# Vocabularies the training code owns, named by "module:attribute" (a tuple, a dict's keys or an Enum's values) and
# read only when a config that has such a field is checked: the trainers import torch, transformers and TRL, which
# the configs of the other entry points never load. :func:`vocabulary` resolves them.
TAU_METHODS = "trainers.controller.calibration:TAU_METHODS"
REWARD_KINDS = "trainers.policy.rewards:REWARDS"
CONDITIONS = "trainers.evaluate.factorized:CONDITIONS"
SCHEDULERS = "transformers.trainer_utils:SchedulerType"      # TRL's lr_scheduler_type


# ---------------------------------------------------------------------------------------------- groups
@dataclass
class ModelConfig:
    """``model``: the policy (``data_builders.backends.loading.backend_from_config``)."""
    name: str = required("hub id | local directory | .gguf path | smollm2 (the embedded default)")
    gguf_file: Optional[str] = param(None, "a file inside a hub repo or directory named by name")
    adapter: Optional[str] = param(None, "a peft LoRA directory loaded over the base")
    dtype: str = param("auto", "auto = bfloat16 on a CUDA device with native bf16, else float32; or float32 | "
                               "bfloat16 | float16", choices=DTYPES)
    max_batch_size: int = param(32, "prompts per forward", ge=1)
    max_batch_tokens: int = param(16384, "padded tokens per forward; long prompts get smaller batches", ge=1)
    device: str = param("auto", "auto = CUDA when available, else CPU; or cpu | cuda | cuda:N")


@dataclass
class TrainerConfig:
    """``trainer``: where and how Lightning runs a controller fit (``lightning.Trainer`` arguments of the same
    names; trainers/controller/training.py). The policy recipes (TRL) refuse it: ``accelerate launch`` places them."""
    accelerator: str = param("cpu", "Lightning's accelerator: cpu | gpu | auto | ...")
    devices: Any = param(1, "an int, auto, or a list of device indices: Lightning takes each")
    strategy: str = param("auto", "Lightning's strategy, e.g. ddp (gloo on the CPU)")
    num_nodes: int = param(1, "machines, each running devices processes", ge=1)
    precision: str = param("32-true", "Lightning's precision, e.g. bf16-mixed")


@dataclass
class HFBackendConfig:
    """``backend=hf``: transformers (batched generate, KV reuse across turns, all-layer hidden states)."""
    name: str = param("hf", "the engine", choices=("hf",))


@dataclass
class VLLMBackendConfig:
    """``backend=vllm``: vLLM, the same interface as hf; the probe's hidden-state read runs inside the engine."""
    name: str = param("vllm", "the engine", choices=("vllm",))
    max_model_len: Optional[int] = param(None, "context length; null = the model's own limit", ge=1)
    gpu_memory_utilization: float = param(0.85, "GPU only: share of each GPU for weights + KV cache (leave room "
                                                "if the probe reads on an HF copy)", gt=0, le=1)
    tensor_parallel_size: int = param(1, "GPUs one engine shards each layer over (70B in bf16: 4-8 x 80 GB)", ge=1)
    pipeline_parallel_size: int = param(1, "GPUs (or nodes) one engine splits the layer stack over", ge=1)
    data_parallel_size: int = param(1, "engine replicas: offline, each is an executor worker (executor=ray "
                                       "executor.workers=N); or serve with `vllm serve --data-parallel-size N` and "
                                       "use backend=openai", ge=1)
    max_num_seqs: Optional[int] = param(None, "sequences one engine step batches (null = vLLM's default, 256 on "
                                              "GPU)", ge=1)
    enforce_eager: Optional[bool] = param(None, "null = eager on CPU (compiling costs 30-50 s per start there), "
                                                "graphs on GPU")
    enable_prefix_caching: bool = param(True, "KV reuse across an episode's turns")
    block_size: Optional[int] = param(None, "KV cache block in tokens; null = 32 on CPU while the probe reads in "
                                            "the engine (the generation after a probe read recomputes the prompt's "
                                            "last partial block), else vLLM's default (16 on GPU, 128 on CPU)", ge=1)
    cpu_kv_cache_gib: int = param(4, "CPU only: KV cache size (VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an "
                                     "integer)", ge=1)
    cpu_threads: Optional[int] = param(None, "CPU only: cores bound for compute (null = all)", ge=1)
    probe_in_engine: bool = param(True, "the probe reads its layers inside the vLLM engine (forward hooks in a "
                                  "worker extension); false, or an engine that cannot: an HF copy beside it")
    probe_device: Optional[str] = param(None, "where the HF copy for probe reads lives (null = model.device)")
    seed: int = param(0, "vLLM's sampling seed")
    engine_kwargs: Dict[str, Any] = param({}, "free-form: vllm.LLM's own keyword arguments, passed as they are")


@dataclass
class OpenAIBackendConfig:
    """``backend=openai``: any OpenAI-compatible Completions server; prompts are rendered and counted with
    model.name's tokenizer; no hidden states (no probe)."""
    name: str = param("openai", "the engine", choices=("openai",))
    base_url: str = param("http://127.0.0.1:8000/v1", "the server's /v1 URL")
    served_model: Optional[str] = param(None, "the model id to ask for; null = the first model the server lists")
    tokenizer: Optional[str] = param(None, "null = model.name's tokenizer")
    api_key_env: str = param("OPENAI_API_KEY", "the variable the key is read from (EMPTY when unset)")
    max_concurrency: int = param(32, "prompts per request", ge=1)
    timeout_s: float = param(600.0, "a request's timeout", gt=0)
    vllm_extras: bool = param(True, "token-id prompts, server-side stop strings, returned token ids (vLLM servers)")


@dataclass
class BuiltinTasksConfig:
    """``tasks=builtin``: deterministic generators (no external files) for all 15 When2Tool environments."""
    source: str = param("builtin", "the task source", choices=("builtin",))
    n_per_cell: int = param(N_PER_CELL, "tasks per environment x difficulty x split", ge=1)
    seed: int = param(0, "the generators' seed")
    envs: Optional[List[str]] = param(None, "environments to keep, e.g. [CalculatorEnv]; null = all")
    difficulties: Optional[List[str]] = param(None, "e.g. [easy, medium]; null = all")
    hops: str = param("single", "single | multi (Calculator and CodeExecutor three-step chains) | both",
                      choices=HOPS)
    tier: str = param("standard", "standard | trivial (tasks the default policy often answers without a tool: "
                                  "data_builders/tasks/generators/trivial.py) | both", choices=TIERS)
    n_per_template: int = param(20, "trivial tier: tasks per kept template x split", ge=1)
    train_n_per_cell: Optional[int] = param(None, "the train split's n_per_cell (more training points, the test "
                                                  "split unchanged); null = n_per_cell", ge=1)
    train_n_per_template: Optional[int] = param(None, "the train split's n_per_template, each instance of a "
                                                      "template's train share at most once; null = n_per_template",
                                                ge=1)


@dataclass
class When2ToolTasksConfig:
    """``tasks=when2tool``: the benchmark's task files (15 single-hop + 3 multi-hop environments)."""
    source: str = param("when2tool", "the task source", choices=("when2tool",))
    path: Optional[str] = param(None, "a directory with tasks_v1_{train,test}.json and "
                                      "tasks_v1_multihop_{train,test}.json; null = the hub dataset (hub_id)")
    hops: str = param("both", "single | multi | both", choices=HOPS)
    hub_id: str = param(HUB_ID, "the hub dataset read when path is null (through `datasets`)")
    revision: Optional[str] = param(None, "the hub dataset's revision; null = its default branch")
    envs: Optional[List[str]] = param(None, "environments to keep, e.g. [CalculatorEnv, HashEnv]; null = all")
    difficulties: Optional[List[str]] = param(None, "e.g. [easy, medium]; null = all")
    per_cell: Optional[int] = param(None, "k = a stratified, seeded subsample: k tasks per environment x "
                                          "difficulty cell; null = all")
    sample_seed: int = param(0, "the subsample's seed")


@dataclass
class GSM8KTasksConfig:
    """``tasks=gsm8k``: GSM8K-format math word problems for the Calculator, optionally with one semantic
    distractor per problem; a fixed hash of the question puts ~10% of problems in test."""
    source: str = param("gsm8k", "the task source", choices=("gsm8k",))
    path: Optional[str] = param(None, "a .jsonl file of {question, answer: '... #### <gold>'} lines (required "
                                      "to load)")
    distractor: Optional[str] = param(None, "null | thematic | parallel_entity | hedged | paraphrase",
                                      choices=DISTRACTOR_KINDS)
    distractor_seed: int = param(0, "the distractors' seed")
    envs: Optional[List[str]] = param(None, "only CalculatorEnv here")
    difficulties: Optional[List[str]] = param(None, "e.g. [hard] (difficulty = number of <<...>> steps: <=2 "
                                                    "easy, 3-4 medium, >=5 hard)")
    per_cell: Optional[int] = param(None, "k = a stratified, seeded subsample: k tasks per environment x "
                                          "difficulty cell; null = all")
    sample_seed: int = param(0, "the subsample's seed")


@dataclass
class CustomTasksConfig:
    """``tasks=custom``: a team's own JSONL task file and tool sources (data_builders/tasks/custom.py)."""
    source: str = param("custom", "the task source", choices=("custom",))
    path: Optional[str] = param(None, "a .jsonl file, one task per line (required to load)")
    # Free-form: each source kind (and a user's own, by dotted path) has its own fields, which
    # data_builders.tool_sources.source_from_spec checks against the source's constructor when the file is read.
    sources: Dict[str, Any] = param({}, "tool sources by name, e.g. {units: {kind: mcp, command: [python, "
                                        "server.py]}}; records name them in their tools list")
    tools: Optional[List[str]] = param(None, "the sources (names) of records that list none")
    scorer: Any = param(None, "the scorer of records without one: exact | normalized | numeric | regex | when2tool "
                              "| judge | package.module:function, or an object {kind: numeric, tolerance: 0.01}; "
                              "null = exact")
    test_fraction: float = param(0.3, "share of records without a split that go to test (seeded by id)",
                                 ge=0, le=1)
    split_seed: int = param(0, "the split's seed")
    envs: Optional[List[str]] = param(None, "environments to keep, by label (a record's source names joined by "
                                            "+); null = all")
    difficulties: Optional[List[str]] = param(None, "e.g. [easy, medium]; null = all")
    per_cell: Optional[int] = param(None, "k = a stratified, seeded subsample: k tasks per environment x "
                                          "difficulty cell; null = all")
    sample_seed: int = param(0, "the subsample's seed")


def bfcl_categories(values: Any) -> str | None:
    """What data_builders.tasks.bfcl refuses in a categories list (live_* held out, others unsupported), or None."""
    try:
        bfcl.check_categories(values)
    except ValueError as exc:
        return str(exc)
    return None


@dataclass
class BFCLTasksConfig:
    """``tasks=bfcl``: the Berkeley Function Calling Leaderboard v4's irrelevance, simple_python and multiple
    categories, scored on the episode's calls (data_builders/tasks/bfcl.py, docs/bfcl.md)."""
    source: str = param("bfcl", "the task source", choices=("bfcl",))
    path: Optional[str] = param(None, "the bfcl-eval wheel, a folder holding it, or an extracted bfcl_eval/data "
                                      f"folder; null = {bfcl.DEFAULT_DIR}/*.whl, else an installed bfcl_eval")
    categories: List[str] = param(list(bfcl.CATEGORIES), "BFCL categories; live_* are refused (held out as an "
                                                         "independent check)", check=bfcl_categories)
    test_fraction: float = param(0.3, "share of each category that goes to test (seeded by id)", ge=0, le=1)
    split_seed: int = param(0, "the split's seed")
    envs: Optional[List[str]] = param(None, "environments to keep (one per category: bfcl_<category>); null = all",
                                      items=bfcl.ENVS)
    difficulties: Optional[List[str]] = param(None, "every BFCL task is easy; null = all", items=DIFFICULTIES)
    per_cell: Optional[int] = param(None, "k = a stratified, seeded subsample: k tasks per category; null = all",
                                    ge=1)
    sample_seed: int = param(0, "the subsample's seed")


@dataclass
class MixtureTasksConfig:
    """``tasks=mixture``: several task sources one after another, each selected as its own option selects it
    (e.g. built-in tasks beside When2Tool's train files, as the tool_sft v3 release was trained); null leaves a
    source out."""
    source: str = param("mixture", "the task source", choices=("mixture",))
    builtin: Optional[BuiltinTasksConfig] = param(BuiltinTasksConfig(), "the built-in part; null = none")
    when2tool: Optional[When2ToolTasksConfig] = param(When2ToolTasksConfig(), "the When2Tool part (set "
                                                      "tasks.when2tool.path, or null loads the hub); null = none")
    gsm8k: Optional[GSM8KTasksConfig] = param(None, "a GSM8K part, e.g. tasks.gsm8k={path: <file.jsonl>}; "
                                                    "null = none")


@dataclass
class LoggerConfig:
    """``logger=csv`` and ``logger=none``: a name and nothing else."""
    name: str = required("csv (Lightning CSV logs under the run directory) | none (no run tracking)",
                         choices=("csv", "none"))


@dataclass
class WandbLoggerConfig:
    """``logger=wandb``: online with an API key, offline otherwise (never prompts)."""
    name: str = param("wandb", "the tracker", choices=("wandb",))
    project: str = param("toolwise", "the W&B project")
    group: Optional[str] = param(None, "the W&B group; null = the recipe name")
    mode: str = param("auto", "auto (online with a key, else offline) | online | offline | disabled",
                      choices=("auto", "online", "offline", "disabled"))


# ``hardware``: a PTE hardware profile; the YAML files are the registry (data_builders/metrics/hardware.py reads them).
HardwareConfig = derived(HardwareProfile, "HardwareConfig", required_help={
    "name": "the profile's name: its file's name",
    "peak_flops": "FLOP/s, FP16/BF16 tensor cores",
    "mem_bandwidth": "bytes/s, device memory (HBM / GDDR)",
    "hoi": "FLOP/byte: peak_flops / mem_bandwidth (as the paper prints it for *_paper profiles)",
    "source": "where each number comes from"})
# ``agent``: the agent loop's settings less the two each run or arm chooses itself (prompt mode, Reason-then-Act).
AgentSettings = derived(AgentConfig, "AgentSettings", exclude=("mode", "reasoning"))
# ``pte``: how trajectories are priced; the profile is the ``hardware`` group.
PTESettings = derived(PTEConfig, "PTESettings", exclude=("hardware",))
# An agent loop with every setting (pte_grpo's training rollouts choose their prompt mode too).
AgentLoopConfig = derived(AgentConfig, "AgentLoopConfig")


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


# ---------------------------------------------------------------------------------------------- recipes
def overridden(keys: Iterable[str], prefix: str) -> list[str]:
    """The overridden keys at or under ``prefix`` (a group, a node or a field)."""
    return [k for k in keys if k == prefix or k.startswith(prefix + ".")]


class Recipe:
    """What every recipe schema shares: :meth:`refusals`, the overrides a recipe would silently ignore."""

    # fit groups (or keys) this recipe never reads -> why; an override of one is refused
    UNUSED: ClassVar[Dict[str, str]] = {}

    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        """What is wrong with overriding ``keys`` (the command line's keys and groups) for this recipe, given the
        composed ``cfg``; empty when the recipe reads every one of them."""
        name = cfg.recipe.name
        return [f"{key} (recipe={name} does not read {unused}: {why})"
                for unused, why in cls.UNUSED.items() for key in overridden(keys, unused)]


@dataclass
class LoraConfig:
    """A fresh LoRA (peft, through TRL's ModelConfig), for a model without an adapter."""
    r: int = param(16, "rank", ge=1)
    alpha: int = param(32, "scale numerator (alpha / r scales the update)", ge=1)
    dropout: float = param(0.05, "dropout on the LoRA input", ge=0, lt=1)
    target_modules: Any = param("all-linear", "all-linear or a list of module names: peft takes either")


@dataclass
class SFTDirectRule:
    """One rule of direct ``\\boxed{gold}`` answers (data_builders.oracle.sft.DirectRule): which tasks also get
    one, in which prompt modes."""
    modes: List[str] = required("prompt modes the direct answer is rendered in", items=PROMPT_MODES)
    difficulties: List[str] = required("task difficulties the rule covers", items=DIFFICULTIES)
    fraction: float = required("share of those tasks that get a direct answer (a seeded draw)", ge=0, le=1)
    multi_step: bool = param(False, "true: multi-hop tasks too")
    categories: Optional[List[str]] = param(None, "A B C M; null = every category", items=("A", "B", "C", "M"))


# Policy recipes: TRL trains the policy of the ``model`` group on train tasks of the ``tasks`` group.
POLICY_UNUSED = {
    "backend": "TRL trains and generates with the model itself (pte_grpo: recipe.generation.use_vllm for vLLM)",
    "trainer": "that group places Lightning fits; TRL runs in each process accelerate launch starts",
}


class PolicyRecipe(Recipe):
    @classmethod
    def refusals(cls, cfg: DictConfig, keys: list[str]) -> list[str]:
        out = super().refusals(cfg, keys)
        if cfg.model.adapter:   # a start adapter is trained as it is, whatever recipe.lora says
            out += [f"{key} (model.adapter={cfg.model.adapter} is trained further; recipe.lora shapes a fresh "
                    f"LoRA only, for a model without an adapter)" for key in overridden(keys, "recipe.lora")]
        if cfg.logger.name == "csv":
            out.append(f"logger=csv (recipe={cfg.recipe.name} reports through TRL, to W&B or nowhere: logger=wandb "
                       f"or logger=none)")
        return out


@dataclass
class SFTData:
    """How tool_sft turns its train tasks (the ``tasks`` group) into demonstrations."""
    tool_modes: List[str] = param(["default", "force"], "a tool demonstration is rendered in one of these (seeded "
                                                        "draw)", items=PROMPT_MODES)
    direct: List[SFTDirectRule] = param([
        # mode following: told not to use tools, it answers
        SFTDirectRule(modes=["no_tool", "hard_no_tool"], difficulties=["easy", "medium", "hard"], fraction=0.4,
                      multi_step=True),
        # answer what a small model can learn to answer (its call demonstration then comes in force mode)
        SFTDirectRule(modes=["default"], difficulties=["easy"], fraction=0.5),
    ], "direct \\boxed{gold} answers, never a call")
    call_format: str = param("xml", "the tool-call format demonstrated", choices=CALL_FORMATS)
    val_fraction: float = param(0.1, "held-out tasks (not rows) for the validation loss", ge=0, lt=1)
    max_length: int = param(2048, "tokens; longer conversations are dropped, never truncated (every environment "
                                  "fits but hard 2-D lists, 4-5k)", ge=1)
    seed: int = param(0, "mode draws, direct-answer draws and the validation split")


@dataclass
class SFTTrain:
    """TRL ``SFTConfig`` fields, by TRL's names (``batch_size`` is its per-device train and eval batch size)."""
    num_train_epochs: float = param(1.0, "passes over the data (max_steps > 0 caps them)", gt=0)
    max_steps: int = param(60, "optimizer steps (caps CPU time: 60 x 8 conversations, ~0.9 epoch); -1 = "
                               "num_train_epochs decides", ge=-1)
    learning_rate: float = param(1.0e-3, "peak learning rate", gt=0)
    lr_scheduler_type: str = param("cosine", "transformers' scheduler", choices=SCHEDULERS)
    warmup_steps: float = param(0.05, "an integer: warmup steps; a float in [0, 1): a ratio of the total steps",
                                ge=0)
    batch_size: int = param(1, "conversations per step and process (one: no padding work on CPU)", ge=1)
    gradient_accumulation_steps: int = param(8, "steps accumulated per optimizer step", ge=1)
    logging_steps: int = param(5, "steps between logged losses", ge=1)
    eval_steps: int = param(100, "steps between validation passes; > max_steps: one, at the end (each costs "
                                 "~1.5 min on CPU)", ge=1)
    gradient_checkpointing: bool = param(False, "recompute activations in backward: less memory, ~1/3 more CPU "
                                                "time (TRL turns it on by default; a 135M model fits without)")
    bf16: bool = param(True, "bf16 autocast of the update (weights stay in model.dtype): TRL's default, on the CPU "
                             "too")
    fp16: bool = param(False, "fp16 autocast of the update")
    seed: int = param(0, "torch and TRL seed")


@dataclass
class ToolSFTRecipe(PolicyRecipe):
    UNUSED: ClassVar[Dict[str, str]] = {**POLICY_UNUSED, "hardware": "only pte_grpo prices episodes in PTE",
                                        "model.max_batch_size": "TRL batches by recipe.train.batch_size",
                                        "model.max_batch_tokens": "TRL batches by recipe.train.batch_size"}
    name: str = param("tool_sft", "the recipe (trainers.fit.RECIPES)")
    output_dir: str = param("checkpoints/tool_sft/${now:%Y-%m-%d_%H-%M-%S}", "where the adapter is exported")
    data: SFTData = param(SFTData(), "demonstrations")
    lora: LoraConfig = param(LoraConfig(), "the fresh LoRA (a model with an adapter trains that one instead)")
    train: SFTTrain = param(SFTTrain(), "TRL SFTConfig")


@dataclass
class GRPOData:
    """The prompts of pte_grpo's train tasks (the ``tasks`` group)."""
    seed: int = param(0, "the shuffle of the prompt dataset")


@dataclass
class GRPOGeneration:
    """TRL ``GRPOConfig`` generation fields, by TRL's names (``prompts_per_step`` sets its batch sizes)."""
    prompts_per_step: int = param(3, "tasks per step, all processes together (3 x 4 = 12 episodes: ~2.7 min a step "
                                     "on 2 CPU cores); under accelerate launch each process rolls out its share",
                                  ge=1)
    num_generations: int = param(4, "episodes per task (the GRPO group)", ge=2)
    temperature: float = param(1.0, "1.0: the engines' log-probs are the sampling distribution's", gt=0)
    top_p: float = param(1.0, "nucleus sampling", gt=0, le=1)
    max_completion_length: int = param(1024, "tokens of an episode after its first prompt", ge=1)
    use_vllm: bool = param(False, "true: TRL's vLLM generates (pip install .[vllm]); false: HF generate")
    vllm_mode: str = param("colocate", "colocate: an engine in each training process | server: `trl vllm-serve`",
                           choices=("colocate", "server"))
    vllm_server_base_url: Optional[str] = param(None, "server mode: e.g. http://10.0.0.5:8000 (wins over "
                                                      "host/port)")
    vllm_server_host: str = param("0.0.0.0", "server mode: where `trl vllm-serve` listens (its --host)")
    vllm_server_port: int = param(8000, "server mode: its --port", ge=1, le=65535)


@dataclass
class GRPOReward:
    """reward = correctness − λ·PTE/normaliser (pte), or correctness × r_tool − λ·PTE/normaliser (otc)."""
    kind: str = param("pte", "pte | otc", choices=REWARD_KINDS)
    lam: float = param(0.5, "λ; 0 = plain correctness reward", ge=0)
    normaliser: Any = param("auto", "auto = the start policy's mean PTE on the first batch; or a number (OmegaConf "
                                    "has no str | float)", check=positive_or_auto)
    otc_c: float = param(1.0, "OTC's smoothing constant c", gt=0)
    cache_reuse: bool = param(False, "PTE with full KV eviction after each tool call (arXiv 2604.05404)")
    pte_params: str = param("non_embedding", "the parameter count behind PTE's γ", choices=PARAM_CONVENTIONS)


@dataclass
class GRPOTrain:
    """TRL ``GRPOConfig`` training fields, by TRL's names (``micro_batch`` and ``trainable_layers`` are toolwise's)."""
    max_steps: int = param(15, "optimizer steps (the model card has the measured wall time: <= 45 min on 2 CPU "
                               "cores)", ge=1)
    micro_batch: int = param(3, "episodes per forward/backward (peak memory); a step accumulates the rollout batch",
                             ge=1)
    trainable_layers: Optional[int] = param(8, "LoRA of the top 8 of 30 layers is trained (null = all): backward "
                                               "stops there", ge=1)
    learning_rate: float = param(1.0e-4, "few steps on a CPU budget: a LoRA-scale learning rate", gt=0)
    bf16: bool = param(True, "bf16 autocast for the policy update (1.6x faster fwd+bwd on AMX CPUs, measured)")
    fp16: bool = param(False, "fp16 autocast of the update")
    gradient_checkpointing: bool = param(False, "recomputes activations in backward: less memory, ~1/3 more "
                                                "compute")
    lr_scheduler_type: str = param("constant", "transformers' scheduler", choices=SCHEDULERS)
    warmup_steps: float = param(0.0, "an integer: warmup steps; a float in [0, 1): a ratio of the total steps",
                                ge=0)
    beta: float = param(0.0, "KL weight; 0: no KL term (with a peft model TRL's reference would be the bare base "
                             "model)", ge=0)
    loss_type: str = param("dapo", "TRL's loss aggregation")
    scale_rewards: str = param("group", "TRL's reward scaling: group | batch | none")
    seed: int = param(0, "torch and TRL seed")


@dataclass
class PTEGRPORecipe(PolicyRecipe):
    UNUSED: ClassVar[Dict[str, str]] = POLICY_UNUSED
    name: str = param("pte_grpo", "the recipe (trainers.fit.RECIPES)")
    output_dir: str = param("checkpoints/pte_grpo/${now:%Y-%m-%d_%H-%M-%S}", "where the adapter is exported")
    data: GRPOData = param(GRPOData(), "the prompt dataset")
    rollout: AgentLoopConfig = param(AgentLoopConfig(max_rounds=3, max_new_tokens=128),   # type: ignore[valid-type]
                                     "the agent loop of every training episode (data_builders/agent/loop.py); "
                                     "its mode is the deployed one: the policy decides whether to call")
    generation: GRPOGeneration = param(GRPOGeneration(), "sampling")
    reward: GRPOReward = param(GRPOReward(), "the reward")
    lora: LoraConfig = param(LoraConfig(), "a fresh LoRA, only for a model without an adapter (model=smollm2_base)")
    train: GRPOTrain = param(GRPOTrain(), "TRL GRPOConfig")


@dataclass
class Points:
    """Where a controller recipe's decision points come from. Their kind is the recipe's gate's (data_builders.gates),
    not a setting."""
    root: str = param("outputs/points", "built datasets go to <root>/<kind>/<source>-<hash of the build config>")
    dir: Optional[str] = param(None, "an existing dataset directory (python -m data_builders.build ...) instead")
    # Free-form: keys of the ``build`` entry config set for this recipe; trainers/controller/points.py merges
    # them onto the composed (typed) build config, and check_config checks them against BuildConfig.
    build: Dict[str, Any] = param({}, "data_builders.build keys (recipes/build.yaml) for this recipe's build")


@dataclass
class ControllerTrain:
    """The Lightning fit of a controller (trainers/controller/training.py, module.py)."""
    optimizer: str = param("lbfgs", "lbfgs: full-batch L-BFGS to the optimum of a convex loss | adamw",
                           choices=("lbfgs", "adamw"))
    lr: float = param(1.0, "learning rate (L-BFGS: its step size)", gt=0)
    weight_decay: float = param(0.0, "AdamW's decoupled weight decay", ge=0)
    l2: float = param(0.0, "0.5 l2 |W|^2 on the mean balanced loss (scikit-learn's C = 1 / (l2 N))", ge=0)
    batch_size: Optional[int] = param(None, "points per step; null = the full batch", ge=1)
    max_epochs: int = param(3, "passes over the train split", ge=1)
    lbfgs_max_iter: int = param(100, "L-BFGS iterations per step (lbfgs only)", ge=1)
    class_balance: bool = param(True, "weight each class N / (2 n_class)")
    seed: int = param(0, "initialisation and shuffling")


@dataclass
class Calibration:
    """A logit temperature and the operating point τ, both chosen on the validation split."""
    temperature: bool = param(True, "fit a logit temperature on val")
    tau_method: str = param("fixed", "fixed | target_call_rate | max_acc_loss (trainers/controller/calibration.py)",
                            choices=TAU_METHODS)
    tau_value: float = param(0.5, "fixed: τ itself; target_call_rate: the call rate; max_acc_loss: the share of "
                                  "helpful calls that may be missed", ge=0, le=1)


CONTROLLER_UNUSED = {"hardware": "a controller fit prices nothing in PTE (only pte_grpo reads the hardware group)"}


@dataclass
class ControllerRecipe(Recipe):
    """A gate's recipe: one shape but for the controller's own arguments (and the fields a gate adds)."""
    UNUSED: ClassVar[Dict[str, str]] = CONTROLLER_UNUSED
    name: str = required("the recipe (trainers.fit.RECIPES)")
    export_dir: str = required("where the controller is exported")
    points: Points = param(Points(), "decision points")
    controller: Any = required("the controller's constructor arguments")
    train: ControllerTrain = param(ControllerTrain(), "the fit")
    calibration: Calibration = param(Calibration(), "temperature and τ")


def controller_recipe(gate) -> type:
    """The recipe schema of a gate (``recipe=<gate>``): ControllerRecipe with the gate's controller arguments and
    the recipe fields its spec adds (data_builders.gates)."""
    fields = [("name", str, param(gate.name, "the recipe (one per gate: trainers.fit.recipes)")),
              ("export_dir", str, param(f"checkpoints/{gate.name}/${{now:%Y-%m-%d_%H-%M-%S}}",
                                        "where the controller is exported")),
              ("controller", gate.args, param(gate.args(), f"the {gate.controller} controller's arguments")),
              *gate.recipe_fields]
    cls = dataclasses.make_dataclass(f"{gate.args.__name__}Recipe", fields, bases=(ControllerRecipe,))
    cls.__module__ = __name__
    return cls


# ---------------------------------------------------------------------------------------------- entry configs
# ``backend``, ``tasks``, ``logger`` and ``recipe`` are ``Any``: their options have different shapes, and the
# option's own schema (its defaults list) types the node.
@dataclass
class SandboxConfig:
    """Where model-written code runs (data_builders/environments/sandbox.py; docs/sandbox.md)."""
    require_isolation: bool = param(False, "true: refuse to run model-written code without the OS boundary "
                                           "(namespaces and seccomp), naming what is missing and how to enable it")


@dataclass
class PolicyGroups:
    model: ModelConfig = required("the policy: the model group (recipes/model/)")
    backend: Any = required("its engine: the backend group (recipes/backend/)")
    tasks: Any = required("the tasks: the tasks group (recipes/tasks/)")
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    sandbox: SandboxConfig = param(SandboxConfig(), "the sandbox of the environments that run model-written code")


@dataclass
class FitConfig:
    recipe: Any = required("the recipe group (recipes/recipe/): what is trained")
    model: ModelConfig = required("the policy: the model group (recipes/model/)")
    backend: Any = required("the engine controller recipes build decision points on: the backend group")
    tasks: Any = required("the tasks a recipe trains on (policy) or builds decision points from (controllers)")
    logger: Any = required("run tracking: the logger group")
    hardware: HardwareConfig = required("PTE's γ of pte_grpo's reward: the hardware group")  # type: ignore[valid-type]
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    trainer: TrainerConfig = required("Lightning placement of controller fits: the trainer group")


@dataclass
class BuildConfig(PolicyGroups):
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
    max_rounds: int = param(4, "agent rounds per episode", ge=1)
    max_new_tokens: int = param(192, "tokens generated per turn", ge=1)
    call_format: str = param("auto", "xml | native | auto (native for Llama models)",
                             choices=CALL_FORMATS + ("auto",))
    feature_mode: str = param("default", "probe: the prompt mode the deployed probe reads", choices=PROMPT_MODES)
    layers: Optional[List[int]] = param(None, "probe: hidden-state indices (null = all)")
    forced_answer_tokens: int = param(24, "flip: tokens generated after the forced \\boxed{", ge=1)
    verify_rounds: int = param(2, "commit: extra rounds the injected verification may use", ge=0)
    commit_mode: str = param("default", "commit: the prompt mode of its rollouts", choices=PROMPT_MODES)
    commit_label: str = param("wrong", "commit: wrong (continue iff the answer is wrong) | fixed (... and "
                                       "verification fixes it)", choices=("wrong", "fixed"))
    out_dir: str = param("outputs/points/${kind}/${tasks.source}", "the dataset directory")
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


@dataclass
class ServeUpstream:
    """``upstream=http``: an OpenAI-compatible server (vLLM, SGLang, a hosted API) behind the endpoint."""
    kind: str = param("http", "the upstream", choices=("http",))
    base_url: str = param("http://127.0.0.1:8000/v1", "the upstream's /v1 URL")
    api_key_env: Optional[str] = param(None, "the variable holding the upstream's own key, e.g. OPENAI_API_KEY; "
                                             "null: none")
    models: Optional[List[str]] = param(None, "model ids clients may ask for; null: the upstream's /v1/models")
    timeout_s: float = param(120.0, "a whole upstream generation; past it the client gets 504", gt=0)
    connect_timeout_s: float = param(5.0, "connecting to the upstream", gt=0)
    retries: int = param(2, "connection attempts retried; a request the upstream received is never resent", ge=0)
    max_connections: int = param(64, "open connections to the upstream", ge=1)


@dataclass
class ServeLocalUpstream:
    """``upstream=local``: toolwise's own backend (model + backend groups) in-process."""
    kind: str = param("local", "the upstream", choices=("local",))
    models: Optional[List[str]] = param(None, "ids clients may ask for; null: the policy's model id")
    max_tokens: int = param(256, "completion budget when a request sets neither max_tokens nor "
                                 "max_completion_tokens", ge=1)
    temperature: float = param(0.0, "when a request sets none (toolwise evaluates greedy; OpenAI's own default is "
                                    "1)", ge=0)
    max_context: Optional[int] = param(None, "tokens of prompt and completion together; a longer prompt is refused "
                                             "(400), a larger max_tokens capped to the room left; null: the "
                                             "model's max_position_embeddings", ge=2)
    slice_tokens: int = param(32, "tokens generated per turn of the one policy: a long generation yields the "
                                  "policy to waiting requests between slices, and stops at the next one when its "
                                  "client leaves or the server shuts down", ge=1)


ServeTaus = per_gate("ServeTaus", lambda g: (Optional[float], param(None, "null: the checkpoint's calibrated τ",
                                                                       ge=0, le=1)),
                     doc="A gate's decision threshold at the endpoint (``p >= τ`` takes its first action: use, "
                         "execute, continue).")


@dataclass
class ServeGateOptions:
    prefill_style: str = param("soft", "the probe's response prefill: soft (a sentence) | hard (a forced prefix)",
                               choices=PREFILL_STYLES)
    taus: ServeTaus = param(ServeTaus(), "each gate's τ, e.g. an operating point chosen on held-out tasks")
    policy: Optional[str] = param(None, "the upstream policy's fingerprint: gates trained on another policy refuse "
                                        "to load")
    strict: bool = param(True, "false: skip the policy contract check")
    on_error: str = param("open", "a gate that raises: open = execute the call / commit the answer; closed = skip "
                                  "/ continue", choices=ON_ERROR_MODES)
    max_reasks: int = param(2, "upstream re-asks after skipped calls, per request", ge=0)
    max_continues: int = param(1, "G-STEP verification rounds per conversation", ge=0)
    logprobs: Optional[bool] = param(None, "request token log-probs from the upstream; null: when a gate that "
                                           "reads them (G-STEP) is set")
    concurrency: int = param(1, "decisions computed at once (torch already uses every core; parallel ones "
                                "contend)", ge=1)


def _serve_gate(gate) -> tuple:
    where = ("upstream=local only: on each conversation's first turn (it reads the policy's hidden states)"
             if gate.moment == "pre_generation" else "null: off")
    return Optional[str], param(None, f"an exported checkpoint dir (checkpoints/{gate.name}/<run>); {where}")


ServeGates = per_gate("ServeGates", _serve_gate, base=ServeGateOptions,
                      doc="``gates``: each gate's checkpoint (``gates.<gate>``) and how the server applies them.")


@dataclass
class ServeAuth:
    env: Optional[str] = param("TOOLWISE_API_KEYS", "comma-separated bearer keys; with none (and no file) only a "
                                                    "loopback host is served")
    file: Optional[str] = param(None, "one key per line")


@dataclass
class ServeLimits:
    max_body_bytes: int = param(1048576, "a request body's size", ge=1)
    max_messages: int = param(256, "messages in one request", ge=1)
    max_json_depth: int = param(64, "nesting of the request's JSON (OpenAI requests, tool schemas included, stay "
                                    "far below; deeper is refused with 400 before anything recurses into it)", ge=2)
    header_timeout_s: float = param(10.0, "the deadline a reverse proxy in front should give a request's head "
                                          "(nginx client_header_timeout): uvicorn has no setting for it, so the "
                                          "server warns at start on a non-loopback host and the guide's proxy "
                                          "section uses this value", gt=0)
    body_timeout_s: float = param(30.0, "reading a request's body; past it 408 and the connection closes", gt=0)
    keep_alive_s: float = param(5.0, "an idle kept-alive connection is closed after this (uvicorn's "
                                     "timeout_keep_alive)", gt=0)
    shutdown_timeout_s: float = param(5.0, "on SIGTERM, in-flight requests get this long, then are cancelled "
                                           "(uvicorn's timeout_graceful_shutdown)", gt=0)


@dataclass
class ServeConfig:
    host: str = param("127.0.0.1", "another address needs an API key (auth), or the server refuses to start")
    port: int = param(8080, "the port", ge=1, le=65535)
    log_level: str = param("info", "uvicorn's", choices=("critical", "error", "warning", "info", "debug", "trace"))
    upstream: Any = required("http | local: the upstream group")
    model: ModelConfig = required("upstream=local: the policy served (the model group)")
    backend: Any = required("upstream=local: its engine (hf | vllm)")
    checkpoints: CheckpointsConfig = required("the committed checkpoints: the checkpoints group")
    gates: ServeGates = param(ServeGates(), "the gates")
    auth: ServeAuth = param(ServeAuth(), "client keys")
    limits: ServeLimits = param(ServeLimits(), "request limits")


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
    ("tasks", "custom_schema", CustomTasksConfig),
    ("tasks", "bfcl_schema", BFCLTasksConfig),
    ("tasks", "mixture_schema", MixtureTasksConfig),
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
    *(("recipe", f"{g.name}_schema", controller_recipe(g)) for g in gates().values()),
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
    """Store every schema in Hydra's ConfigStore (idempotent: storing a name again replaces it). A gate without a
    recipe file of its own (one written outside the package) is a recipe all the same: ``recipe=<gate>`` selects
    its schema with the dataclasses' defaults."""
    cs = ConfigStore.instance()
    for group, name, node in SCHEMAS:
        cs.store(group=group, name=name, node=node)
    recipe_files = Path(__file__).resolve().parent / "recipe"
    for gate in gates().values():
        if not (recipe_files / f"{gate.name}.yaml").is_file():
            cs.store(group="recipe", name=gate.name, node=controller_recipe(gate))


# ---------------------------------------------------------------------------------------------- the check
def _where(cfg: DictConfig | ListConfig, key: Any, path: str) -> str:
    return f"{path}[{key}]" if isinstance(cfg, ListConfig) else f"{path}.{key}" if path else str(key)


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
        where = _where(cfg, key, path)
        if declared is not None and key not in declared:
            out.append(f"{where} (not a field of {node_type.__name__})")
        # a typed None node comes back as a container that holds None (OmegaConf has no public is_none)
        if isinstance(value, (DictConfig, ListConfig)) and not value._is_none():
            out.extend(unknown_keys(value, where))
    return out


_BOUNDS = (("ge", operator.ge, ">="), ("gt", operator.gt, ">"), ("le", operator.le, "<="), ("lt", operator.lt, "<"))


def not_finite(value: Any) -> list[float]:
    """The floats of ``value`` (a scalar, or a list's elements) that are inf or nan. Hydra's override grammar
    reads ``inf`` and ``nan`` as floats, and no bound refuses them all (``inf`` passes ``gt=0``, ``nan`` fails
    every comparison with a message about the bound): a learning rate, a weight decay, a temperature or a τ that
    is not finite would otherwise fail late, inside torch or as silently wrong decisions."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, float) and not math.isfinite(v)]


@functools.cache
def _float_fields(node_type: type) -> frozenset[str]:
    """The fields of a schema dataclass typed ``float`` (or ``Optional[float]``, ``List[float]``): checked for
    finiteness even when they carry no other check (the derived groups' fields carry none)."""
    def holds_float(hint: Any) -> bool:
        return hint is float or any(holds_float(arg) for arg in typing.get_args(hint))
    return frozenset(name for name, hint in typing.get_type_hints(node_type).items() if holds_float(hint))


@functools.cache
def _owned_vocabulary(ref: str) -> tuple:
    module, attr = ref.split(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return tuple(member.value for member in obj)
    return tuple(obj)       # a tuple, or a registry dict's keys


def vocabulary(choices: Any) -> tuple:
    """A field's allowed values: written out, or named by ``module:attribute`` where the code that reads the value
    owns the list (so it is written once)."""
    return _owned_vocabulary(choices) if isinstance(choices, str) else tuple(choices)


def problem(value: Any, checks: dict) -> str | None:
    """What is wrong with ``value`` under a field's checks (:func:`param`), or None."""
    if value is None:
        return None
    if checks.get("finite", True):
        bad = not_finite(value)
        if bad:
            return f"{bad}: each must be a finite number" if isinstance(value, list) else "must be a finite number"
    if "choices" in checks and value not in vocabulary(checks["choices"]):
        return f"choose one of {', '.join(map(str, vocabulary(checks['choices'])))}"
    if "items" in checks:
        bad = [v for v in value if v not in vocabulary(checks["items"])]
        if bad:
            return f"{bad} not valid; choose from {', '.join(map(str, vocabulary(checks['items'])))}"
    for key, holds, word in _BOUNDS:
        if key in checks and not holds(value, checks[key]):
            return f"must be {word} {checks[key]}"
    return checks["check"](value) if "check" in checks else None


def value_errors(cfg: DictConfig | ListConfig, path: str = "") -> list[str]:
    """Values of dataclass-typed nodes that their field's checks refuse (an unknown choice, a count below 1, a
    negative rate, an inf or nan float), as ``key=value: reason``."""
    out = []
    node_type = OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None
    if dataclasses.is_dataclass(node_type):
        floats = _float_fields(node_type)
        for f in dataclasses.fields(node_type):
            checks = {k: v for k, v in f.metadata.items() if k not in ("help", "required")}
            if (not checks and f.name not in floats) or f.name not in cfg or OmegaConf.is_missing(cfg, f.name):
                continue
            value = cfg[f.name]
            value = OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) \
                else value
            why = problem(value, checks)
            if why:
                out.append(f"{_where(cfg, f.name, path)}={value!r}: {why}")
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    for key, value in items:
        if not path and key == "hydra":
            continue
        # a missing node (???) holds no value to check: OmegaConf.missing_keys reports it
        if isinstance(value, (DictConfig, ListConfig)) and not value._is_none() and not value._is_missing():
            out.extend(value_errors(value, _where(cfg, key, path)))
    return out


def build_key_errors(cfg: DictConfig) -> list[str]:
    """A controller recipe's ``points.build`` keys checked as ``data_builders.build`` will merge them onto its
    typed config: each a field of :class:`BuildConfig` with a valid value."""
    recipe = cfg.get("recipe")
    if not isinstance(recipe, DictConfig) or not isinstance(recipe.get("points"), DictConfig):
        return []
    fields = {f.name: f for f in dataclasses.fields(BuildConfig)}
    out = []
    for key, value in OmegaConf.to_container(recipe.points.build, resolve=True).items():
        where = f"recipe.points.build.{key}"
        if key not in fields:
            out.append(f"{where} (not a field of BuildConfig)")
            continue
        checks = {k: v for k, v in fields[key].metadata.items() if k not in ("help", "required")}
        why = problem(value, checks)
        if why:
            out.append(f"{where}={value!r}: {why}")
    return out


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The key or group each command-line override sets (``backend=vllm`` -> backend, ``+a.b=1`` -> a.b)."""
    return [o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))]


def refusals(cfg: DictConfig, overrides: Iterable[str]) -> list[str]:
    """Overrides the entry config or its recipe would ignore, and settings they cannot run with, each with the
    reason: the ``refusals`` of the root schema and of the recipe's."""
    keys = override_keys(overrides)
    out = []
    for node in (cfg, cfg.get("recipe")):
        node_type = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if hasattr(node_type, "refusals"):
            out.extend(node_type.refusals(cfg, keys))
    return out


def check_config(cfg: DictConfig, overrides: Iterable[str] = ()) -> DictConfig:
    """``cfg`` itself, or a ConfigCompositionException naming every key no schema declares, every value its
    field's checks refuse, and every override (``overrides``: the command line's) the config would ignore."""
    bad = unknown_keys(cfg)
    if bad:
        raise ConfigCompositionException(f"unknown config key(s): {', '.join(bad)}; recipes/schema.py lists the "
                                          f"fields of each node (a '+' override cannot add one)")
    bad = value_errors(cfg) + build_key_errors(cfg)
    if bad:
        raise ConfigCompositionException(f"invalid config value(s): {'; '.join(bad)} (recipes/schema.py has each "
                                          f"field's help and checks)")
    bad = refusals(cfg, overrides)
    if bad:
        raise ConfigCompositionException(f"refused: {'; '.join(bad)}")
    return cfg


class CheckConfig(Callback):
    """Hydra callback (``hydra.callbacks`` in ``hydra/settings.yaml``): :func:`check_config` before each job, with
    the job's own overrides.

    Hydra turns an exception raised in a callback into a warning and runs the job anyway, so a bad config ends
    the command with ``SystemExit`` (which it does not catch) and the exception's message instead."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_config(config, config.hydra.overrides.task)
        except ConfigCompositionException as e:
            raise SystemExit(f"Error composing the config: {e}") from e
