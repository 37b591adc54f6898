"""Where shards of tasks run: ``executor=local`` (this process, one engine) or ``executor=ray`` (Ray actors, one
engine each). One interface for the three commands that run a policy over many tasks (``data_builders.build``,
``data_builders.rollout``, ``trainers.evaluate``)::

    with executor_from_config(cfg.get("executor"), cfg.model, cfg.get("backend")) as ex:
        ex.info.fingerprint                                  # the engine's identity, without loading it here
        for key, result in ex.map(work, [(key, payload), ...], on_progress=..., on_tick=..., on_work=...):
            ...                                              # the driver alone writes

``work(engine, payload, progress)`` is a module-level function; it runs where the engine is and returns a
picklable result; ``progress(item)`` reports each finished item (an episode): in-process it reaches the driver's
``on_progress`` as it happens, on Ray with the shard's result (each item once, also when a shard is redone).
``on_tick(key)`` is for progress bars: once per finished item as soon as the driver can know, in-process with
``on_progress`` and on Ray from a queue the workers report to while their shard runs (a bar that moved per shard
sat still for minutes on a batched shard of 32 episodes); a redone shard ticks only past what it ticked before, so
a bar never counts an item twice. ``on_work(key, work)`` is for the same bars in generated tokens
(``data_builders.progress.Work``: the shard's budget, tokens generated and budget credited, cumulative per shard):
in-process as they change, on Ray through the same queue at most every ``WORK_REPORT_S``. Results stream back as
shards finish (``ray.wait``), in completion order, so the caller's merge point (the shard store, the trajectory cache, the
rollout's partial file) gets each one once.

Ray is the scheduler (Ray Core actors, ``max_restarts``): a worker process that dies (killed, OOM, node lost)
is restarted by Ray and reloads its engine; its shard is redone, up to ``max_retries`` times per shard, then a
clear error names the shard while every finished shard is already written. Ray fails every call to a worker
while it restarts ("The actor is restarting"), and a call's failure does not say whether the process died, so a
failure is settled by asking the worker for its pid until it answers (Ray retries that call across the restart,
for up to ``RESTART_TIMEOUT_S``, an error naming it after that): a new pid is a death and counts against
``max_retries``, the same pid a transient unavailability that costs no retry. The shard is back in the queue at
once, so the other workers go on meanwhile. An error raised by the work itself
(a bug, a model that cannot load) is not retried: it is raised on the driver as it was raised in the worker.
"""
from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Iterator
from urllib.parse import urlsplit

import torch
from omegaconf import DictConfig, OmegaConf

from .backends import loading   # called through the module: tests replace backend_from_config
from .environments.isolation import REQUIRE_ENV
from .progress import Work as GenerationWork, metering

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install -e '.[ray]'"
Work = Callable[[Any, Any, Callable[[Any], None]], Any]
#: how often the Ray driver reads the workers' progress ticks while it waits for a shard
TICK_POLL_S = 0.5
#: how often a Ray worker sends its shard's generation budget to the driver's bar (a put per decode segment would
#: flood the queue actor)
WORK_REPORT_S = 0.5
#: how long the Ray driver waits for a worker whose call failed to answer again (Ray restarting it, which reloads
#: its engine, or its node unreachable) before the map fails
RESTART_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class EngineInfo:
    """What the driver needs of an engine that lives elsewhere: its identity (manifests, cache keys), its model
    id (the agent's call format) and model config (PTE's γ, the context limit). Duck-types the backend for
    those reads (``Agent(info)``, ``PTEConfig.gamma_for(info)``)."""

    name: str
    model_id: str
    fingerprint: str
    config: Any = None

    @classmethod
    def of(cls, backend) -> "EngineInfo":
        return cls(getattr(backend, "name", type(backend).__name__), backend.model_id, backend.fingerprint,
                   getattr(backend, "config", None))


