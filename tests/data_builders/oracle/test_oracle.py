"""The oracle (docs/guide.md#when2tool-the-oracle) on every task it can solve: When2Tool's own files when the test data
is present, and the built-in generators always. Deterministic environments must be exact; the others are
reported by the oracle command but only need to run without errors here."""
from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache

import pytest

from data_builders.oracle import OracleRun, run_oracle
from data_builders.oracle.sft import _teacher_answer
from data_builders.oracle.solvers import SOLVERS
from data_builders.tasks import load_tasks, stratified_sample
from data_builders.tasks.schema import Task
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"
FILES = {
    "tasks_v1_train.json": "train", "tasks_v1_test.json": "test",
    "tasks_v1_multihop_train.json": "train", "tasks_v1_multihop_test.json": "test",
}


@lru_cache(maxsize=None)
def _file_tasks(name: str) -> tuple[Task, ...]:
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    records = json.loads(path.read_text(encoding="utf-8"))
    return tuple(Task.from_dict(r, source=name, index=i, split=FILES[name]) for i, r in enumerate(records))


def _check(tasks, gold_reachable: bool = False) -> Counter:
    """Deterministic environments: exact. ``gold_reachable``: every task's gold is either the oracle's
    answer or appears verbatim in a tool result (so a careful reader, and the SFT teacher, can get it)."""
    solved, failures = Counter(), []
    for task in tasks:
        if (task.env.name, task.multi_step) not in SOLVERS:
            continue
        run = run_oracle(task)
        solved[task.env.name] += 1
        if gold_reachable and _teacher_answer(run) is None:
            failures.append((task.id, f"gold {task.answer!r} not reachable: {run.error or run.answer!r}"))
        if run.error and run.deterministic:
            failures.append((task.id, run.error))
        elif run.deterministic and not run.correct:
            failures.append((task.id, f"answer {run.answer!r} != gold {task.answer!r}"))
    assert not failures, f"{len(failures)} oracle failures, first: {failures[:5]}"
    return solved


def _deterministic_plus_sample(tasks, per_cell: int = 5):
    """All tasks of deterministic environments; a stratified sample of the others, which only have to run
    without errors here (the oracle command reports their full accuracy) and cost sandbox calls."""
    det = [t for t in tasks if OracleRun(t).deterministic]
    return det + stratified_sample([t for t in tasks if not OracleRun(t).deterministic], per_cell)


@pytest.mark.parametrize("name", sorted(FILES))
def test_oracle_exact_on_when2tool_files(name):
    solved = _check(_deterministic_plus_sample(_file_tasks(name)))
    assert solved, "no solver for any environment in the file"


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_exact_on_builtin_tasks(split):
    single = load_tasks("builtin", split=split, n_per_cell=10)
    solved = _check(single, gold_reachable=True)
    assert sum(solved.values()) == 10 * 3 * len(solved) == len(single)
    multi = load_tasks("builtin", split=split, n_per_cell=5, hops="multi")
    assert {t.env.name for t in multi} == {"CalculatorEnv", "CodeExecutorEnv"} and all(t.category == "M" for t in multi)
    _check(multi)
    for task in (t for t in multi if t.env.name == "CalculatorEnv"):
        run = run_oracle(task)  # every intermediate value matches the generator's gold steps
        assert [str(s.result["result"]) for s in run.steps] == task.expected["steps"], task.id


def test_oracle_reports_unparseable_instruction_instead_of_raising():
    task = load_tasks("builtin", split="test", limit=1, envs=["CalculatorEnv"])[0]
    broken = Task.from_dict({**task.to_dict(), "instruction": "What is the answer?"})
    run = run_oracle(broken)
    assert run.answer is None and run.error and not run.correct
