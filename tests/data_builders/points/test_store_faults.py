"""Fault injection for the decision-point store: every damaged dataset is either refused by ``load_points`` with
a message naming what is wrong, and repaired by rerunning the build (which recomputes exactly the damaged
shards), or refused by the rebuild too, never loaded as a different dataset. Two writers racing for one
directory: one wins, the other is refused, nothing crashes.

The build is ``data_builders.build.run`` itself with a fake backend and a deterministic fake labeler (no model):
features are a function of the task id, so a recomputed shard is bitwise the shard it replaces.
"""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import queue
import shutil
import subprocess
import threading
import time
import traceback
from pathlib import Path

import pytest
import torch

import data_builders.build
import recipes
from data_builders.backends import loading
from data_builders.points import labelers
from data_builders.points.store import CorruptDataset, ManifestMismatch, PointStore, StoreLocked, load_points
from data_builders.tasks import tasks_from_config

EMPTY = 2          # this shard's tasks give no points (a shard with a .done marker and no data files)


# ------------------------------------------------------------------------------------------- a build without a model
class FakeBackend:
    name, model_id, fingerprint, config = "fake", "fake-policy", "fake-policy@0", None


class Build:
    """``data_builders.build.run`` on 12 built-in tasks in 6 shards of 2, with a fake labeler that records which
    shards it computed."""

    def __init__(self, out: Path, monkeypatch):
        self.cfg = recipes.compose("build", ["kind=probe", "tasks=builtin", "tasks.n_per_cell=1", "limit=6",
                                             "shard_size=2", f"out_dir={out}"])
        self.out = out
        tasks = [t for s in self.cfg.splits for t in tasks_from_config(self.cfg, s)]
        self.shard_of = {str(t.id): i // self.cfg.shard_size for i, t in enumerate(tasks)}
        self.n_shards = max(self.shard_of.values()) + 1
        self.computed: list[int] = []
        monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: FakeBackend())
        monkeypatch.setattr(labelers, "label_probe", self.label)

    def label(self, backend, chunk, splits, cfg, progress=None):   # a labeler's signature
        shard = self.shard_of[str(chunk[0].id)]
        self.computed.append(shard)
        pairs = [(t, s) for t, s in zip(chunk, splits) if shard != EMPTY]
        rows = [{"point_id": f"{t.id}#0", "task_id": str(t.id), "split": s, "env": t.env.name,
                 "category": t.category, "difficulty": t.difficulty, "label": int(t.category == "B")}
                for t, s in pairs]
        feats = [[b / 255 for b in hashlib.sha256(str(t.id).encode()).digest()[:8]] for t, _ in pairs]
        return rows, {"hidden": torch.tensor(feats, dtype=torch.float32).reshape(len(pairs), 2, 4)}

    def run(self, **over) -> list[int]:
        """Rerun the build; the shards it computed."""
        self.computed = []
        cfg = self.cfg.copy()
        for k, v in over.items():
            cfg[k] = v
        data_builders.build.run(cfg)
        return sorted(self.computed)


@pytest.fixture
def build(tmp_path, monkeypatch):
    b = Build(tmp_path / "points", monkeypatch)
    assert b.run() == list(range(b.n_shards)) and b.n_shards == 6
    b.reference = load_points(b.out)
    assert len(b.reference) == 10            # 12 tasks, the 2 of the empty shard give no points
    return b


def shard(root: Path, i: int, ext: str) -> Path:
    return root / f"shard-{i:05d}.{ext}"


def assert_same(a, b):
    assert a.points["point_id"] == b.points["point_id"]
    assert a.points.to_list() == b.points.to_list()
    assert a.features.keys() == b.features.keys()
    assert all(torch.equal(a.features[k], b.features[k]) for k in a.features)
    assert a.manifest == b.manifest


def edit_manifest(root: Path, edit) -> None:
    path = root / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))


