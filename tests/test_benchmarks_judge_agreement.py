"""benchmarks/judge_agreement.py against the scripted judge (tests/data_builders/tasks/scripted_judge.py: a real HTTP
server on a local port; its rule: correct iff the answer contains the gold) on hand-made trajectories. Offline."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from data_builders.agent.prompts import initial_messages
from data_builders.agent.trajectory import write_trajectories
from data_builders.tasks.scoring import is_correct
from tests.data_builders.tasks.scripted_judge import RUBRIC, server  # noqa: F401 - server: a fixture
from tests.trajectories import make_trajectory, make_turn
from trainers.intervals import BootstrapSpec, kappa_interval, mean_interval

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "judge_agreement.py"


@pytest.fixture(scope="module")
def bench():
    # benchmarks/ is a folder of scripts, not a package: load the file as a module to call its main()
    spec = importlib.util.spec_from_file_location("judge_agreement", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # dataclasses look their module up there while the file runs
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def episode(task_id: str, category: str, instruction: str, final: str, gold: str, **fields):
    turns = [make_turn(0, final)] if final else [make_turn(0, "thinking", kind="content")]
    fields.setdefault("correct", is_correct(final, gold))
    return make_trajectory(turns, task_id=task_id, category=category, gold=gold, instruction=instruction,
                           messages=initial_messages(instruction, "CalculatorEnv", "default", False, "xml"),
                           **fields)


# (judge, exact) under the scripted rule and When2Tool's: agree, agree, judge only ("Madrid." is not "Madrid" for
# When2Tool's scalar pass, but contains it), agree. Then one that never answered and one without gold, left out.
TRAJECTORIES = [
    episode("w/1", "A", "Capital of France?", "It is \\boxed{Paris}", "Paris"),
    episode("w/2", "A", "Capital of France?", "\\boxed{Lyon}", "Paris"),
    episode("w/3", "B", "Capital of Spain?", "\\boxed{Madrid.}", "Madrid"),
    # stored verdict False although When2Tool's rule says True: --exact stored reads it, the default re-scores
    episode("w/4", "B", "Six times seven?", "\\boxed{42}", "42", correct=False),
    episode("w/5", "A", "Capital of Italy?", "", "Rome"),
    episode("w/6", "C", "Say hi.", "\\boxed{hi}", ""),
]
JUDGE = [True, False, True, True]
EXACT = [True, False, False, True]


@pytest.fixture
def run_dir(tmp_path) -> Path:
    write_trajectories(tmp_path / "run" / "trajectories.jsonl", TRAJECTORIES)
    (tmp_path / "rubric.txt").write_text(RUBRIC, encoding="utf-8")
    return tmp_path


def args(server, tmp: Path, *extra: str) -> list[str]:
    return ["--trajectories", str(tmp / "run"), "--base-url", server.base_url, "--model", "judge-model",
            "--rubric", str(tmp / "rubric.txt"), "--cache-dir", str(tmp / "cache"), "--max-retries", "0",
            "--timeout-s", "10", *extra]


def test_agreement_kappa_intervals_and_table(bench, server, run_dir, capsys):
    out = run_dir / "agreement.json"
    assert bench.main(args(server, run_dir, "--json", str(out))) == 0
    printed = capsys.readouterr().out
    kappa = cohen_kappa_score(JUDGE, EXACT)
    assert kappa == pytest.approx(0.5)
    rate_ci = mean_interval([1.0, 1.0, 0.0, 1.0], BootstrapSpec())
    kappa_ci, undefined = kappa_interval(JUDGE, EXACT, BootstrapSpec())
    assert undefined > 0      # four trajectories: some resamples draw one unanimous class, where kappa is 0/0
    assert f"agreement rate  0.750 [{rate_ci[0]:.3f}, {rate_ci[1]:.3f}]" in printed
    assert f"Cohen's kappa   {kappa:.3f} [{kappa_ci[0]:.3f}, {kappa_ci[1]:.3f}]" in printed
    assert f"({undefined} of 2000 resamples undefined, left out)" in printed
    assert "n=4 rate=0.7500 kappa=0.5000 cached=0 model=judge-model" in printed
    assert f"judge: model judge-model at {server.base_url}" in printed
    assert "left out: 1 without gold, 1 that never answered" in printed
    assert "differs from the stored verdict on 1" in printed
    assert "judge verdicts: 4, 0 from the cache, 4 asked" in printed
    rows = [line.split() for line in printed.splitlines()]
    assert ["judge", "correct", "2", "1"] in rows and ["judge", "wrong", "0", "1"] in rows
    assert ["A", "2", "1.000", "1.000", "0", "0"] in rows          # both verdicts split 1-1, alike
    assert ["B", "2", "0.500", "0.000", "1", "0"] in rows          # the judge says correct on both: no agreement
    assert "task 'w/3' CalculatorEnv judge=True exact=False boxed='Madrid.' gold='Madrid'" in printed

    # The judge saw the task's instruction (the prompt's response policy taken off), the response and the gold.
    assert server.count == 4
    prompts = sorted(b["messages"][0]["content"] for b in server.bodies)
    assert prompts[0] == RUBRIC.format(instruction="Capital of France?", answer="It is \\boxed{Paris}", gold="Paris")
    assert all("Response policy" not in p for p in prompts)

    data = json.loads(out.read_text())
    assert (data["n"], data["agree"], data["rate"]) == (4, 3, 0.75)
    assert data["cohen_kappa"] == pytest.approx(kappa)
    assert data["rate_ci"] == [round(rate_ci[0], 4), round(rate_ci[1], 4)]
    assert data["cohen_kappa_ci"] == [round(kappa_ci[0], 4), round(kappa_ci[1], 4)]
    assert data["confusion"] == {"judge_correct_exact_correct": 2, "judge_correct_exact_wrong": 1,
                                 "judge_wrong_exact_correct": 0, "judge_wrong_exact_wrong": 1}
    assert data["per_category"]["B"]["rate"] == 0.5 and data["per_category"]["A"]["cohen_kappa"] == 1.0
    assert data["judge"] == {"model": "judge-model", "base_url": server.base_url,
                             "rubric": str(run_dir / "rubric.txt"), "cache_dir": str(run_dir / "cache")}
    assert (data["cached"], data["asked"], data["no_gold"], data["no_answer"]) == (0, 4, 1, 1)
    assert data["bootstrap"] == {"method": "percentile", "level": 0.95, "replicates": 2000, "seed": 0,
                                 "unit": "trajectory"}
    assert [d["task_id"] for d in data["disagreements"]] == ["w/3"]


def test_a_rerun_is_served_from_the_cache_and_can_read_the_stored_verdicts(bench, server, run_dir, capsys):
    assert bench.main(args(server, run_dir)) == 0
    capsys.readouterr()
    out = run_dir / "stored.json"
    assert bench.main(args(server, run_dir, "--exact", "stored", "--json", str(out))) == 0
    printed = capsys.readouterr().out
    assert server.count == 4                                       # the second run asked nothing
    assert "judge verdicts: 4, 4 from the cache, 0 asked" in printed
    data = json.loads(out.read_text())
    stored = [True, False, False, False]                           # w/4's stored verdict is False
    assert (data["agree"], data["cached"], data["exact"]) == (2, 4, "stored")
    assert data["cohen_kappa"] == pytest.approx(cohen_kappa_score(JUDGE, stored))


def test_a_judge_failure_stops_the_run_naming_the_trajectory(bench, server, run_dir, capsys):
    # the first answer gets a verdict, the second an unreadable reply (no retry): never a silent "incorrect"
    server.script = ['{"correct": true, "reason": "ok"}', "I cannot say."]
    out = run_dir / "never.json"
    with pytest.raises(SystemExit) as e:
        bench.main(args(server, run_dir, "--no-cache", "--workers", "1", "--json", str(out)))
    message = str(e.value)
    assert f"judge failed on {run_dir / 'run' / 'trajectories.jsonl'}, trajectory 2 (task 'w/2'" in message
    assert "gave no readable verdict" in message and "never counted as incorrect" in message
    assert not out.exists()


def test_a_folder_of_several_runs_must_be_narrowed(bench, server, run_dir):
    write_trajectories(run_dir / "runs" / "a" / "trajectories.jsonl", TRAJECTORIES)
    write_trajectories(run_dir / "runs" / "b" / "trajectories.jsonl", TRAJECTORIES)
    with pytest.raises(SystemExit, match="2 rollout runs below it; name one"):
        bench.main(["--trajectories", str(run_dir / "runs"), "--base-url", server.base_url, "--model", "m"])
    assert server.count == 0
