"""``python -m data_builders.rollout``: the Hydra config composes, and a run on a tiny local model writes
trajectories and a summary and ends with the key=value line."""
from __future__ import annotations

import json
import subprocess
import sys

from hydra import compose, initialize_config_dir

from recipes import CONFIG_DIR
from data_builders.agent.trajectory import read_trajectories
from tests.conftest import REPO


def test_rollout_config_composes_with_overrides():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("rollout", overrides=["model=smollm2_tool_sft", "tasks=builtin", "mode=force", "limit=32"])
    assert cfg.mode == "force" and cfg.limit == 32 and cfg.model.name == "smollm2" and cfg.tasks.source == "builtin"


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