def _plain(node: Any) -> Any:
    """A config node as plain containers: what crosses to a worker (no structured-config classes, no resolvers)."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


# ---------------------------------------------------------------------------------------------- local
class LocalExecutor:
    """Today's path: the engine loads once in this process and every shard runs on it in order."""

    name = "local"

    def __init__(self, model: Any, backend: Any = None, load: Callable | None = None):
        start = time.perf_counter()
        self.engine = (load or loading.backend_from_config)(model, backend)
        self.info = EngineInfo.of(self.engine)
        self.startup_s = time.perf_counter() - start
        self._owned = True

    @classmethod
    def on(cls, engine) -> "LocalExecutor":
        """An executor around an engine the caller already loaded."""
        self = cls.__new__(cls)
        self.engine, self.info, self.startup_s = engine, EngineInfo.of(engine), 0.0
        self._owned = False
        return self

    def map(self, work: Work, items: Iterable[tuple[Hashable, Any]],
            on_progress: Callable[[Hashable, Any], None] | None = None,
            on_tick: Callable[[Hashable], None] | None = None,
            on_work: Callable[[Hashable, GenerationWork], None] | None = None) -> Iterator[tuple[Hashable, Any]]:
        for key, payload in items:
            def report(item: Any, key: Hashable = key) -> None:
                if on_tick:
                    on_tick(key)
                if on_progress:
                    on_progress(key, item)
            if on_work is None:
                yield key, work(self.engine, payload, report)
                continue
            with metering(lambda work, key=key: on_work(key, work)):
                result = work(self.engine, payload, report)
            yield key, result

    def close(self) -> None:
        """Shut down the engine this executor loaded (an engine the caller passed in stays the caller's)."""
        shutdown = getattr(self.engine, "shutdown", None) if self._owned else None
        if shutdown is not None:
            shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- ray
class EngineWorker:
    """A Ray actor (``ray.remote(EngineWorker)``; its processes are titled ``ray::EngineWorker``) holding one engine.

    The engine loads in the constructor, which Ray reruns when it restarts a dead worker. A load that raises is
    kept and raised by every call instead of failing the constructor: Ray would restart such an actor up to
    ``max_restarts`` times, each failing the same way; this way the driver gets the loader's message at once."""

    def __init__(self, model: dict, backend: dict | None, torch_threads: int | None):
        self.error: BaseException | None = None
        try:
            if torch_threads:
                torch.set_num_threads(torch_threads)
            self.engine = loading.backend_from_config(model, backend)
        except Exception as e:     # raised by info()/run(), see the class docstring
            self.error = e

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def info(self) -> tuple[EngineInfo, int]:
        self._check()
        return EngineInfo.of(self.engine), os.getpid()

    def run(self, work: Work, payload: Any, ticks: tuple | None = None) -> tuple[list, Any]:
        """The work's result and its progress items; with ``ticks`` = ``(queue, tag)`` each item also puts ``tag``
        on that Ray queue as it finishes, and the shard's generation totals ``("work", tag, Work)`` at most every
        WORK_REPORT_S and once at its end, for the driver's progress bar."""
        self._check()
        progress: list = []

        def report(item: Any) -> None:
            progress.append(item)
            if ticks is not None:
                ticks[0].put_nowait(ticks[1])
        if ticks is None:
            return progress, work(self.engine, payload, report)
        sent_at, latest = 0.0, None     # when the totals were last sent, and what they are now

        def send(totals) -> None:
            nonlocal sent_at, latest
            latest = ("work", ticks[1], tuple(totals))
            if time.monotonic() - sent_at >= WORK_REPORT_S:
                ticks[0].put_nowait(latest)
                sent_at = time.monotonic()
        with metering(send):
            result = work(self.engine, payload, report)
        if latest is not None:
            ticks[0].put_nowait(latest)
        return progress, result


def import_ray():
    try:
        # why: Ray is an optional dependency (the ray extra); only executor=ray needs it
        import ray
    except ImportError as e:
        raise ImportError(f"executor=ray needs Ray, which is not installed ({e}): {INSTALL_HINT}") from None
    return ray


