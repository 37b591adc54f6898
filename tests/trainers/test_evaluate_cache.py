"""The evaluator's trajectory cache under concurrent runs sharing one ``cache_dir`` (a cluster's shared file
system): writer processes released together by a barrier, trial after trial, must give no crash, no file that
mixes two writers and no lost entry."""
from __future__ import annotations

import json
import multiprocessing as mp
import queue
import traceback
from pathlib import Path

import pytest

from data_builders.agent.trajectory import read_trajectories, write_jsonl
from data_builders.tasks.schema import Task, task_key
from tests.trajectories import make_trajectory
from trainers.evaluate.cache import TrajectoryCache, load_scores, store_scores

WRITERS, TRIALS, OWN, SHARED = 3, 120, 4, 2
SPEC = {"name": "default", "mode": "default", "reasoning": False}
DECODING = {"max_rounds": 3}
PADDING = "x" * 20_000         # a record the size of a real episode, so the writes of a trial overlap


def task(i: int) -> Task:
    return Task.from_dict({"id": i, "instruction": f"Answer with only the number: {i}+1", "difficulty": "easy",
                           "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"]}],
                           "expected": {"answer": str(i + 1)}}, split="test")


def tasks_of(writer: int) -> list[Task]:
    """The writer's own tasks, then the tasks every writer computes (two runs with overlapping arms)."""
    return [task(100 * (writer + 1) + k) for k in range(OWN)] + [task(k) for k in range(SHARED)]


def episode(t: Task, writer: int):
    return make_trajectory(task_id=t.id, policy=f"writer-{writer}", gold=t.answer,
                           messages=[{"role": "user", "content": t.instruction + PADDING}])


def racer(root: str, writer: int, trials: int, barrier, results) -> None:
    """One run: per trial, two shards of its arm stored into the shared cache, its probe scores, and a whole
    JSONL rewritten at a path every writer uses (the shared writer the cache used to rewrite its files with)."""
    mine = tasks_of(writer)
    for t in range(trials):
        d = Path(root) / f"{t:03d}"
        try:
            barrier.wait(timeout=60)
        except Exception:
            results.put((t, writer, "crash", "barrier broken"))
            return
        try:
            cache = TrajectoryCache(d, "policy@0", DECODING)
            have, todo = cache.missing(SPEC, mine)
            half = len(todo) // 2
            for shard in (todo[:half], todo[half:]):
                cache.store(SPEC, have, [(x, episode(x, writer)) for x in shard])
            store_scores(d, "probe_p-x", {task_key(x): float(writer) for x in mine})
            write_jsonl(d / "trajectories.jsonl", [{"writer": writer, "i": i, "pad": PADDING} for i in range(20)])
            results.put((t, writer, "ok", ""))
        except BaseException:
            results.put((t, writer, "crash", traceback.format_exc()))


@pytest.mark.slow
def test_concurrent_runs_sharing_a_cache_dir_lose_nothing_and_never_mix_files(tmp_path):
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=racer, args=(str(tmp_path), w, TRIALS, barrier, results)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    out: dict[int, dict[int, tuple[str, str]]] = {}
    try:
        for _ in range(WRITERS * TRIALS):
            t, writer, outcome, msg = results.get(timeout=120)
            out.setdefault(t, {})[writer] = (outcome, msg)
    except queue.Empty:
        pytest.fail(f"writers stalled after {sum(map(len, out.values()))} results")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    crashes = [m for r in out.values() for o, m in r.values() if o == "crash"]
    assert not crashes, f"{len(crashes)} crashes; first: {crashes[0]}"

    everyone = {task_key(x) for w in range(WRITERS) for x in tasks_of(w)}
    lost = mixed = duplicated = 0
    for t in range(TRIALS):
        d = tmp_path / f"{t:03d}"
        cache = TrajectoryCache(d, "policy@0", DECODING)
        have = cache.load(SPEC)
        lost += len(everyone - set(have))
        for seg in cache.segments(SPEC):            # every segment is one writer's, whole
            writers = {tr.policy for tr in read_trajectories(seg)}
            mixed += len(writers) != 1
        duplicated += sum(1 for seg in cache.segments(SPEC) for _ in read_trajectories(seg)) - len(have)
        assert {k: tr.task_id for k, tr in have.items()} == \
            {task_key(x): x.id for w in range(WRITERS) for x in tasks_of(w)}
        assert set(load_scores(d, "probe_p-x")) == everyone
        rows = [json.loads(line) for line in (d / "trajectories.jsonl").read_text().splitlines()]
        mixed += len({r["writer"] for r in rows}) != 1 or [r["i"] for r in rows] != list(range(20))
        assert not list(d.rglob("*.tmp")), "a writer left its temp file behind"
    assert (lost, mixed) == (0, 0), (lost, mixed)
    # the shared tasks were computed by every run that found them missing: stored more than once, never lost
    assert duplicated <= TRIALS * SHARED * (WRITERS - 1)
    print(f"{TRIALS} trials x {WRITERS} writers: 0 crashes, 0 mixed files, 0 lost entries "
          f"({duplicated} shared entries stored by more than one run)")


def test_a_store_adds_a_segment_and_never_rewrites_what_is_there(tmp_path):
    cache = TrajectoryCache(tmp_path, "policy@0", DECODING)
    have, todo = cache.missing(SPEC, tasks_of(0))
    cache.store(SPEC, have, [(x, episode(x, 0)) for x in todo[:3]])
    (first,) = cache.segments(SPEC)
    before = first.read_bytes()
    # a second run read the cache before the first stored: its copies of the first's tasks are not lost either
    other = TrajectoryCache(tmp_path, "policy@0", DECODING)
    have2, todo2 = other.missing(SPEC, tasks_of(0))
    assert len(todo2) == len(todo) - 3
    other.store(SPEC, have2, [(x, episode(x, 1)) for x in todo2])
    cache.store(SPEC, have, [(x, episode(x, 0)) for x in todo[:3]])     # already there: nothing written
    assert first.read_bytes() == before and len(cache.segments(SPEC)) == 2
    assert set(cache.load(SPEC)) == {task_key(x) for x in tasks_of(0)}
    assert (cache.path(SPEC) / "spec.json").exists()
