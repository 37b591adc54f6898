"""Trajectory records (DESIGN.md, "Trajectory"): enough to recompute PTE and every metric without
rerunning the model. Stored as JSONL, one episode per line."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

SCHEMA_VERSION = 1


def error_kind(payload: dict) -> str | None:
    """Classify a tool payload (SPEC §2.2 pipeline step that produced it); None when it succeeded."""
    if payload.get("success", True) is not False:
        return None
    msg = str(payload.get("message", ""))
    if msg.startswith("[SKIPPED]"):
        return "skipped"
    if msg.startswith("Tool ") and msg.endswith("not available in this task."):
        return "unavailable_tool"
    if msg.startswith("Missing required parameter"):
        return "missing_param"
    if msg.startswith("Parameter ") and " should have type " in msg:
        return "bad_type"
    if msg.startswith("Argument '") and (" too long " in msg or " too many " in msg or " too large " in msg):
        return "argument_limit"
    if msg.startswith("[TOOL_RUNTIME_ERROR]"):
        return "runtime_error"
    return "tool_error"


def write_jsonl(path: str | Path, records: Iterable[dict]) -> Path:
    """Write atomically (temp file + rename) so a crash never leaves a truncated file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    return path


def read_jsonl(path: str | Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {n}: not valid JSON ({e.msg})") from e


def summarize(trajectories: list[dict]) -> dict[str, Any]:
    """Aggregate metrics of a rollout; definitions are in the README ("What the numbers mean")."""
    n = len(trajectories)
    if n == 0:
        return {"tasks": 0}
    turns = sum(len(t["turns"]) for t in trajectories)
    return {
        "tasks": n,
        "accuracy": sum(t["correct"] for t in trajectories) / n,
        "tool_calls_per_task": sum(t["tool_calls"] for t in trajectories) / n,
        "tool_call_rate": sum(t["tool_calls"] for t in trajectories) / sum(t["expected_steps"] for t in trajectories),
        "format_error_rate": sum(t["format_errors"] for t in trajectories) / max(turns, 1),
        "malformed_calls_per_task": sum(t["malformed_calls"] for t in trajectories) / n,
        "tokens_per_task": sum(sum(tr["decode_tokens"] for tr in t["turns"]) for t in trajectories) / n,
        "prefill_tokens_per_task": sum(sum(tr["prefill_tokens"] for tr in t["turns"]) for t in trajectories) / n,
        "token_cost_per_task": sum(t["token_cost"] for t in trajectories) / n,
        "rounds_per_task": sum(t["rounds"] for t in trajectories) / n,
    }
