"""How ``executor=ray`` settles a failed call, on a scripted stand-in for Ray (no cluster: the outcomes Ray gives are
written out): a worker that is only restarting or briefly unreachable costs no retry, a worker that restarted
(a new pid) is a death counted against ``max_retries``, and a worker that never answers again fails the map after
``RESTART_TIMEOUT_S`` with an error naming it. The real kill is in tests/data_builders/test_executor.py."""
from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from data_builders import executors
from data_builders.executors import RayExecutor


class ActorError(Exception):          # plays ray.exceptions.RayActorError (ActorUnavailableError, ActorDiedError)
    pass


class TaskError(Exception):           # plays ray.exceptions.RayTaskError
    pass


RESTARTING = ActorError("The actor is temporarily unavailable: IOError: The actor is restarting.")
NEVER = object()                      # a call that never returns


class Ref:
    made = 0

    def __init__(self, outcome):
        self.outcome, self.order = outcome, Ref.made
        Ref.made += 1


class FakeRay:
    """``wait`` returns the given refs that have an outcome, oldest call first, else waits out its timeout."""

    exceptions = SimpleNamespace(RayActorError=ActorError, RayTaskError=TaskError)

    def wait(self, refs, num_returns=1, timeout=None):
        ready = sorted((r for r in refs if r.outcome is not NEVER), key=lambda r: r.order)[:num_returns]
        if not ready:
            assert timeout is not None, "the driver would wait forever"
            time.sleep(timeout)
        return ready, [r for r in refs if r not in ready]

    def get(self, ref):
        if isinstance(ref.outcome, Exception):
            raise ref.outcome
        return ref.outcome


class Method:
    def __init__(self, calls):
        self.calls = calls

    def options(self, **kw):
        assert kw == {"max_task_retries": -1}     # the probe is retried by Ray across the restart
        return self

    def remote(self, *args):
        return Ref(self.calls.pop(0))


class Actor:
    """Scripted outcomes: ``runs`` per shard call (None = do the work), ``pids`` per probe."""

    def __init__(self, runs=(), pids=()):
        self.runs, self.pids, self.n_runs = list(runs), list(pids), 0
        self.run = SimpleNamespace(remote=self._run)
        self.info = Method(self.pids)

    def _run(self, work, payload, ticks=None):
        self.n_runs += 1
        outcome = self.runs.pop(0) if self.runs else None
        return Ref(([], work(None, payload, None)) if outcome is None else outcome)


def executor(actors, max_retries):
    ex = RayExecutor.__new__(RayExecutor)     # no cluster: only what map() reads
    ex.ray, ex.cfg, ex.actors = FakeRay(), SimpleNamespace(max_retries=max_retries), actors
    ex.pids = [100 + i for i in range(len(actors))]
    return ex


def square(engine, x, progress):
    return x * x


SHARDS = [(k, k) for k in range(4)]


def test_a_worker_that_was_only_restarting_costs_no_retry(caplog):
    # Before: each "The actor is restarting" counted as a death; with max_retries=0 the first one failed the map.
    worker = Actor(runs=[RESTARTING, RESTARTING], pids=[(None, 100), (None, 100)])
    with caplog.at_level(logging.INFO, logger="data_builders.executors"):
        out = dict(executor([worker], max_retries=0).map(square, SHARDS))
    assert out == {k: k * k for k in range(4)}
    assert "back without a restart" in caplog.text and "died" not in caplog.text


def test_a_worker_that_restarted_is_a_death_counted_against_max_retries(caplog):
    with caplog.at_level(logging.WARNING, logger="data_builders.executors"):
        out = dict(executor([Actor(runs=[RESTARTING], pids=[(None, 999)])], max_retries=1).map(square, SHARDS))
    assert out == {k: k * k for k in range(4)}
    assert "worker 0 died running shard 0 (1 of max_retries=1); restarted" in caplog.text
    with pytest.raises(RuntimeError, match=r"shard 0 failed: its worker died 1 times \(max_retries=0\)"):
        dict(executor([Actor(runs=[RESTARTING], pids=[(None, 999)])], max_retries=0).map(square, SHARDS))


def test_a_worker_out_of_restarts_is_dropped_and_its_shard_done_elsewhere(caplog):
    gone, healthy = Actor(runs=[ActorError("The actor died unexpectedly")], pids=[ActorError("died")]), Actor()
    with caplog.at_level(logging.WARNING, logger="data_builders.executors"):
        out = dict(executor([gone, healthy], max_retries=1).map(square, SHARDS))
    assert out == {k: k * k for k in range(4)} and "worker 0 died running shard 0" in caplog.text
    assert "it is gone for good" in caplog.text and gone.n_runs == 1 and healthy.n_runs == 4   # never given more


def test_a_worker_that_never_answers_again_fails_after_the_named_timeout(monkeypatch):
    monkeypatch.setattr(executors, "RESTART_TIMEOUT_S", 0.3)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"worker 0 \(it was running shard 0\) has not answered for 0.3 s "
                                           r"\(RESTART_TIMEOUT_S"):
        dict(executor([Actor(runs=[RESTARTING], pids=[NEVER])], max_retries=2).map(square, SHARDS))
    assert time.monotonic() - start < 5


def test_an_engine_that_no_longer_loads_after_a_restart_is_raised_with_its_message():
    worker = Actor(runs=[RESTARTING], pids=[TaskError("no such file: /models/gone")])
    with pytest.raises(RuntimeError, match="worker 0 restarted and could not load the model: no such file"):
        dict(executor([worker], max_retries=2).map(square, SHARDS))
