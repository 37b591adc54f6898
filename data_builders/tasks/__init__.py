"""Task sources. Every source yields :class:`~data_builders.tasks.schema.Task` (When2Tool schema).

``builtin``: deterministic generators shipped with toolwise (no external files; a fresh clone has tasks).
``when2tool``: the benchmark's task files from a directory (``path=``), else the hub dataset.
``gsm8k``: GSM8K-format math word problems (a ``.jsonl`` file, ``path=``) for the Calculator, optionally
with a semantic distractor per problem (``distractor=``, from the tool-use-tax paper, arXiv 2605.00136).
``custom``: a team's own JSONL task file and tool sources.
``bfcl``: the Berkeley Function Calling Leaderboard's irrelevance, simple_python and multiple categories, scored
on the episode's calls (``data_builders/tasks/bfcl.py``).
"""
from __future__ import annotations

import inspect
import random
from collections import defaultdict
from typing import Sequence

from omegaconf import OmegaConf

from ..environments import ENVIRONMENTS
from . import bfcl
from .builtin import BUILTIN_ENVS, N_PER_CELL, generate_builtin
from .custom import read_custom
from .generators import MULTIHOP_GENERATORS
from .gsm8k import load_gsm8k
from .schema import DIFFICULTIES, ENV_CATEGORY, EnvSpec, Task, TaskFormatError
from .when2tool import HUB_ID, load_when2tool

__all__ = ["Task", "EnvSpec", "TaskFormatError", "ENV_CATEGORY", "load_tasks", "interleave", "stratified_sample",
           "tasks_from_config", "check_selection", "SOURCE_ENVS", "SOURCE_OPTIONS", "read_source",
           "select_tasks", "MIXTURE",
           "TASK_SOURCES"]

TASK_SOURCES = ("builtin", "when2tool", "gsm8k", "custom", "bfcl")
MIXTURE = "mixture"   # the ``tasks`` option that lists several sources (tasks_from_config)
# The environments each source can yield: an ``envs`` filter naming any other selects nothing, silently.
SOURCE_ENVS = {"builtin": tuple(sorted(set(BUILTIN_ENVS) | set(MULTIHOP_GENERATORS))),
               "when2tool": tuple(ENVIRONMENTS), "gsm8k": ("CalculatorEnv",),
               "custom": None,     # a custom file's environments are its own sources' labels: any name
               "bfcl": bfcl.ENVS}   # one per category


def _positive_int(name: str, value) -> None:
    # bool is an int subclass: limit=true must not mean limit=1
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be null (all) or a positive integer, got {value!r}")


def check_selection(source: str, *, limit=None, per_cell=None, envs=None, difficulties=None) -> None:
    """Refuse a selection that would silently pick the wrong tasks (``limit=0`` meaning all, ``limit=-3``
    dropping three, ``per_cell=-1`` one per cell, a misspelt environment or difficulty matching nothing), before
    any task is read or any model loads. Messages list the valid values."""
    if source not in TASK_SOURCES:
        raise ValueError(f"unknown task source {source!r}; known: {TASK_SOURCES}")
    _positive_int("limit", limit)
    _positive_int("tasks.per_cell", per_cell)
    for name, values, valid in (("tasks.envs", envs, SOURCE_ENVS[source]),
                                ("tasks.difficulties", difficulties, DIFFICULTIES)):
        if values is None:
            continue
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"{name} must be null (all) or a list of names, got {values!r}; valid: "
                             f"{list(valid) if valid is not None else 'any label'}")
        if not values:
            raise ValueError(f"{name} is an empty list, which selects no task; use null for all")
        unknown = [v for v in values if valid is not None and v not in valid]
        if unknown:
            raise ValueError(f"{name}: {unknown} not valid for the {source} task source; valid: {list(valid)}")


def interleave(tasks: Sequence[Task]) -> list[Task]:
    """Round-robin over (difficulty, environment) cells, keeping each cell's order, so that any prefix
    (``limit=32``) covers every cell as evenly as possible. Within a difficulty the cells alternate
    between categories (A, B, C, multi-hop), so a prefix of 3 already spans A, B and C."""
    cells: dict[tuple[str, str, bool], list[Task]] = defaultdict(list)
    for t in tasks:
        cells[(t.difficulty, t.env.name, t.multi_step)].append(t)
    env_rank = {name: i for i, name in enumerate(ENV_CATEGORY)}
    diff_rank = {d: i for i, d in enumerate(DIFFICULTIES)}

    def order(key: tuple[str, str, bool]) -> tuple:
        difficulty, env, multi = key
        category = cells[key][0].category
        # position of this env among the envs of its category, then the category: A1 B1 C1 M1 A2 B2 ...
        same_cat = sorted({k[1:] for k in cells if k[0] == difficulty and cells[k][0].category == category},
                          key=lambda e: (env_rank.get(e[0], 99), e))
        return diff_rank.get(difficulty, 9), same_cat.index((env, multi)), category

    queues = [cells[k] for k in sorted(cells, key=order)]
    out: list[Task] = []
    for depth in range(max((len(q) for q in queues), default=0)):
        out.extend(q[depth] for q in queues if depth < len(q))
    return out


