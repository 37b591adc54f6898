"""``executor=ray`` against ``executor=local`` on a tiny random Llama: the same decision-point dataset (bitwise), also
when a worker process is SIGKILLed mid-build (its shard is redone, nothing is written twice), the same rollout
trajectories, and clear errors for an unreachable cluster or a model that cannot load. One local Ray cluster
for the module (2 CPUs, no dashboard)."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from data_builders import build, rollout
from data_builders.agent.trajectory import read_trajectories
from data_builders.points.store import PointStore, load_points
from recipes import compose
from tests.conftest import REPO

ray = pytest.importorskip("ray")

# 2 splits x 6 tasks in shards of 2: 6 shards
BUILD = ["kind=probe", "model=hf", "tasks=builtin", "tasks.n_per_cell=1", "limit=6", "shard_size=2",
         "agent.max_rounds=2",
         "agent.max_new_tokens=12"]


@pytest.fixture(scope="module")
def cluster():
    ctx = ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    yield ctx.address_info["gcs_address"]
    ray.shutdown()


def build_cfg(model_dir, out, *over):
    return compose("build", [*BUILD, f"model.name={model_dir}", f"out_dir={out}", *over])


@pytest.fixture(scope="module")
def local_build(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "pts"
    build.run(build_cfg(tiny_model_dir, out))
    return load_points(out)


def assert_same_dataset(a, b):
    assert len(a) == len(b) == 12
    for col in ("point_id", "task_id", "split", "label", "no_tool_answer", "shard", "row"):
        assert a.points[col] == b.points[col], col
    assert torch.equal(a.features["hidden"], b.features["hidden"])          # bitwise
    assert a.manifest["shards"] == b.manifest["shards"]                      # each shard file's sha256
    assert {k: v for k, v in a.manifest.items() if k != "created"} == \
        {k: v for k, v in b.manifest.items() if k != "created"}


def count_writes(monkeypatch) -> list[int]:
    written: list[int] = []
    original = PointStore.write_shard

    def write_shard(self, i, rows, tensors):
        written.append(i)
        return original(self, i, rows, tensors)
    monkeypatch.setattr(PointStore, "write_shard", write_shard)
    return written


@pytest.mark.slow
def test_ray_build_equals_local_build(cluster, tiny_model_dir, local_build, tmp_path, monkeypatch):
    written = count_writes(monkeypatch)
    build.run(build_cfg(tiny_model_dir, tmp_path / "pts", "executor=ray", "executor.workers=2"))
    assert sorted(written) == list(range(6))
    assert_same_dataset(local_build, load_points(tmp_path / "pts"))


def bar_steps(monkeypatch) -> dict:
    """What the build's bar was told: finished items (ticks) and, after each shard budget report, its count and
    total of generated tokens."""
    from data_builders import progress

    seen: dict = {"ticks": 0, "bar": []}

    class Bar(progress.BudgetBar):
        def tick(self, key=None):
            seen["ticks"] += 1
            super().tick(key)

        def work(self, key, work):
            super().work(key, work)
            seen["bar"].append((self.bar.n, self.bar.total))
    monkeypatch.setattr(build, "BudgetBar", Bar)
    return seen


@pytest.mark.slow
def test_workers_report_progress_while_their_shard_runs(cluster, tiny_model_dir):
    from data_builders.executors import executor_from_config

    def slow_items(engine, n, progress):       # a shard whose items end 0.4 s apart, 10 tokens each
        from data_builders import progress as generation

        with generation.budget(10 * n):
            for i in range(n):
                time.sleep(0.4)
                generation.generated(10)
                progress(i)
        return n
    cfg = build_cfg(tiny_model_dir, "unused", "executor=ray", "executor.workers=1")
    ticks, items, work = [], [], []
    with executor_from_config(cfg.executor, cfg.model, cfg.backend) as ex:
        for key, result in ex.map(slow_items, [("a", 5)], on_progress=lambda k, i: items.append(i),
                                  on_tick=lambda k: ticks.append(time.monotonic()),
                                  on_work=lambda k, w: work.append((time.monotonic(), tuple(w)))):
            returned = time.monotonic()
    assert (key, result, items) == ("a", 5, list(range(5)))
    assert len(ticks) == 5 and ticks[0] < returned - 0.8      # the first tick came while the shard still ran
    # the shard's generated tokens too, at most every WORK_REPORT_S, the last one complete
    assert work[0][0] < returned - 0.8 and work[-1][1] == (50, 50, 0, 50, 50, 0)     # all generated, all closed


def busy_worker_pids() -> list[int]:
    """Ray worker processes titled ``ray::EngineWorker.run`` (an actor executing a shard)."""
    ps = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in ps.splitlines()
            if line.split(None, 1)[1:] and line.split(None, 1)[1].startswith("ray::EngineWorker.run")]


@pytest.mark.slow
def test_a_worker_killed_mid_build_has_its_shard_redone(cluster, tiny_model_dir, local_build, tmp_path, monkeypatch,
                                                         caplog):
    out = tmp_path / "pts"
    written = count_writes(monkeypatch)
    steps = bar_steps(monkeypatch)
    killed: list[int] = []

    def kill_one_busy_worker():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("shard-*.done")):
            time.sleep(0.01)
        while time.monotonic() < deadline and not killed:
            for pid in busy_worker_pids():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.005)
    killer = threading.Thread(target=kill_one_busy_worker, daemon=True)
    killer.start()
    with caplog.at_level(logging.WARNING, logger="data_builders.executors"):
        build.run(build_cfg(tiny_model_dir, out, "executor=ray", "executor.workers=2", "executor.max_retries=2"))
    killer.join(timeout=5)
    assert killed, "no busy worker was found to kill"
    assert "failed (" in caplog.text and "redoing the shard" in caplog.text
    assert sorted(written) == list(range(6))                      # each shard written once, by the driver
    assert steps["ticks"] == 12                      # the redone shard's episodes moved the bar once
    n, total = steps["bar"][-1]                      # and its tokens: the bar ends at its total, not past it
    assert n == total > 0 and all(a <= b for a, b in steps["bar"])
    assert_same_dataset(local_build, load_points(out))


@pytest.mark.slow
def test_ray_rollout_equals_local(cluster, tiny_model_dir, tmp_path):
    base = ["model=hf", f"model.name={tiny_model_dir}", "tasks=builtin", "mode=force", "limit=6",
            "agent.max_rounds=2", "agent.max_new_tokens=8"]
    rollout.run(compose("rollout", [*base, f"out_dir={tmp_path / 'local'}"]))
    rollout.run(compose("rollout", [*base, f"out_dir={tmp_path / 'ray'}", "executor=ray", "executor.workers=2",
                                    "executor.shard_size=2"]))

    def trajectories(d):
        out = []
        for t in read_trajectories(d / "trajectories.jsonl"):
            rec = t.to_dict()
            for turn in rec["turns"]:
                turn.pop("wall_s", None)     # timing differs; everything else must not, but for
                # what the engine found already computed: a Ray worker's second shard takes the prompt prefixes its
                # first shard left in the prefix pool (data_builders/backends/prefix_pool.py)
                turn.pop("cached_tokens", None)
            out.append(rec)
        return out
    local, distributed = trajectories(tmp_path / "local"), trajectories(tmp_path / "ray")
    assert len(local) == 6 and local == distributed
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["tasks"] == 6 and not (tmp_path / "ray" / "trajectories.partial.jsonl").exists()


@pytest.mark.slow
def test_a_model_that_cannot_load_fails_with_the_loaders_message(cluster, tmp_path):
    start = time.monotonic()
    with pytest.raises(Exception, match=r"could not load the model: .*/nonexistent"):
        build.run(build_cfg("/nonexistent", tmp_path / "pts", "executor=ray", "executor.workers=1"))
    assert time.monotonic() - start < 60          # no restart loop


@pytest.mark.slow
def test_an_unreachable_address_fails_quickly_naming_it(tiny_model_dir, tmp_path):
    # a fresh process: this one is connected to the module's cluster, which an executor would reuse
    cmd = [sys.executable, "-m", "data_builders.build", *BUILD, f"model.name={tiny_model_dir}",
           f"out_dir={tmp_path / 'pts'}", f"hydra.run.dir={tmp_path / 'hydra'}", "executor=ray",
           "executor.address=127.0.0.1:1", "executor.connect_timeout_s=5"]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "executor.address='127.0.0.1:1': no Ray cluster reachable there" in proc.stderr
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_workers_the_cluster_cannot_hold_are_refused_not_left_waiting(cluster, tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"3 workers x executor.num_cpus=1.0 need 3 CPUs; the cluster has 2"):
        build.run(build_cfg(tiny_model_dir, tmp_path / "pts", "executor=ray", "executor.workers=3"))
