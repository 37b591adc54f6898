"""Oracle trajectories as chat-format SFT data (for ``recipe=tool_sft``).

``python -m data_builders.oracle.sft tasks=builtin split=train`` (or ``tasks=when2tool tasks.path=<dir>``)
writes ``sft_<split>.parquet`` with one conversation per row:

* ``kind="tool"``: system (+ ListManipulation contract) with the tools, the user message in the chosen
  prompt mode, one assistant tool call per oracle step (the canonical text ``prompts.tool_call_text``)
  each followed by the real tool response, and a final ``\\boxed{answer}``;
* ``kind="direct"``: the same prompt answered directly with ``\\boxed{gold}``, for tasks in the
  configured "no tool needed" cells (default: the easy tier, which When2Tool designs to be solvable
  without tools). The mixture of the two kinds is chosen by the SFT recipe, not here.

Messages are built with the agent's own prompt functions and merged as the agent merges them before
templating, so training sees exactly the text the agent shows at run time. Test tasks are refused:
nothing from a test split may enter training data.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import hydra
from datasets import Dataset
from omegaconf import DictConfig, OmegaConf

import data_builders.config  # noqa: F401 - its schemas, stored before Hydra composes
from recipes import CONFIG_DIR

from ..agent import prompts as P
from ..environments import make_environment
from ..environments.base import serialize
from ..tasks import tasks_from_config
from ..tasks.schema import Task
from .core import OracleRun, run_oracle


class SplitLeakError(ValueError):
    """A test task was offered for training data."""


def _teacher_answer(run: OracleRun) -> str | None:
    """The answer a demonstration may end with: the oracle's when correct; for reading tasks the oracle
    misread, the gold when it appears verbatim in a tool result (a careful reader gets it); else None."""
    if run.correct:
        return run.answer
    gold = run.task.answer
    if gold and any(gold.lower() in serialize(s.result).lower() for s in run.steps):
        return gold
    return None


def tool_example(run: OracleRun, mode: str, reasoning: bool, call_format: str) -> dict | None:
    answer = _teacher_answer(run)
    if answer is None or not run.steps:
        return None
    task = run.task
    messages = P.initial_messages(task.instruction, task.env.name, mode, reasoning, call_format)
    for step in run.steps:
        messages.append({"role": "assistant", "content": P.tool_call_text(step.name, step.arguments, call_format)})
        messages.append(P.tool_response_message(serialize(step.result), call_format))
    messages.append({"role": "assistant", "content": f"\\boxed{{{answer}}}"})
    return _row(task, messages, "tool", mode, len(run.steps))


def direct_example(task: Task, mode: str, reasoning: bool, call_format: str) -> dict:
    messages = P.initial_messages(task.instruction, task.env.name, mode, reasoning, call_format)
    messages.append({"role": "assistant", "content": f"\\boxed{{{task.answer}}}"})
    return _row(task, messages, "direct", mode, 0)


def _row(task: Task, messages: list[dict], kind: str, mode: str, n_calls: int) -> dict:
    tools = make_environment(task.env).tool_specs()
    return {
        "messages": P.template_messages(messages),
        "tools": json.dumps(tools, ensure_ascii=False),  # a JSON string: tool schemas differ in shape per env
        "task_id": str(task.id), "env": task.env.name, "difficulty": task.difficulty, "category": task.category,
        "multi_step": task.multi_step, "split": task.split, "kind": kind, "mode": mode, "n_calls": n_calls,
    }


@dataclass(frozen=True)
class DirectRule:
    """Which tasks also get a direct ``\\boxed{gold}`` answer (no call), and in which prompt modes: each
    eligible task (``difficulties``; multi-hop ones only with ``multi_step``; of ``categories`` when given,
    A scale, B knowledge, C execution, M multi-hop) gets one with probability ``fraction``, written in a mode
    drawn from ``modes``."""

    modes: tuple[str, ...]
    difficulties: tuple[str, ...] = ("easy",)
    fraction: float = 1.0
    multi_step: bool = False
    categories: tuple[str, ...] | None = None

    def eligible(self, task: Task) -> bool:
        return (task.difficulty in self.difficulties and (self.multi_step or not task.multi_step)
                and (self.categories is None or task.category in self.categories))


def build_examples(tasks: Iterable[Task], *, modes: Sequence[str] = ("default",), reasoning: bool = False,
                   call_format: str = "xml", direct_difficulties: Sequence[str] = ("easy",),
                   direct_envs: Sequence[str] | None = None, direct_mode: str | None = None,
                   direct_fraction: float = 1.0, rng: random.Random | None = None,
                   direct_rules: Sequence[DirectRule] | None = None) -> tuple[list[dict], Counter]:
    """Rows for the tasks, plus counts of what was kept and dropped.

    Without ``rng`` every task is rendered in every mode and every eligible task gets a direct answer.
    With ``rng`` (a training mixture) each task is rendered in one mode drawn from ``modes``, and an
    eligible task gets a direct answer with probability ``direct_fraction``. Direct answers are written in
    ``direct_mode`` when given (e.g. ``no_tool``), else in the demonstration's mode.

    ``direct_rules`` (with ``rng``; replaces the ``direct_*`` arguments): each rule may give a task a direct
    answer in one of its modes; the task's tool demonstration is then drawn from the ``modes`` its direct
    answers do not use, so no prompt is taught two different replies (a task directly answered in ``default``
    mode is demonstrated with a call in ``force`` mode only).
    """
    if direct_rules is not None and rng is None:
        raise ValueError("direct_rules draw a mixture: pass rng")
    rows, counts = [], Counter()
    for task in tasks:
        if task.split != "train":
            raise SplitLeakError(f"task {task.id} is from the {task.split!r} split; SFT data is built from train only")
        run = run_oracle(task)
        if direct_rules is not None:
            direct_modes = [rng.choice(list(r.modes)) for r in direct_rules
                            if r.eligible(task) and rng.random() < r.fraction]
            free = [m for m in modes if m not in direct_modes]
            if free:
                ex = tool_example(run, rng.choice(free), reasoning, call_format)
                counts["tool" if ex else "dropped_tool"] += 1
                if ex:
                    rows.append(ex)
            for m in dict.fromkeys(direct_modes):      # two rules drawing one mode: one row
                rows.append(direct_example(task, m, reasoning, call_format))
                counts["direct"] += 1
                counts[f"direct_{m}"] += 1
            continue
        for mode in ([rng.choice(list(modes))] if rng else modes):
            ex = tool_example(run, mode, reasoning, call_format)
            counts["tool" if ex else "dropped_tool"] += 1
            if ex:
                rows.append(ex)
            eligible = (task.difficulty in direct_difficulties and not task.multi_step
                        and (direct_envs is None or task.env.name in direct_envs))
            if eligible and (rng is None or rng.random() < direct_fraction):
                rows.append(direct_example(task, direct_mode or mode, reasoning, call_format))
                counts["direct"] += 1
    return rows, counts


def write_parquet(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.parquet")
    Dataset.from_list(rows).to_parquet(str(tmp))
    tmp.replace(path)  # atomic: a crash never leaves a half-written training file
    return path


def main() -> None:
    @hydra.main(config_path=CONFIG_DIR, config_name="sft_data", version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        if cfg.split != "train":
            raise SplitLeakError(f"split={cfg.split}: SFT data is built from train tasks only")
        tasks = tasks_from_config(cfg)
        rows, counts = build_examples(
            tasks, modes=list(cfg.modes), reasoning=cfg.reasoning, call_format=cfg.call_format,
            direct_difficulties=list(cfg.direct.difficulties),
            direct_envs=list(cfg.direct.envs) if cfg.direct.envs else None)
        out = write_parquet(rows, Path(cfg.out_dir) / f"sft_{cfg.split}.parquet")
        manifest = {"rows": len(rows), "counts": dict(counts), "tasks": len(tasks),
                    "config": OmegaConf.to_container(cfg, resolve=True)}
        (out.parent / "manifest.json").write_text(json.dumps(manifest, indent=2))
        print(f"sft_rows={len(rows)} tool={counts['tool']} direct={counts['direct']} "
              f"dropped={counts['dropped_tool']} tasks={len(tasks)} out={out}")

    _main()


if __name__ == "__main__":
    main()
