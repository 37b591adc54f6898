"""``python -m data_builders.rollout``: the Hydra config composes, and a run on a tiny local model writes
trajectories and a summary and ends with the key=value line; a bad config fails before the model loads, and a
failure mid-run keeps the episodes that finished."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

import recipes
from data_builders import rollout
from recipes import CONFIG_DIR
from recipes import compose as compose_config
from data_builders.agent.trajectory import read_trajectories
from tests.conftest import REPO
from tests.doubles import CALL, ScriptedBackend, calc_task


def test_rollout_config_composes_with_overrides():
    recipes.register()     # the schemas, as a command's own imports store them
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("rollout", overrides=["model=smollm2_tool_sft", "tasks=builtin", "mode=force", "limit=32"])
    assert cfg.mode == "force" and cfg.limit == 32 and cfg.model.name == "smollm2" and cfg.tasks.source == "builtin"


@pytest.mark.slow
def test_rollout_cli_on_tiny_model(tiny_model_dir, tmp_path):
    cmd = [sys.executable, "-m", "data_builders.rollout", "model=hf", f"model.name={tiny_model_dir}", "tasks=builtin",
           "mode=force", "limit=5", "agent.max_rounds=2", "agent.max_new_tokens=8", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    keys = [kv.split("=")[0] for kv in last.split()]
    assert keys == ["accuracy", "tool_calls_per_task", "format_error_rate", "tokens_per_task", "tasks"], last
    assert last.endswith("tasks=5")
    trajs = list(read_trajectories(tmp_path / "trajectories.jsonl"))     # every record passes the validator
    assert len(trajs) == 5 and {t.env for t in trajs} >= {"CalculatorEnv", "HistoricalYearEnv", "ListManipulationEnv"}
    for t in trajs:
        assert t.rounds == len(t.turns) <= 2 and t.mode == "force"
        assert all(tr.prefill_tokens > 0 and tr.decode_tokens <= 8 for tr in t.turns)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tasks"] == 5 and summary["policy"] == trajs[0].policy


def _cfg(tmp_path, *overrides):
    return compose_config("rollout", ["tasks=builtin", "tasks.n_per_cell=1", "mode=force", f"out_dir={tmp_path}",
                                      *overrides])


@pytest.mark.parametrize("override, message", [
    ("mode=forced", "unknown prompt mode 'forced'"),
    ("limit=0", "limit must be null"),
    ("tasks.difficulties=[Hard]", r"\['easy', 'medium', 'hard'\]"),
    ("tasks.envs=[CalculatorEnv,Calculator]", r"tasks\.envs: \['Calculator'\]"),
])
def test_bad_selection_or_mode_fails_before_the_model_loads(tmp_path, monkeypatch, override, message):
    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the config was checked")
    monkeypatch.setattr(rollout, "backend_from_config", no_model)
    with pytest.raises(ValueError, match=message):
        rollout.run(_cfg(tmp_path, override))


class FailingBackend(ScriptedBackend):
    """The scripted policy, except that generating for a prompt with ``fail_on`` in it raises (a CUDA error,
    an engine crash)."""

    name = "scripted"

    def __init__(self, scripts, fail_on=None):
        super().__init__(scripts)
        self.fail_on = fail_on

    def generate(self, prompts, params=None, **kw):
        if self.fail_on and any(self.fail_on in p for p in prompts):
            raise RuntimeError("engine crashed")
        return super().generate(prompts, params, **kw)


TASKS = [calc_task(1, "6*7", "42"), calc_task(2, "2+2", "4"), calc_task(3, "9*9", "81")]
SCRIPTS = {"6*7": [CALL % "6*7", "\\boxed{42}"], "2+2": ["\\boxed{4}"], "9*9": [CALL % "9*9", "\\boxed{81}"]}


def test_a_failure_mid_run_keeps_the_finished_episodes(tmp_path, monkeypatch):
    monkeypatch.setattr(rollout, "tasks_from_config", lambda cfg: list(TASKS))
    monkeypatch.setattr(rollout, "backend_from_config", lambda *a, **k: FailingBackend(SCRIPTS, fail_on="9*9"))
    # one episode at a time: tasks 1 and 2 finish before task 3 starts
    with pytest.raises(RuntimeError, match="engine crashed"):
        rollout.run(_cfg(tmp_path, "agent.max_in_flight=1"))
    kept = list(read_trajectories(tmp_path / "trajectories.partial.jsonl"))
    assert [t.task_id for t in kept] == [1, 2] and all(t.correct for t in kept)
    assert not (tmp_path / "trajectories.jsonl").exists()

    monkeypatch.setattr(rollout, "backend_from_config", lambda *a, **k: FailingBackend(SCRIPTS))
    summary = rollout.run(_cfg(tmp_path))
    assert summary["tasks"] == 3 and not (tmp_path / "trajectories.partial.jsonl").exists()
    assert [t.task_id for t in read_trajectories(tmp_path / "trajectories.jsonl")] == [1, 2, 3]   # task order
