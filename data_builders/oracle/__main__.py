"""``python -m data_builders.oracle tasks=when2tool tasks.path=<dir> split=train|test``

Runs the oracle on every task, writes ``oracle_runs.jsonl`` (calls, answer, correct, error per task) and
prints accuracy per environment × difficulty, ending with
``oracle_accuracy_deterministic=… tasks=…`` (over the environments a mechanical oracle can solve
exactly).
"""
from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig
from tqdm import tqdm

import data_builders.config  # noqa: F401 - its schemas, stored before Hydra composes
from recipes import CONFIG_DIR

from ..agent.trajectory import write_jsonl
from ..tasks import tasks_from_config
from . import report
from .core import run_oracle


def run_record(run) -> dict:
    t = run.task
    return {"id": t.id, "env": t.env.name, "difficulty": t.difficulty, "multi_step": t.multi_step,
            "split": t.split, "answer": run.answer, "gold": t.answer, "correct": run.correct,
            "deterministic": run.deterministic, "error": run.error,
            "calls": [{"name": s.name, "arguments": s.arguments, "result": s.result} for s in run.steps]}


@hydra.main(config_path=CONFIG_DIR, config_name="oracle", version_base="1.3")
def main(cfg: DictConfig) -> None:
    tasks = tasks_from_config(cfg)
    runs = [run_oracle(t) for t in tqdm(tasks, desc=f"oracle {cfg.split}", unit="task")]
    out = Path(cfg.out_dir) / "oracle_runs.jsonl"
    write_jsonl(out, [run_record(r) for r in runs])
    s = report.summary(runs)
    print(report.table(runs))
    print(f"oracle_accuracy_all={s['oracle_accuracy_all']:.4f} errors={s['errors']} all_tasks={s['tasks']} "
          f"runs={out}")
    print(report.final_line(runs))


if __name__ == "__main__":
    main()
