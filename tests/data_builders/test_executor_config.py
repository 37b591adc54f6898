"""The executor group without Ray running: ``executor=ray`` without Ray installed says how to install it, a malformed
address is refused before anything starts, shards spread over workers cover the tasks in order, and the local
executor reports each episode (a tick for progress bars, then the item) as it ends, before its shard returns."""
from __future__ import annotations

import sys

import pytest

from data_builders.executors import check_reachable, executor_from_config, spread
from recipes import compose


def test_ray_executor_without_ray_says_how_to_install_it(monkeypatch):
    cfg = compose("build", ["executor=ray"])
    monkeypatch.setitem(sys.modules, "ray", None)          # `import ray` raises ImportError
    with pytest.raises(ImportError, match=r"executor=ray needs Ray.*pip install -e '\.\[ray\]'"):
        executor_from_config(cfg.executor, cfg.model, cfg.backend)


@pytest.mark.parametrize("address", ["localhost", "ray://head", "host:port"])
def test_a_malformed_address_is_refused(address):
    with pytest.raises(ValueError, match="executor.address="):
        check_reachable(address, 1.0)


def test_spread_covers_the_tasks_in_order():
    assert spread(list(range(7)), 2, None) == [[0, 1, 2, 3], [4, 5, 6]]
    assert spread(list(range(7)), 2, 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert spread([], 2, None) == []


def test_every_entry_config_runs_locally_by_default():
    for entry in ("build", "evaluate", "rollout"):
        assert compose(entry).executor.name == "local"
    ray = compose("build", ["executor=ray"]).executor
    assert (ray.address, ray.max_retries) == (None, 2)


def test_the_local_executor_reports_each_episode_as_it_ends(tiny_backend):
    from data_builders.agent.loop import AgentConfig
    from data_builders.executors import LocalExecutor
    from data_builders.rollout import rollout_shard
    from data_builders.tasks import load_tasks

    tasks = load_tasks("builtin", limit=3)
    events: list[tuple] = []
    shard = (AgentConfig(mode="force", max_rounds=1, max_new_tokens=4), tasks)
    for key, trajs in LocalExecutor.on(tiny_backend).map(
            rollout_shard, [("s0", shard)], on_progress=lambda k, tr: events.append(("item", k, tr.task_id)),
            on_tick=lambda k: events.append(("tick", k))):
        events.append(("result", key, len(trajs)))
    assert [e[0] for e in events] == ["tick", "item"] * 3 + ["result"]
    assert sorted(e[2] for e in events if e[0] == "item") == sorted(str(t.id) for t in tasks)
    assert events[-1] == ("result", "s0", 3)
