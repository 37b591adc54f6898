"""The ``tasks`` group's schemas: one per task source (``data_builders.tasks.tasks_from_config`` reads them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from data_builders.config_fields import param
from data_builders.tasks import bfcl
from data_builders.tasks.builtin import N_PER_CELL, TIERS
from data_builders.tasks.distractors import DISTRACTOR_KINDS
from data_builders.tasks.schema import DIFFICULTIES
from data_builders.tasks.when2tool import HUB_ID
from recipes.schema import store

HOPS = ("single", "multi", "both")


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


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("tasks", "builtin_schema", BuiltinTasksConfig),
    ("tasks", "when2tool_schema", When2ToolTasksConfig),
    ("tasks", "gsm8k_schema", GSM8KTasksConfig),
    ("tasks", "custom_schema", CustomTasksConfig),
    ("tasks", "bfcl_schema", BFCLTasksConfig),
    ("tasks", "mixture_schema", MixtureTasksConfig),
]
store(SCHEMAS)
