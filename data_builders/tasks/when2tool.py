"""The ``when2tool`` task source: When2Tool's task files from a directory, or the hub dataset.

Directory layout (what the benchmark repository's ``generate_data.sh`` writes)::

    tasks_v1_train.json  tasks_v1_test.json  tasks_v1_multihop_train.json  tasks_v1_multihop_test.json

The hub copy ``cesun/When2Tool`` (configs ``single_hop`` / ``multi_hop``, splits train/test) stores flat
rows whose ``tools``, ``parameters`` and ``steps`` are JSON strings; they are rebuilt into
the task object here so both sources yield identical :class:`Task` values and one set of environments
serves both.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from .schema import SPLITS, Task, TaskFormatError, unique_ids

HUB_ID = "cesun/When2Tool"
HOPS = ("single", "multi", "both")
_FILES = {"single": "tasks_v1_{split}.json", "multi": "tasks_v1_multihop_{split}.json"}
_HUB_CONFIG = {"single": "single_hop", "multi": "multi_hop"}


def _hop_kinds(hops: str) -> tuple[str, ...]:
    if hops not in HOPS:
        raise ValueError(f"hops must be one of {HOPS}, got {hops!r}")
    return ("single", "multi") if hops == "both" else (hops,)


def read_task_file(path: str | Path, split: str) -> list[Task]:
    """One When2Tool JSON task file. Errors name the file, the record (its id, else its index) and the field."""
    path = Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(str(path), "<file>", "<json>", f"not valid JSON: {exc}") from exc
    if not isinstance(records, list):
        raise TaskFormatError(str(path), "<file>", "<top level>", f"expected a JSON array, got {type(records).__name__}")
    return unique_ids([Task.from_dict(rec, source=str(path), index=i, split=split) for i, rec in enumerate(records)],
                      str(path))


def load_from_dir(path: str | Path, split: str, hops: str = "both") -> list[Task]:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"When2Tool task directory not found: {root}")
    tasks: list[Task] = []
    for kind in _hop_kinds(hops):
        f = root / _FILES[kind].format(split=split)
        if not f.is_file():
            raise FileNotFoundError(f"{f} is missing (expected {', '.join(_FILES[k].format(split=split) for k in _FILES)})")
        tasks.extend(read_task_file(f, split))
    return tasks


def _json_field(row: Mapping[str, Any], name: str, source: str, where: Any, default: Any) -> Any:
    value = row.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskFormatError(source, where, name, f"not valid JSON: {exc}") from exc
    return value


def record_from_row(row: Mapping[str, Any], *, source: str, index: int) -> dict[str, Any]:
    """Rebuild the nested task object (docs/guide.md#when2tool-tasks-and-gold-formats) from one flat hub row."""
    where = row.get("id", index)
    if not isinstance(row.get("env_name"), str):
        raise TaskFormatError(source, where, "env_name", "missing or not a string")
    expected: dict[str, Any] = {"answer": row.get("answer")}
    steps = _json_field(row, "steps", source, where, None)
    if steps:
        if not isinstance(steps, list):
            raise TaskFormatError(source, where, "steps", "expected a list")
        expected["steps"] = [str(s) for s in steps]
    return {
        "id": row.get("id"),
        "difficulty": row.get("difficulty"),
        "multi_step": bool(row.get("multi_step", False)),
        "instruction": row.get("instruction"),
        "environments": [{
            "name": row["env_name"],
            "tools": _json_field(row, "tools", source, where, None),
            "parameters": _json_field(row, "parameters", source, where, {}),
        }],
        "expected": expected,
        "tags": _json_field(row, "tags", source, where, []),
    }


def tasks_from_rows(rows: Iterable[Mapping[str, Any]], *, source: str, split: str) -> list[Task]:
    return unique_ids([Task.from_dict(record_from_row(r, source=source, index=i), source=source, index=i, split=split)
                       for i, r in enumerate(rows)], source)


def load_from_hub(split: str, hops: str = "both", hub_id: str = HUB_ID, revision: str | None = None) -> list[Task]:
    """Through ``datasets`` (cached by it); needs the network on first use."""
    # why: datasets (pyarrow, pandas: ~2 s to import) is for the hub only; every process that touches a task
    # imports this module, the run-time controller hooks included, and task files load without it.
    from datasets import load_dataset
    tasks: list[Task] = []
    for kind in _hop_kinds(hops):
        config = _HUB_CONFIG[kind]
        try:
            ds = load_dataset(hub_id, config, split=split, revision=revision)
        except Exception as exc:
            raise RuntimeError(
                f"could not load {hub_id} ({config}, {split}) from the hub: {exc}. Offline? Point "
                f"tasks.path at a directory with the When2Tool task files instead."
            ) from exc
        tasks.extend(tasks_from_rows(ds, source=f"{hub_id}:{config}/{split}", split=split))
    return tasks


def load_when2tool(split: str, *, path: str | Path | None = None, hops: str = "both",
                   hub_id: str = HUB_ID, revision: str | None = None) -> list[Task]:
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    if path:
        return load_from_dir(path, split, hops)
    return load_from_hub(split, hops, hub_id, revision)