def check_reachable(address: str, timeout: float) -> None:
    """Fail within ``timeout`` when ``host:port`` (or ``ray://host:port``) accepts no connection: ``ray.init`` would
    otherwise retry for minutes. ``auto`` is left to Ray (it reads the local cluster's address file)."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError:      # a port that is not a number
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"executor.address={address!r}: expected null, 'auto', 'host:port' or 'ray://host:port'")
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"executor.address={address!r}: no Ray cluster reachable there ({e}); start one with "
                              "`ray start --head` and pass its address, or executor.address=null for a local "
                              "cluster") from None


class RayExecutor:
    """Shards on ``workers`` Ray actors, each with its share of GPUs/CPUs and one engine, one shard at a time."""

    name = "ray"

    def __init__(self, cfg: Any, model: Any, backend: Any = None):
        ray = self.ray = import_ray()
        self.cfg = cfg
        if cfg.workers < 1:
            raise ValueError(f"executor.workers must be at least 1, got {cfg.workers}")
        if cfg.max_retries < 0:
            raise ValueError(f"executor.max_retries must be >= 0, got {cfg.max_retries}")
        start = time.perf_counter()
        # A cluster this process is already connected to (a test's, a notebook's) is used as is and left running.
        self.owns_connection = not ray.is_initialized()
        if self.owns_connection:
            if cfg.address is not None:
                check_reachable(cfg.address, cfg.connect_timeout_s)
            try:
                ray.init(address=cfg.address, include_dashboard=False, log_to_driver=True,
                         logging_level=logging.WARNING)
            except ConnectionError as e:
                raise ConnectionError(f"executor.address={cfg.address!r}: {e}") from None
        try:
            self._check_fits(cfg)
        except BaseException:
            self.close()
            raise
        threads = cfg.torch_threads or max(1, int(cfg.num_cpus))
        # Workers run model-written code too: a run that requires the sandbox's OS boundary requires it there.
        env_vars = {REQUIRE_ENV: os.environ[REQUIRE_ENV]} if REQUIRE_ENV in os.environ else {}
        remote = ray.remote(EngineWorker).options(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus,
                                                  max_restarts=cfg.max_retries, max_task_retries=0,
                                                  runtime_env={"env_vars": env_vars} if env_vars else None)
        self.actors = [remote.remote(_plain(model), _plain(backend), threads) for _ in range(cfg.workers)]
        try:
            infos = self._get([a.info.remote() for a in self.actors], "load the model")
        except BaseException:
            self.close()
            raise
        self.pids = [pid for _, pid in infos]
        prints = {i.fingerprint for i, _ in infos}
        if len(prints) != 1:
            self.close()
            raise RuntimeError(f"executor=ray: the workers loaded different models: {sorted(prints)} (the same "
                               "model name resolves to other files on some nodes)")
        self.info = infos[0][0]
        self.startup_s = time.perf_counter() - start

    def _check_fits(self, cfg) -> None:
        """Actors that the cluster cannot hold would wait for resources forever: refuse them, naming what is
        missing (a cluster that autoscales reports its current nodes only: start the nodes first)."""
        have = self.ray.cluster_resources()
        for res, per in (("CPU", cfg.num_cpus), ("GPU", cfg.num_gpus)):
            need = per * cfg.workers
            if need > have.get(res, 0) + 1e-9:
                raise ValueError(f"executor=ray: {cfg.workers} workers x executor.num_{res.lower()}s={per} need {need:g} "
                                 f"{res}s; the cluster has {have.get(res, 0):g}. Lower executor.workers or the "
                                 "per-worker share, or add nodes")

    def _get(self, refs, doing: str):
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as e:
            raise _cause(e, f"executor=ray: a worker could not {doing}") from None

    def map(self, work: Work, items: Iterable[tuple[Hashable, Any]],
            on_progress: Callable[[Hashable, Any], None] | None = None,
            on_tick: Callable[[Hashable], None] | None = None,
            on_work: Callable[[Hashable, GenerationWork], None] | None = None) -> Iterator[tuple[Hashable, Any]]:
        ray = self.ray
        ticks = _Ticks(ray, on_tick or (lambda _key: None), on_work) if (on_tick or on_work) else None
        try:
            yield from self._map(work, items, on_progress, ticks)
        finally:
            if ticks is not None:
                ticks.close()

    def _map(self, work: Work, items: Iterable[tuple[Hashable, Any]],
             on_progress: Callable[[Hashable, Any], None] | None, ticks: "_Ticks | None"
             ) -> Iterator[tuple[Hashable, Any]]:
        ray = self.ray
        pending = deque(items)
        idle = deque(range(len(self.actors)))
        failures: dict[Hashable, int] = {}
        attempts: dict[Hashable, int] = {}
        finished: set = set()
        in_flight: dict[Any, tuple[int, Hashable, Any]] = {}
        # A worker whose call failed is asked for its pid until it answers (``_probe``): Ray restarts a dead worker
        # and fails calls to it meanwhile ("The actor is restarting"), so the failure itself says nothing about
        # whether the process died. The shard goes back to the queue at once; a new pid counts as a death.
        probes: dict[Any, tuple[int, Hashable, float]] = {}
        while pending or in_flight:
            while pending and idle:
                a = idle.popleft()
                key, payload = pending.popleft()
                attempts[key] = attempts.get(key, 0) + 1
                tag = (key, attempts[key])      # an attempt's ticks, told apart from a dead attempt's
                in_flight[self.actors[a].run.remote(work, payload, ticks and (ticks.queue, tag))] = (a, key, payload)
            if not in_flight and not probes:
                raise RuntimeError(f"executor=ray: every worker died more than max_retries={self.cfg.max_retries} "
                                   f"times; {len(pending)} shards left, first {pending[0][0]!r}")
            waits = [TICK_POLL_S] if ticks else []
            waits += [max(deadline - time.monotonic(), 0.0) for _, _, deadline in probes.values()]
            ready, _ = ray.wait(list(in_flight) + list(probes), num_returns=1, timeout=min(waits, default=None))
            if ticks is not None:
                ticks.drain()
            if not ready:
                self._check_deadlines(probes)
                continue
            (ref,) = ready
            if ref in probes:
                a, key, _ = probes.pop(ref)
                if self._probe(ref, a, key, failures, finished):
                    idle.append(a)
                continue
            a, key, payload = in_flight.pop(ref)
            try:
                progress, result = ray.get(ref)
            except ray.exceptions.RayActorError as e:     # died, or restarting, or unreachable: see ``_probe``
                log.warning("executor=ray: the worker running shard %r failed (%s); redoing the shard", key, e)
                pending.appendleft((key, payload))
                probes[self._probe_ref(a)] = (a, key, time.monotonic() + RESTART_TIMEOUT_S)
                continue
            except ray.exceptions.RayTaskError as e:
                raise _cause(e, f"executor=ray: shard {key!r} failed") from None
            idle.append(a)
            finished.add(key)
            if ticks is not None:
                ticks.finish(key, len(progress))
            if on_progress:
                for item in progress:
                    on_progress(key, item)
            yield key, result

    def _probe_ref(self, a: int):
        """The worker's ``info()``, retried by Ray across its restart (however long the engine takes to reload)."""
        return self.actors[a].info.options(max_task_retries=-1).remote()

    def _probe(self, ref, a: int, key: Hashable, failures: dict, finished: set) -> bool:
        """Settle a failed call from the worker's answer: the same pid is a transient unavailability (not a death,
        no retry used); a new pid a restart, and a worker Ray will not restart again a death for good, each counted
        against the shard's ``max_retries``. Whether the worker can take more work."""
        ray = self.ray
        try:
            _, pid = ray.get(ref)
            alive = True
        except ray.exceptions.RayActorError:           # out of restarts (max_restarts = max_retries)
            pid, alive = None, False
        except ray.exceptions.RayTaskError as e:       # restarted, but its engine no longer loads
            raise _cause(e, f"executor=ray: worker {a} restarted and could not load the model") from None
        if pid == self.pids[a]:
            log.info("executor=ray: worker %d is back without a restart; shard %r resubmitted, no retry used", a, key)
            return True
        if alive:
            self.pids[a] = pid
        failures[key] = failures.get(key, 0) + 1
        if failures[key] > self.cfg.max_retries and key not in finished:
            raise RuntimeError(f"executor=ray: shard {key!r} failed: its worker died {failures[key]} times "
                               f"(max_retries={self.cfg.max_retries}); every finished shard is written, a rerun "
                               "computes the rest")
        log.warning("executor=ray: worker %d died running shard %r (%d of max_retries=%d)%s", a, key,
                    failures[key], self.cfg.max_retries, "; restarted" if alive else "; it is gone for good")
        return alive

    def _check_deadlines(self, probes: dict) -> None:
        now = time.monotonic()
        for a, key, deadline in probes.values():
            if now >= deadline:
                raise RuntimeError(f"executor=ray: worker {a} (it was running shard {key!r}) has not answered for "
                                   f"{RESTART_TIMEOUT_S:g} s (RESTART_TIMEOUT_S, data_builders/executors.py) since "
                                   "its call failed: Ray is still restarting it, or its node is unreachable; every "
                                   "finished shard is written, a rerun computes the rest")

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            self.ray.kill(a, no_restart=True)
        self.actors = []
        if self.owns_connection and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Ticks:
    """The Ray side of ``on_tick``: workers put ``(key, attempt)`` on a queue actor as each item finishes; the
    driver drains it while it waits. Per shard it ticks up to the most items any attempt reported, so a shard
    redone after its worker died moves the bar only past where the dead attempt left it."""

    def __init__(self, ray, on_tick: Callable[[Hashable], None],
                 on_work: Callable[[Hashable, GenerationWork], None] | None = None):
        from ray.util.queue import Queue

        # no CPU reserved: a queue actor must not take a slot the workers were sized to fill
        self.queue = Queue(actor_options={"num_cpus": 0})
        self.on_tick, self.on_work = on_tick, on_work
        self.seen: dict[tuple, int] = {}
        self.ticked: dict[Hashable, int] = {}
        self.budget: dict[Hashable, GenerationWork] = {}    # per shard: the furthest any attempt got

    def _advance(self, key: Hashable, to: int) -> None:
        while self.ticked.get(key, 0) < to:
            self.ticked[key] = self.ticked.get(key, 0) + 1
            self.on_tick(key)

    def drain(self) -> None:
        for tag in self.queue.get_nowait_batch(self.queue.qsize()):
            if len(tag) == 3:       # ("work", (key, attempt), Work fields)
                key, work = tag[1][0], GenerationWork(*tag[2])
                # a redone shard moves the bar only past where its dead attempt left it
                if self.on_work is not None and work.spent >= self.budget.get(key, GenerationWork()).spent:
                    self.budget[key] = work
                    self.on_work(key, work)
                continue
            self.seen[tag] = self.seen.get(tag, 0) + 1
            self._advance(tag[0], self.seen[tag])

    def finish(self, key: Hashable, n_items: int) -> None:
        """A shard returned with ``n_items``: its ticks still in the queue come first, then any missing ones."""
        self.drain()
        self._advance(key, n_items)

    def close(self) -> None:
        self.queue.shutdown()


def _cause(err, context: str) -> BaseException:
    """The worker's own exception (its type, so callers and tests catch it as raised there), its message prefixed
    with where it happened; Ray's wrapper when the cause cannot be rebuilt."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        try:
            return type(cause)(f"{context}: {cause}")
        except Exception:
            pass
    return RuntimeError(f"{context}: {err}")


def executor_from_config(cfg: Any, model: Any, backend: Any = None, load: Callable | None = None):
    """The executor named by an ``executor`` config group (absent: local) for the policy ``model`` on ``backend``;
    ``load`` replaces the local engine loader (a caller's own reference to it, which tests replace)."""
    name = cfg.get("name", "local") if cfg is not None else "local"
    if name == "local":
        return LocalExecutor(model, backend, load)
    if name == "ray":
        return RayExecutor(cfg, model, backend)
    raise ValueError(f"unknown executor {name!r}; choose local or ray")


def spread(tasks: list, workers: int, shard_size: int | None) -> list[list]:
    """``tasks`` cut into consecutive shards of ``shard_size`` (None: as evenly as ``workers`` allow)."""
    if not tasks:
        return []
    size = shard_size or -(-len(tasks) // max(workers, 1))
    return [tasks[i:i + size] for i in range(0, len(tasks), size)]
