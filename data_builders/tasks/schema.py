"""The Task contract (When2Tool schema, docs/architecture.md#task) plus toolwise's ``category`` and ``split``.

Every task source yields :class:`Task`. Bad records raise :class:`TaskFormatError` naming the
file, the record and the field, so a user can fix the input without guessing.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..environments import ENVIRONMENTS

DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "test")

# When2Tool group per environment (why a tool helps): A scale, B missing knowledge, C reliable execution.
ENV_CATEGORY = {
    "CalculatorEnv": "A", "StatisticsEnv": "A", "CountingEnv": "A", "MatrixEnv": "A", "PrimeEnv": "A",
    "RetrieverEnv": "B", "HistoricalYearEnv": "B", "GameRuleEnv": "B", "HashEnv": "B", "DecodingEnv": "B",
    "ListManipulationEnv": "C", "DateTimeEnv": "C", "CodeExecutorEnv": "C", "ScheduleEnv": "C",
    "RegexMatchEnv": "C",
}


class TaskFormatError(ValueError):
    """A task record is malformed. The message names source file, record and field."""

    def __init__(self, source: str, record: Any, field_name: str, problem: str):
        self.source, self.record, self.field_name, self.problem = source, record, field_name, problem
        super().__init__(f"{source}: record {record}: field '{field_name}': {problem}")


def split_by_id(task_id: Any, test_fraction: float, seed: int) -> str:
    """The split of a record that names none (custom task files, BFCL), by id: the same id lands in the same split
    on every machine and every run. The hash is salted with "test-split": the builder carves its val split out of
    train by the unsalted ``{seed}:{id}`` hash (``data_builders.build.split_of``), and the same hash here would
    leave every train task above the test fraction, so val would be empty whenever val_fraction <= test_fraction."""
    h = hashlib.sha256(f"test-split:{seed}:{task_id}".encode()).digest()
    return "test" if int.from_bytes(h[:8], "big") / 2**64 < test_fraction else "train"


@dataclass(frozen=True)
class EnvSpec:
    """The tools of a task: a When2Tool environment (``name``, the tools it offers, its parameters), or, when
    ``sources`` is set, a team's own tool sources (``data_builders/tool_sources``: MCP servers, Python
    functions, recorded traces) whose tools together form the task's environment; ``name`` is then a label,
    ``tools`` the names offered (empty: all of them) and ``base_dir`` the folder relative paths in the specs
    resolve against (the task file's)."""
    name: str
    tools: tuple[str, ...]
    parameters: dict[str, Any] = field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()
    base_dir: str | None = None


@dataclass(frozen=True)
class Task:
    id: int | str
    instruction: str
    environments: tuple[EnvSpec, ...]
    expected: dict[str, Any]
    difficulty: str
    multi_step: bool = False
    tags: tuple[str, ...] = ()
    category: str = "other"
    split: str = "train"
    # How the final answer is scored (data_builders/tasks/scorers.py): None is When2Tool's boxed-answer rule.
    scorer: dict[str, Any] | None = None

    @property
    def answer(self) -> str:
        """The gold answer as text ("" for a task without one, which only a judge can score)."""
        gold = self.expected.get("answer")
        return "" if gold is None else str(gold)

    @property
    def gold(self) -> str | None:
        gold = self.expected.get("answer")
        return None if gold is None else str(gold)

    @property
    def env(self) -> EnvSpec:
        """When2Tool tasks always carry exactly one environment."""
        return self.environments[0]

    @property
    def expected_steps(self) -> int:
        """When2Tool's denominator of the tool-call rate: len(expected.steps) when present, else 3 if multi_step,
        else 1."""
        steps = self.expected.get("steps")
        if steps:
            return len(steps)
        return 3 if self.multi_step else 1

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["environments"] = [
            {"name": e.name, "tools": list(e.tools), "parameters": e.parameters,
             **({"sources": list(e.sources), "base_dir": e.base_dir} if e.sources else {})}
            for e in self.environments
        ]
        if self.scorer is None:
            d.pop("scorer")
        d["tags"] = list(self.tags)
        return d

    @classmethod
    def from_dict(cls, rec: Any, *, source: str = "<memory>", index: Any = None, split: str | None = None) -> "Task":
        """Validate one When2Tool-schema record; ``split``/``category`` are filled in when absent."""
        where = rec.get("id", index) if isinstance(rec, dict) else index
        if not isinstance(rec, dict):
            raise TaskFormatError(source, where, "<record>", f"expected an object, got {type(rec).__name__}")

        def need(name: str, typ: type | tuple[type, ...]) -> Any:
            if name not in rec:
                raise TaskFormatError(source, where, name, "missing")
            v = rec[name]
            if not isinstance(v, typ) or isinstance(v, bool):  # bool is an int subclass; never valid here
                raise TaskFormatError(source, where, name, f"expected {getattr(typ, '__name__', typ)}, got {type(v).__name__}")
            return v

        tid = need("id", (int, str))
        instruction = need("instruction", str)
        if not instruction.strip():
            raise TaskFormatError(source, where, "instruction", "empty")
        envs_raw = need("environments", list)
        if not envs_raw:
            raise TaskFormatError(source, where, "environments", "empty list")
        envs = []
        for j, e in enumerate(envs_raw):
            f = f"environments[{j}]"
            if not isinstance(e, dict):
                raise TaskFormatError(source, where, f, "expected an object")
            if not isinstance(e.get("name"), str):
                raise TaskFormatError(source, where, f + ".name", "missing or not a string")
            # Checked here, not when the episode starts: a run must not die mid-way and lose finished episodes.
            if e["name"] not in ENVIRONMENTS:
                raise TaskFormatError(source, where, f + ".name",
                                      f"unknown environment {e['name']!r}; known: {', '.join(ENVIRONMENTS)}")
            tools = e.get("tools")
            if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
                raise TaskFormatError(source, where, f + ".tools", "expected a list of tool names")
            # The environment would refuse them when the episode starts, mid-run, naming neither file nor record.
            known = [s["name"] for s in ENVIRONMENTS[e["name"]].schemas()]
            unknown = [t for t in tools if t not in known]
            if unknown:
                raise TaskFormatError(source, where, f + ".tools",
                                      f"unknown tools {unknown} for {e['name']}; known: {', '.join(sorted(known))}")
            params = e.get("parameters", {})
            if not isinstance(params, dict):
                raise TaskFormatError(source, where, f + ".parameters", "expected an object")
            envs.append(EnvSpec(e["name"], tuple(tools), params))
        expected = need("expected", dict)
        if "answer" not in expected:
            raise TaskFormatError(source, where, "expected.answer", "missing")
        if not isinstance(expected["answer"], (str, int, float)):
            raise TaskFormatError(source, where, "expected.answer", "expected a string")
        difficulty = need("difficulty", str)
        if difficulty not in DIFFICULTIES:
            raise TaskFormatError(source, where, "difficulty", f"{difficulty!r} not in {DIFFICULTIES}")
        multi_step = rec.get("multi_step", False)
        if not isinstance(multi_step, bool):
            raise TaskFormatError(source, where, "multi_step", "expected a boolean")
        tags = rec.get("tags", [])
        if not isinstance(tags, list):
            raise TaskFormatError(source, where, "tags", "expected a list")
        sp = rec.get("split", split)
        if sp is None:
            raise TaskFormatError(source, where, "split", "missing and not given by the source")
        # Multi-hop tasks are When2Tool's fourth group, reported apart from A/B/C.
        category = rec.get("category") or ("M" if multi_step else ENV_CATEGORY.get(envs[0].name, "other"))
        return cls(
            id=tid, instruction=instruction, environments=tuple(envs),
            expected={**expected, "answer": str(expected["answer"])}, difficulty=difficulty,
            multi_step=multi_step, tags=tuple(tags), category=category, split=sp,
        )


def unique_ids(tasks: list[Task], source: str) -> list[Task]:
    """``tasks`` (one file's) unchanged, or a TaskFormatError naming the first repeated id: trajectory caches,
    probe scores and decision points are keyed by task id, so a repeat would silently stand for two tasks."""
    seen: set = set()
    for t in tasks:
        if t.id in seen:
            raise TaskFormatError(source, t.id, "id", "duplicate id (task ids must be unique within a file)")
        seen.add(t.id)
    return tasks


def digest(obj: Any, n: int = 12) -> str:
    """A short stable hash of a JSON-able value (keys sorted, anything else by ``str``)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


_SCORER_RUNTIME = frozenset({"timeout_s", "max_retries", "cache_dir", "api_key_env"})


def task_key(task: Task) -> str:
    """A task's identity across runs: its id plus a hash of its content, so an edited task is a new key.
    The evaluator's trajectory cache is keyed on it (changing it invalidates every cached trajectory) and
    GRPO's rewards group a prompt's episodes by it."""
    content = [task.instruction, task.answer, task.env.name]
    if task.env.sources or task.scorer is not None:     # a team's own tools and scorer are part of what it asks
        # ... but not how a judge is reached (its timeout, retries, cache, key): the verdict rule is the same
        rule = {k: v for k, v in (task.scorer or {}).items() if k not in _SCORER_RUNTIME}
        content += [list(task.env.sources), rule]
    return f"{task.id}:{digest(content, 8)}"