def load_tasks(source: str = "builtin", *, split: str = "test", limit: int | None = None,
               envs: Sequence[str] | None = None, difficulties: Sequence[str] | None = None,
               per_cell: int | None = None, sample_seed: int = 0, **options) -> list[Task]:
    """Tasks of one split from a source: the source's tasks (:func:`read_source`, which takes the source's own
    ``options``), then the run's selection of them (:func:`select_tasks`: filtered, subsampled, interleaved over
    (difficulty, environment), cut to ``limit``).

    ``per_cell=k`` keeps a stratified subsample: k tasks drawn (seeded by ``sample_seed``) from every
    (environment, difficulty, hops) cell, for runs too expensive for the whole split.
    Bad filters (:func:`check_selection`) and a selection of no task at all are errors.
    """
    check_selection(source, limit=limit, per_cell=per_cell, envs=envs, difficulties=difficulties)
    tasks = select_tasks(read_source(source, split, envs=envs, **options), envs=envs, difficulties=difficulties,
                         per_cell=per_cell, sample_seed=sample_seed, limit=limit)
    if not tasks:
        # Every consumer fails later and less clearly on nothing (nan accuracy, a build with no points).
        given = {"split": split, "path": options.get("path"), "hops": options.get("hops"), "envs": envs,
                 "difficulties": difficulties, "per_cell": per_cell,
                 "n_per_cell": options.get("n_per_cell", N_PER_CELL) if source == "builtin" else None}
        raise ValueError(f"the {source} task source selected no task with "
                         + ", ".join(f"{k}={list(v) if isinstance(v, (list, tuple)) else v!r}"
                                     for k, v in given.items() if v is not None))
    return tasks


# ---------------------------------------------------------------------------- reading a source
def _builtin(split: str, *, envs: Sequence[str] | None = None, n_per_cell: int = N_PER_CELL, seed: int = 0,
             hops: str | None = None, tier: str | None = None, n_per_template: int | None = None,
             train_n_per_cell: int | None = None, train_n_per_template: int | None = None) -> list[Task]:
    """``tier``: standard | trivial | both, the trivial tier being the tasks the default policy answers unaided
    often (``builtin.generate_trivial``); ``hops``: single | multi | both.

    ``train_n_per_cell`` / ``train_n_per_template`` (None: as the other splits) size the train split alone, so
    a build gets more training points while the test split stays the same tasks (each cell and template draws
    from its own per-split stream, and a smaller count is a prefix of a larger one). Trivial templates give
    each instance of their train share at most once then: a repeated question would be a duplicate point, and
    one that landed in val beside its twin in train would leak."""
    train = split == "train"
    if train and train_n_per_cell is not None:
        n_per_cell = train_n_per_cell
    once = train and train_n_per_template is not None
    if once:
        n_per_template = train_n_per_template
    return generate_builtin(split, n_per_cell=n_per_cell, seed=seed, envs=envs, hops=hops or "single",
                            tier=tier or "standard", n_per_template=20 if n_per_template is None else n_per_template,
                            repeat=not once)


def _when2tool(split: str, *, path: str | None = None, hops: str | None = None, hub_id: str | None = None,
               revision: str | None = None) -> list[Task]:
    """The benchmark's files under ``path``, else the hub dataset ``hub_id`` at ``revision``."""
    return load_when2tool(split, path=path, hops=hops or "both", hub_id=hub_id or HUB_ID, revision=revision)


def _gsm8k(split: str, *, path: str | None = None, distractor: str | None = None,
           distractor_seed: int = 0) -> list[Task]:
    """A ``.jsonl`` file at ``path``; ``distractor``: a kind from ``distractors.DISTRACTOR_KINDS``, or None."""
    if path is None:
        raise ValueError("the gsm8k task source needs a file: pass tasks.path=<file.jsonl> "
                         "(e.g. GSM8K's train.jsonl from github.com/openai/grade-school-math)")
    return load_gsm8k(path, split, distractor=distractor, distractor_seed=distractor_seed)


def _custom(split: str, *, path: str | None = None, sources: dict | None = None, tools: list | None = None,
            scorer=None, test_fraction: float = 0.3, split_seed: int = 0) -> list[Task]:
    """A team's own JSONL task file (``data_builders/tasks/custom.py``), one split of it."""
    if path is None:
        raise ValueError("the custom task source needs a file: pass tasks.path=<file.jsonl> (data_builders/tasks/"
                         "custom.py describes a record)")
    tasks = read_custom(path, sources=sources, tools=tools, scorer=scorer, test_fraction=test_fraction,
                        split_seed=split_seed)
    return [t for t in tasks if t.split == split]


