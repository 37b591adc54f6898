"""Oracle accuracy per environment × difficulty, and the one-line summary the oracle command ends with."""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..tasks.schema import DIFFICULTIES
from .core import OracleRun


def cell_name(run: OracleRun) -> str:
    return run.task.env.name + (" (multi-hop)" if run.task.multi_step else "")


def summary(runs: Sequence[OracleRun]) -> dict:
    det = [r for r in runs if r.deterministic]
    return {
        "oracle_accuracy_deterministic": sum(r.correct for r in det) / len(det) if det else float("nan"),
        "deterministic_tasks": len(det),
        "oracle_accuracy_all": sum(r.correct for r in runs) / len(runs) if runs else float("nan"),
        "errors": sum(r.error is not None for r in runs),
        "tasks": len(runs),
    }


def table(runs: Sequence[OracleRun]) -> str:
    cells: dict[tuple[str, str], list[OracleRun]] = defaultdict(list)
    for r in runs:
        cells[(cell_name(r), r.task.difficulty)].append(r)
    rank = {d: i for i, d in enumerate(DIFFICULTIES)}
    lines = [f"{'environment':<32}{'difficulty':<11}{'n':>5}{'correct':>9}{'acc':>8}{'errors':>8}  deterministic"]
    for env, diff in sorted(cells, key=lambda k: (k[0], rank.get(k[1], 9))):
        rs = cells[(env, diff)]
        n, ok = len(rs), sum(r.correct for r in rs)
        lines.append(f"{env:<32}{diff:<11}{n:>5}{ok:>9}{ok / n:>8.3f}{sum(r.error is not None for r in rs):>8}  "
                     f"{'yes' if rs[0].deterministic else 'no (not mechanical)'}")
    return "\n".join(lines)


def final_line(runs: Sequence[OracleRun]) -> str:
    s = summary(runs)
    return f"oracle_accuracy_deterministic={s['oracle_accuracy_deterministic']:.4f} tasks={s['deterministic_tasks']}"
