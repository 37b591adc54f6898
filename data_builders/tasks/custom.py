"""The ``custom`` task source: a team's own questions and tools, one JSON object per line.

    python -m data_builders.build tasks=custom tasks.path=my_tasks.jsonl kind=flip

A record::

    {"id": "q17",                                  # optional: the line number otherwise
     "instruction": "How many km is 26.2 miles?",
     "tools": ["units"],                           # sources by name (tasks.sources) or inline specs
     "answer": "42.16",                            # optional with a judge that needs no gold
     "scorer": {"kind": "numeric", "tolerance": 0.01},   # optional: tasks.scorer, else exact
     "category": "conversion", "difficulty": "easy",     # optional: "custom" / "medium"
     "split": "train"}                             # optional: a seeded split by id (tasks.test_fraction)

A tool source spec is what :func:`data_builders.tool_sources.source_from_spec` reads — ``{"kind": "mcp",
"command": ["python", "server.py"]}``, ``{"kind": "mcp", "url": "http://..."}``, ``{"kind": "functions",
"module": "my_tools"}``, ``{"kind": "trace", "path": "trace.jsonl"}``, or a class of your own by dotted path.
Specs shared by many records are declared once in the config (``tasks.sources={units: {...}}``) and named;
``tasks.tools`` lists the sources of records that name none. Relative paths in specs resolve against the task
file's folder, so a file and its tools move together.

Everything is checked when the file is read, before any model loads: a bad record raises
:class:`~.schema.TaskFormatError` naming the file, the line and the field.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..tool_sources import source_from_spec
from .schema import DIFFICULTIES, SPLITS, EnvSpec, Task, TaskFormatError, split_by_id, unique_ids
from .scorers import ScorerError, scorer_from_spec

DEFAULT_SCORER = "exact"
_FIELDS = {"id", "instruction", "tools", "answer", "scorer", "category", "difficulty", "split", "tags"}


def _source_specs(value: Any, named: Mapping[str, Any], base_dir: Path, fail) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        fail("tools", "expected a non-empty list of tool sources (names from tasks.sources, or specs)")
    specs = []
    for j, item in enumerate(value):
        if isinstance(item, str):
            if item not in named:
                fail(f"tools[{j}]", f"no tool source named {item!r}; tasks.sources has {sorted(named) or 'none'}")
            spec = dict(named[item])
            spec.setdefault("name", item)
        elif isinstance(item, Mapping):
            spec = dict(item)
        else:
            fail(f"tools[{j}]", f"expected a source name or a spec object, got {type(item).__name__}")
        if not isinstance(spec.get("kind"), str) or not spec["kind"]:
            fail(f"tools[{j}].kind", "missing: a source kind (mcp, functions, trace) or package.module:Class")
        problem = _check_spec(spec, base_dir)
        if problem:
            fail(f"tools[{j}]", problem)
        specs.append(spec)
    return tuple(specs)


_checked: dict[str, str] = {}


def _check_spec(spec: dict, base_dir: Path) -> str:
    """What is wrong with a source spec ("" if nothing), found by building the source without starting it
    (constructors check their fields; servers and workers start on the first call), once per distinct spec."""
    key = json.dumps([spec, str(base_dir)], sort_keys=True, default=str)
    if key not in _checked:
        try:
            source_from_spec(dict(spec), base_dir=base_dir).close()
            _checked[key] = ""
        except (ValueError, TypeError, ImportError) as exc:
            _checked[key] = str(exc)
    return _checked[key]


def read_custom(path: str | Path, *, sources: Mapping[str, Any] | None = None, tools: Sequence[Any] | None = None,
                scorer: Any = None, test_fraction: float = 0.3, split_seed: int = 0) -> list[Task]:
    """Every task of the file (both splits), checked."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"custom task file not found: {path} (tasks.path)")
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"tasks.test_fraction must be in [0, 1], got {test_fraction}")
    named = dict(sources or {})
    default_scorer = scorer if scorer is not None else DEFAULT_SCORER
    out = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {line_no}"

        def fail(field: str, problem: str):
            raise TaskFormatError(str(path), where, field, problem)

        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            fail("<json>", f"not valid JSON: {exc}")
        if not isinstance(rec, dict):
            fail("<record>", f"expected an object, got {type(rec).__name__}")
        unknown = sorted(set(rec) - _FIELDS)
        if unknown:
            fail(unknown[0], f"unknown field; a record has {sorted(_FIELDS)}")
        tid = rec.get("id", line_no)
        if isinstance(tid, bool) or not isinstance(tid, (int, str)):
            fail("id", f"expected a string or an integer, got {type(tid).__name__}")
        where = f"line {line_no} (id {tid})"
        instruction = rec.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            fail("instruction", "missing or empty")
        specs = _source_specs(rec.get("tools", list(tools) if tools else None), named, path.parent.resolve(), fail)
        answer = rec.get("answer")
        if answer is not None and (isinstance(answer, bool) or not isinstance(answer, (str, int, float))):
            fail("answer", f"expected a string or a number, got {type(answer).__name__}")
        scorer_spec = rec.get("scorer", default_scorer)
        try:
            built = scorer_from_spec(scorer_spec)
        except ScorerError as exc:
            fail("scorer", str(exc))
        if answer is None and built.needs_gold:
            fail("answer", f"missing, and the {built.name} scorer needs a gold answer (a judge whose rubric "
                           "does not use {gold} can score without one)")
        difficulty = rec.get("difficulty", "medium")
        if difficulty not in DIFFICULTIES:
            fail("difficulty", f"{difficulty!r} not in {DIFFICULTIES}")
        split = rec.get("split") or split_by_id(tid, test_fraction, split_seed)
        if split not in SPLITS:
            fail("split", f"{split!r} not in {SPLITS}")
        category = rec.get("category", "custom")
        if not isinstance(category, str) or not category:
            fail("category", "expected a non-empty string")
        tags = rec.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            fail("tags", "expected a list of strings")
        label = "+".join(str(s.get("name") or s["kind"]) for s in specs)
        env = EnvSpec(label, (), {}, sources=specs, base_dir=str(path.parent.resolve()))
        out.append(Task(id=tid, instruction=instruction, environments=(env,),
                        expected={"answer": None if answer is None else str(answer)}, difficulty=difficulty,
                        tags=tuple(tags), category=category, split=split, scorer=built.spec()))
    if not out:
        raise TaskFormatError(str(path), "<file>", "<records>", "no task in the file")
    return unique_ids(out, str(path))
