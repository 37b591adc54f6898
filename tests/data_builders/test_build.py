"""`python -m data_builders.build` on a tiny random Llama: a build SIGKILLed three times at random points and
resumed equals an uninterrupted build, bitwise."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
import torch

import recipes
from data_builders.points.store import load_points
from tests.conftest import REPO


def cmd(model_dir, out, kind="probe"):
    return [sys.executable, "-m", "data_builders.build", f"kind={kind}", "model=hf", f"model.name={model_dir}",
            "tasks=builtin", "tasks.n_per_cell=1", "limit=6", "shard_size=2", "agent.max_rounds=2",
            "agent.max_new_tokens=12",
            f"out_dir={out}", f"hydra.run.dir={out}-hydra"]


@pytest.mark.slow
def test_killed_and_resumed_build_equals_uninterrupted(tiny_model_dir, tmp_path):
    ref = subprocess.run(cmd(tiny_model_dir, tmp_path / "ref"), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert "points=12 positives=" in ref.stdout and "kind=probe" in ref.stdout

    out, rng, kills = tmp_path / "killed", random.Random(0), 0

    def complete() -> bool:
        manifest = out / "manifest.json"
        return manifest.is_file() and json.loads(manifest.read_text()).get("complete") is True

    # up to three kills, each after 0 or 1 more finished shard and a random wait: anywhere in a rollout, a write
    # or between shards. How far a process gets before its kill depends on the machine's speed, so a run that
    # finished the build before a kill does not end the test: the next start resumes (or finds it complete).
    for _ in range(8):
        if kills == 3 or complete():
            break
        proc = subprocess.Popen(cmd(tiny_model_dir, out), cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        target = len(list(out.glob("shard-*.done"))) + rng.randint(0, 1)
        while proc.poll() is None and len(list(out.glob("shard-*.done"))) < target:
            time.sleep(0.02)
        time.sleep(rng.uniform(0, 0.3))
        if proc.poll() is None:
            proc.kill()
            kills += 1
        proc.wait()
    assert kills >= 2
    done = subprocess.run(cmd(tiny_model_dir, out), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    a, b = load_points(tmp_path / "ref"), load_points(out)
    assert len(a) == 12
    for col in ("point_id", "task_id", "split", "label", "no_tool_answer", "shard", "row"):
        assert a.points[col] == b.points[col], col
    assert torch.equal(a.features["hidden"], b.features["hidden"])          # bitwise
    skip = ("task_source", "build_command")   # the commands differ in out_dir only
    assert {k: v for k, v in a.manifest.items() if k not in skip} == {k: v for k, v in b.manifest.items() if k not in skip}
    assert set(a.points["split"]) <= {"train", "val", "test"} and "test" in a.points["split"]


@pytest.mark.slow
def test_resuming_with_another_model_is_refused(tiny_model_dir, tmp_path):
    from tests.tiny_models import build_tiny_llama

    out = tmp_path / "pts"
    first = subprocess.run(cmd(tiny_model_dir, out) + ["limit=1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    other = build_tiny_llama(tmp_path / "other", hidden_size=32, num_layers=2)
    proc = subprocess.run(cmd(other, out) + ["limit=1"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and "resume refused" in proc.stderr and "backend: on disk" in proc.stderr


@pytest.mark.slow
def test_a_token_budget_with_no_room_to_generate_is_refused_and_nothing_is_written(tiny_model_dir, tmp_path):
    # Accepted before: exit 0 with every point labelled "tool needed" from episodes that never generated.
    for budget, says in (("4096", "leaves no room for a prompt: the context holds 4096 tokens"),   # = the context
                         ("1000000000", "leaves no room for a prompt: the context holds 4096 tokens"),
                         ("4050", "leaves no room to generate: a ")):                               # < context - prompt
        out = tmp_path / f"pts-{budget}"
        proc = subprocess.run(cmd(tiny_model_dir, out) + [f"agent.max_new_tokens={budget}"], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode != 0 and says in proc.stderr, (budget, proc.stderr[-2000:])
        assert not (out / "manifest.json").exists() and not list(out.glob("shard-*"))


def in_process_build(model_dir, out, *over):
    from data_builders import build
    from recipes import compose

    return build.run(compose("build", [*cmd(model_dir, out)[3:-2], f"out_dir={out}", *over]))


def test_the_build_bar_moves_as_tokens_decode_not_per_shard(tiny_model_dir, tmp_path, monkeypatch):
    # A shard is one batched rollout of shard_size episodes whose episodes end together: a bar of finished tasks
    # sat at 0-1/64 for minutes with an ETA of hours. The bar counts generated tokens (data_builders/progress.py):
    # it moves while a shard decodes, before any of its episodes has ended, and ends at its total.
    from data_builders import build, progress

    events: list[tuple[str, int]] = []
    finals: list[tuple[int, int]] = []

    class Bar(progress.BudgetBar):
        def tick(self, key=None):
            events.append(("tick", self.done_items))
            super().tick(key)

        def work(self, key, work):
            super().work(key, work)
            events.append(("work", self.bar.n))
            finals.append((self.bar.n, self.bar.total))
    monkeypatch.setattr(build, "BudgetBar", Bar)
    in_process_build(tiny_model_dir, tmp_path / "pts", "limit=3", "shard_size=3", "agent.max_rounds=1",
                     "agent.max_new_tokens=4")
    ticks = [e for e in events if e[0] == "tick"]
    assert len(ticks) == 6                  # 3 train + 3 test tasks in 2 shards of 3: one per episode
    first_tick = events.index(ticks[0])
    assert any(kind == "work" and n > 0 for kind, n in events[:first_tick])     # tokens counted before it
    n, total = finals[-1]
    assert n == total > 0


def test_a_build_without_any_decision_point_ends_with_an_empty_table(tiny_model_dir, tmp_path, capsys):
    # A random model never writes an answer in 4 tokens: no commit point. The summary used to crash on the empty
    # dataset ("Column 'split' doesn't exist") after the build itself had finished.
    got = in_process_build(tiny_model_dir, tmp_path / "pts", "kind=commit", "limit=1", "agent.max_rounds=1",
                           "agent.max_new_tokens=4")
    assert got == {"points": 0, "positives": 0}
    assert "points=0 positives=0 kind=commit" in capsys.readouterr().out


def test_the_build_reads_the_agent_group_the_evaluator_reads_and_refuses_the_settings_it_ignores():
    from hydra.errors import ConfigCompositionException

    from data_builders.build import renamed_agent_overrides
    from data_builders.config import BuildConfig

    build, evaluate = recipes.compose("build"), recipes.compose("evaluate")
    for key in BuildConfig.AGENT_KEYS:      # one decoding: the gates are scored on episodes like their labels'
        assert build.agent[key] == evaluate.agent[key], key
    assert recipes.compose("build", ["agent.max_rounds=3"]).agent.max_rounds == 3
    with pytest.raises(ConfigCompositionException, match=r"refused: agent.temperature \(data_builders.build reads "
                                                         r"only agent.max_rounds, agent.max_new_tokens"):
        recipes.compose("build", ["agent.temperature=0.7"])
    with pytest.warns(FutureWarning, match=r"max_rounds: deprecated, the build reads the agent group now"):
        assert renamed_agent_overrides(["max_rounds=2", "kind=flip", "agent.max_new_tokens=8"]) == \
            ["agent.max_rounds=2", "kind=flip", "agent.max_new_tokens=8"]