def swap(a: Path, b: Path) -> None:
    tmp = a.with_name("swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def copy_shard(root: Path, src: int, dst: int) -> None:
    for ext in ("parquet", "safetensors", "done"):
        shutil.copy(shard(root, src, ext), shard(root, dst, ext))


def set_counts(m):
    m["counts"]["points"] += 1


def drop_listed_shard(m):
    m["shards"] = [s for s in m["shards"] if s["shard"] != 3]


def unlink(i, *exts):
    return lambda r: [shard(r, i, e).unlink() for e in exts]


# damage → (what load_points must say, the shards the rebuild must recompute)
REPAIRABLE = {
    "shard deleted": (unlink(1, "parquet", "safetensors", "done"),
                      r"shard-00001\.done: missing \(shard 1 is in the manifest\)", [1]),
    "parquet deleted": (unlink(1, "parquet"), r"shard-00001\.parquet: missing \(shard 1, 2 points expected\)", [1]),
    ".done deleted": (unlink(4, "done"), r"shard-00004\.done: missing", [4]),
    "features deleted": (unlink(5, "safetensors"), r"shard-00005\.safetensors: missing", [5]),
    "parquet truncated": (lambda r: truncate(shard(r, 0, "parquet")),
                          r"shard-00000\.parquet: content differs from what was written \(sha256 expected", [0]),
    "features truncated": (lambda r: truncate(shard(r, 3, "safetensors")),
                           r"shard-00003\.safetensors: content differs", [3]),
    "extra shard copied in": (lambda r: copy_shard(r, 1, 6),
                              r"shard-00006\.done, shard-00006\.parquet, shard-00006\.safetensors: shard 6 is not "
                              r"in the manifest", []),
    "shard copied over the empty one": (lambda r: copy_shard(r, 1, EMPTY),
                                        r"shard-00002\.done: does not match the manifest's record of shard 2", [2]),
    "features swapped": (lambda r: swap(shard(r, 0, "safetensors"), shard(r, 1, "safetensors")),
                         r"shard-00000\.safetensors: content differs(.|\n)*shard-00001\.safetensors: content differs",
                         [0, 1]),
    "tables swapped": (lambda r: swap(shard(r, 3, "parquet"), shard(r, 4, "parquet")),
                       r"shard-00003\.parquet: content differs", [3, 4]),
    "marker damaged": (lambda r: shard(r, 5, "done").write_text("{not json"), r"shard-00005\.done: not valid JSON",
                       [5]),
    "counts edited": (lambda r: edit_manifest(r, set_counts), r"counts say 11 points, the shards hold 10", []),
    "shard list edited": (lambda r: edit_manifest(r, drop_listed_shard),
                          r"lists shards \[0, 1, 2, 4, 5\], expected 0\.\.5(.|\n)*shard 3 is not in the manifest", []),
    "stray file": (lambda r: (r / "shard-00001.parquet.bak").write_bytes(b"x"), r"not a file of this store", None),
}


@pytest.mark.parametrize("case", list(REPAIRABLE))
def test_damage_is_refused_by_loading_and_repaired_by_the_rebuild(build, case):
    damage, message, recomputed = REPAIRABLE[case]
    damage(build.out)
    with pytest.raises(CorruptDataset, match=message) as err:
        load_points(build.out)
    assert str(build.out) in str(err.value)
    if recomputed is None:                   # a file that is no shard: the rebuild refuses it too, naming it
        with pytest.raises(CorruptDataset, match=r"shard-00001\.parquet\.bak: not a file of this store"):
            build.run()
        return
    assert "Rerun" in str(err.value)         # says how to repair it
    assert build.run() == recomputed
    assert_same(load_points(build.out), build.reference)


def test_edited_identity_is_refused_by_loading_and_by_the_rebuild(build):
    edit_manifest(build.out, lambda m: m.update(backend="another-policy@1"))
    with pytest.raises(CorruptDataset, match=r"shard-00000\.done: does not match the manifest's record of shard 0"):
        load_points(build.out)
    with pytest.raises(ManifestMismatch, match=r"backend: on disk 'another-policy@1', requested 'fake-policy@0'"):
        build.run()
    assert build.run(overwrite=True) == list(range(6))
    assert_same(load_points(build.out), build.reference)


def test_invalid_manifest_names_its_file(build):
    (build.out / "manifest.json").write_text('{"kind": "probe", ')
    with pytest.raises(CorruptDataset, match=rf"{build.out / 'manifest.json'}: not valid JSON"):
        load_points(build.out)
    with pytest.raises(CorruptDataset, match=r"manifest\.json: not valid JSON"):
        build.run()
    assert build.run(overwrite=True) == list(range(6))
    assert_same(load_points(build.out), build.reference)


def test_a_killed_repair_leaves_an_incomplete_dataset(build, monkeypatch):
    unlink(1, "parquet")(build.out)

    def killed(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(labelers, "label_probe", killed)
    with pytest.raises(KeyboardInterrupt):
        build.run()
    with pytest.raises(ManifestMismatch, match="not complete"):
        load_points(build.out)
    monkeypatch.setattr(labelers, "label_probe", build.label)
    assert build.run() == [1]
    assert_same(load_points(build.out), build.reference)


def make_legacy(root: Path) -> None:
    """What the store wrote before hashes: no shard list in the manifest, markers with the point count only."""
    edit_manifest(root, lambda m: [m.pop(k) for k in ("shards", "n_shards")])
    for f in root.glob("shard-*.done"):
        f.write_text(json.dumps({"points": json.loads(f.read_text())["points"]}))


def test_datasets_without_hashes_load_with_a_warning_and_are_checked_for_shards_and_counts(build, caplog):
    make_legacy(build.out)
    with caplog.at_level(logging.WARNING, logger="data_builders.points.store"):
        legacy = load_points(build.out)
    assert "written before shard hashes were recorded" in caplog.text
    assert legacy.points.to_list() == build.reference.points.to_list()
    # the checks that need no hashes still run
    for damage, message in [(unlink(1, "parquet", "safetensors", "done"), r"5 shards are done, expected 6 \(0\.\.5\); "
                                                                         r"missing: shard-00001\.done"),
                            (unlink(3, "done"), r"shard-00003\.parquet, shard-00003\.safetensors: shard 3 has no "
                                                r"\.done marker"),
                            (unlink(4, "safetensors"), r"shard-00004\.safetensors: missing"),
                            (lambda r: swap(shard(r, 0, "parquet"), shard(r, 1, "parquet")),
                             r"shard-00000\.parquet: holds rows of shard\(s\) \[1\], not of shard 0"),
                            (lambda r: edit_manifest(r, set_counts), r"counts say 11 points, the shards hold 10")]:
        copy = build.out.with_name("legacy-copy")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(build.out, copy)
        damage(copy)
        with pytest.raises(CorruptDataset, match=message):
            load_points(copy)
    # rerunning the build adds the hashes without recomputing anything
    assert build.run() == []
    assert_same(load_points(build.out), build.reference)


# ------------------------------------------------------------------------------------------- the lock
MANIFEST = {"kind": "probe", "task_hash": "abc", "backend": "m@1", "featurizer": {"name": "f", "version": 1},
            "label_rule": "r", "shard_size": 2, "builder": {"max_rounds": 2}}


def rows(n=2):
    return [{"point_id": f"p{k}", "task_id": f"t{k}", "split": "train", "env": "E", "category": "A",
             "difficulty": "easy", "label": k % 2} for k in range(n)]


def test_a_second_writer_is_refused_naming_the_directory_and_the_holder(tmp_path):
    first = PointStore(tmp_path, MANIFEST)
    with pytest.raises(StoreLocked, match=rf"{tmp_path}: another writer holds .*pid {os.getpid()}"):
        PointStore(tmp_path, MANIFEST)
    # waiting: the holder finishes within the timeout
    threading.Timer(0.3, first.close).start()
    t0 = time.monotonic()
    with PointStore(tmp_path, MANIFEST, lock_timeout=10) as second:
        assert time.monotonic() - t0 >= 0.2
        second.write_shard(0, rows(), {"x": torch.zeros(2, 3)})
        second.finalize({"points": 2})
        with pytest.raises(RuntimeError, match="was closed"):
            second.write_shard(1, rows(), {"x": torch.zeros(2, 3)})
    assert not (tmp_path / ".lock.json").exists() and len(load_points(tmp_path)) == 2


def test_only_temporaries_of_dead_writers_are_cleaned(tmp_path):
    live = subprocess.Popen(["sleep", "30"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        mine = tmp_path / f".manifest.json.pid{os.getpid()}.abc.tmp"
        theirs = tmp_path / f".shard-00000.parquet.pid{live.pid}.abc.tmp"
        stale = tmp_path / f".shard-00000.parquet.pid{dead.pid}.abc.tmp"
        old_style = tmp_path / ".shard-00000.parquet.x1y2.tmp"          # before pids were in the name
        for f in (mine, theirs, stale, old_style):
            f.write_bytes(b"partial")
        PointStore(tmp_path, MANIFEST).close()
        assert theirs.exists() and not any(f.exists() for f in (mine, stale, old_style))
    finally:
        live.kill()
        live.wait()


def racer(root: str, backend: str, trials: int, barrier, results) -> None:
    """One of two processes opening the same fresh directory per trial, each with its own identity."""
    torch.set_num_threads(1)
    value = float(backend == "B")
    for t in range(trials):
        d = Path(root) / f"{t:03d}"
        try:
            barrier.wait(timeout=60)
        except Exception:
            results.put((t, backend, "crash", "barrier broken"))
            return
        try:
            with PointStore(d, {**MANIFEST, "backend": backend}) as store:
                store.write_shard(0, rows(), {"x": torch.full((2, 3), value)})
                time.sleep(0.02 * (t % 2))          # every other trial, a writer that takes a little longer
                store.finalize({"points": 2})
            results.put((t, backend, "ok", ""))
        except (StoreLocked, ManifestMismatch) as e:
            results.put((t, backend, "refused", str(e)))
        except BaseException:
            results.put((t, backend, "crash", traceback.format_exc()))


@pytest.mark.slow
def test_two_writers_racing_one_wins_the_other_is_refused(tmp_path):
    """200 trials, two long-lived processes released together by a barrier for each trial (starting 400
    processes would take minutes of imports on two cores; the contention per trial is the same)."""
    trials, ctx = 200, mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=racer, args=(str(tmp_path), b, trials, barrier, results)) for b in "AB"]
    for p in procs:
        p.start()
    out: dict[int, dict[str, tuple[str, str]]] = {}
    try:
        for _ in range(2 * trials):
            t, backend, outcome, msg = results.get(timeout=120)
            out.setdefault(t, {})[backend] = (outcome, msg)
    except queue.Empty:
        pytest.fail(f"racers stalled after {sum(map(len, out.values()))} results")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    crashes = [m for r in out.values() for o, m in r.values() if o == "crash"]
    assert not crashes, crashes[0]
    by_lock = named = 0
    for t, r in sorted(out.items()):
        winners = [b for b, (o, _) in r.items() if o == "ok"]
        assert len(winners) == 1, (t, r)                           # never both accepted, never neither
        (loser_msg,) = [m for b, (o, m) in r.items() if o == "refused"]
        d = tmp_path / f"{t:03d}"
        assert str(d) in loser_msg
        if "another writer holds" in loser_msg:
            by_lock += 1
            named += "(pid " in loser_msg
        else:
            assert "resume refused" in loser_msg
        ds = load_points(d)                                         # the winner's dataset, whole
        assert ds.manifest["backend"] == winners[0]
        assert torch.equal(ds.features["x"], torch.full((2, 3), float(winners[0] == "B")))
        assert not list(d.glob(".*.tmp")) and not (d / ".lock.json").exists()
    assert by_lock > 0, "the writers never overlapped: the race was not exercised"
    assert named == by_lock, (named, by_lock)                  # the holder is named
    print(f"{trials} trials: loser refused by the lock {by_lock} times ({named} naming the holder's pid), "
          f"by the identity check {trials - by_lock} times")


def test_rewriting_a_shard_of_a_complete_dataset_makes_it_incomplete_until_finalized(tmp_path):
    with PointStore(tmp_path, MANIFEST) as store:
        store.write_shard(0, rows(), {"x": torch.zeros(2, 3)})
        store.finalize({"points": 2})
    with PointStore(tmp_path, MANIFEST) as store:
        store.write_shard(0, rows(), {"x": torch.ones(2, 3)})
        with pytest.raises(ManifestMismatch, match="not complete"):   # a reader meanwhile: never the old list
            load_points(tmp_path)
        store.finalize({"points": 2})
    assert torch.equal(load_points(tmp_path).features["x"], torch.ones(2, 3))


def test_a_fit_repairs_its_own_damaged_dataset(tmp_path, monkeypatch):
    """trainers.controller.points: a dataset the fit built itself (no points.dir) and finds damaged is
    repaired by the build, not used and not left to fail every later fit."""
    from trainers.controller.points import decision_points

    computed = []

    def label(backend, chunk, splits, cfg, progress=None):
        computed.append(str(chunk[0].id))
        rows = [{"point_id": f"{t.id}#0", "task_id": str(t.id), "split": s, "env": t.env.name, "category": t.category,
                 "difficulty": t.difficulty, "label": int(t.category == "B")} for t, s in zip(chunk, splits)]
        return rows, {"hidden": torch.arange(len(chunk) * 4, dtype=torch.float32).reshape(len(chunk), 2, 2)}

    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: FakeBackend())
    monkeypatch.setattr(labelers, "label_probe", label)
    cfg = recipes.compose("fit", ["recipe=probe_prefill", "logger=none", f"recipe.points.root={tmp_path / 'pts'}",
                                  f"recipe.export_dir={tmp_path / 'ckpt'}", "+recipe.points.build.shard_size=8"])
    first, build = decision_points(cfg)
    n_shards = len(computed)
    assert n_shards > 2
    shard(Path(build.out_dir), 1, "safetensors").unlink()
    computed.clear()
    again, _ = decision_points(cfg)
    assert len(computed) == 1                                        # shard 1 only
    assert again.points.to_list() == first.points.to_list()
    assert all(torch.equal(again.features[k], first.features[k]) for k in first.features)


def test_the_point_tables_load_without_the_features(tmp_path):
    with PointStore(tmp_path, MANIFEST) as store:
        store.write_shard(0, rows(2), {"hidden": torch.zeros(2, 3)})
        store.finalize({"points": 2, "positives": 1})
    (tmp_path / "shard-00000.safetensors").write_bytes(b"not read")    # tensors are not even opened
    tables = load_points(tmp_path, features=False)
    assert tables.points["task_id"] == ["t0", "t1"] and tables.features == {}
    with pytest.raises(CorruptDataset, match="shard-00000.safetensors"):
        load_points(tmp_path)