def _bfcl(split: str, *, path: str | None = None, categories: Sequence[str] | None = None,
          test_fraction: float = 0.3, split_seed: int = 0) -> list[Task]:
    """BFCL v4's ``categories`` (None: irrelevance, simple_python, multiple) from the bfcl-eval wheel at ``path``,
    else from where ``data_builders/tasks/bfcl.py`` looks by default; one split of them."""
    return bfcl.load_bfcl(path, bfcl.CATEGORIES if categories is None else categories, split,
                          test_fraction=test_fraction, split_seed=split_seed)


_READERS = {"builtin": _builtin, "when2tool": _when2tool, "gsm8k": _gsm8k, "custom": _custom, "bfcl": _bfcl}
# Each source's own options: its reader's keyword arguments (``envs`` is a selection option the builtin
# generators also take, to generate only those environments).
SOURCE_OPTIONS = {source: tuple(p for p in inspect.signature(read).parameters if p not in ("split", "envs"))
                  for source, read in _READERS.items()}


def read_source(source: str, split: str, *, envs: Sequence[str] | None = None, **options) -> list[Task]:
    """One split of a source's tasks, before selection. ``options`` are the source's own (:data:`SOURCE_OPTIONS`);
    another source's option is ignored (a caller may pass a tasks group's shared defaults), except those that
    would change which tasks come back (``distractor``, ``tier``, ``n_per_template``, ``train_n_per_*``), which are
    refused."""
    known = {name for names in SOURCE_OPTIONS.values() for name in names}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"load_tasks() got an unexpected keyword argument {unknown[0]!r}")
    if options.get("distractor") is not None and source != "gsm8k":
        raise ValueError(f"distractor= applies to the gsm8k task source only, not {source!r}")
    builtin_only = [k for k in ("tier", "n_per_template", "train_n_per_cell", "train_n_per_template")
                    if options.get(k) is not None]
    if builtin_only and source != "builtin":
        raise ValueError(f"{'= and '.join(builtin_only)}= apply to the builtin task source only, not {source!r}")
    if source not in _READERS:
        raise ValueError(f"unknown task source {source!r}; known: {TASK_SOURCES}")
    own = {k: v for k, v in options.items() if k in SOURCE_OPTIONS[source]}
    return _READERS[source](split, envs=envs, **own) if source == "builtin" else _READERS[source](split, **own)


# ---------------------------------------------------------------------------- selecting from it
def select_tasks(tasks: Sequence[Task], *, envs: Sequence[str] | None = None,
                 difficulties: Sequence[str] | None = None, per_cell: int | None = None, sample_seed: int = 0,
                 limit: int | None = None) -> list[Task]:
    """The run's tasks out of a source's: only ``envs`` and ``difficulties`` (None: all), ``per_cell`` per cell
    (:func:`stratified_sample`), interleaved over (difficulty, environment) so that any prefix covers every cell
    (:func:`interleave`), the first ``limit``."""
    if envs:
        tasks = [t for t in tasks if t.env.name in set(envs)]
    if difficulties:
        tasks = [t for t in tasks if t.difficulty in set(difficulties)]
    if per_cell is not None:
        tasks = stratified_sample(tasks, per_cell, sample_seed)
    tasks = interleave(tasks)
    return tasks[:limit] if limit else tasks


def stratified_sample(tasks: Sequence[Task], per_cell: int, seed: int = 0) -> list[Task]:
    """``per_cell`` tasks from each (environment, difficulty, multi_step) cell, chosen by a seeded shuffle;
    the result keeps the input order. Cells smaller than ``per_cell`` are kept whole."""
    cells: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        cells[(t.env.name, t.difficulty, t.multi_step)].append(i)
    keep: set[int] = set()
    for key in sorted(cells):
        idx = cells[key]
        random.Random(f"{seed}:{key}").shuffle(idx)
        keep.update(idx[:per_cell])
    return [t for i, t in enumerate(tasks) if i in keep]


def tasks_from_config(cfg, split: str | None = None) -> list[Task]:
    """Tasks for a Hydra run: the ``tasks`` group's ``source`` picks the loader, its other keys are the
    loader's keyword arguments; ``split`` (default: the run's ``split``) and ``limit`` come from the top level.
    ``source: mixture`` (``tasks=mixture``) loads each of its parts (a source's options, or null for none) the
    same way, one after another, ``limit`` applying to each."""
    return _from_options(OmegaConf.to_container(cfg.tasks, resolve=True), split or cfg.split, cfg.get("limit"))


def _from_options(options: dict, split: str, limit: int | None = None) -> list[Task]:
    """:func:`tasks_from_config` on a plain ``tasks`` node."""
    options = dict(options)
    source = options.pop("source")
    if source == MIXTURE:
        parts = {name: part for name, part in options.items() if part is not None}
        if not parts:
            raise ValueError(f"tasks=mixture with every part null selects no task; set one of {sorted(options)}")
        return [t for part in parts.values() for t in _from_options(part, split, limit)]
    return load_tasks(source, split=split, limit=limit, **options)
