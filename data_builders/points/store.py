"""Decision-point datasets on disk (docs/architecture.md#decision-point-dataset): a manifest, parquet point tables and
safetensors feature tensors, written shard by shard so a killed build resumes without loss or duplicates.

Layout of a dataset directory::

    manifest.json                 identity (kind, tasks, backend, featurizer, label rule, builder config) + counts
                                  + (once complete) the shard list with each shard's point count and file hashes
    shard-00000.safetensors       feature tensors of the shard's points, row-aligned with its parquet
    shard-00000.parquet           one row per point: point_id, task_id, split, env, category, difficulty, label, ...
    shard-00000.done              written last: the shard is complete; its point count, the sha256 of its files
                                  and a digest of the identity it was computed for
    .lock, .lock.json             the writer's file lock (``filelock``) and who holds it (pid, host, command)

A shard covers a fixed slice of the task list, so a resumed build computes exactly the shards that have no
valid ``.done`` marker, in the same batches as an uninterrupted build, and the result is bitwise identical.
Every file is written to a temporary name carrying the writer's pid and renamed into place (atomic on POSIX).
One writer at a time: ``PointStore`` holds the directory's file lock from opening to ``finalize``/``close``.
Opening verifies every finished shard against its marker and deletes what does not match (missing, truncated,
swapped, copied-in or foreign-identity files), so rerunning the build repairs exactly the damaged shards.

``load_points`` reads all shards back (``datasets`` for the table) after checking them against the manifest:
the shard list, every file's sha256, the point counts. It refuses a dataset that differs, naming each file and
what was expected. Datasets written before hashes existed (no shard list in the manifest) still load, with
their shard list, files and counts checked and a warning that the hashes are absent. The table is sharded
rather than one ``points.parquet`` because a single parquet file cannot be appended atomically.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets import Dataset
from filelock import FileLock, Timeout
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors, save_file

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# Manifest keys that identify what the points mean. A resumed build, or a loader that names an expected
# backend/featurizer, must agree on these.
IDENTITY_KEYS = ("schema_version", "kind", "task_hash", "backend", "featurizer", "label_rule", "shard_size", "builder")
FILES = ("parquet", "safetensors")          # a shard's data files; a shard with no points has neither
LOCK, HOLDER = ".lock", ".lock.json"
_TMP_PID = re.compile(r"\.pid(\d+)\.[^.]*\.tmp$")


class ManifestMismatch(ValueError):
    """The dataset on disk was built for something else than what is asked (backend, featurizer, tasks...)."""


class CorruptDataset(ValueError):
    """The files on disk are not the dataset the manifest describes (missing, extra, truncated, swapped...)."""


class StoreLocked(RuntimeError):
    """Another writer holds the dataset directory."""


def task_hash(tasks: Iterable[Any]) -> str:
    """Content hash of a task list: ids, instructions, answers, splits, in order."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(json.dumps([str(t.id), t.instruction, t.answer, t.split, t.env.name], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def identity_digest(manifest: dict) -> str:
    """What a shard was computed for: stored in its marker, so a shard of another build (or a manifest whose
    identity was edited afterwards) is caught."""
    ident = {k: manifest.get(k) for k in IDENTITY_KEYS}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _atomic_write(path: Path, write) -> None:
    # The pid in the name tells a later writer whether the temporary belongs to a live process.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.pid{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_json(path: Path, obj: Any) -> None:
    _atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2, sort_keys=True)))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptDataset(f"{path}: not valid JSON ({e}); the file is damaged: rebuild the dataset "
                             "(overwrite=true) or restore the file") from None


def read_manifest(path: str | Path) -> dict[str, Any]:
    """A dataset's ``manifest.json``; a damaged one is a :class:`CorruptDataset` naming the file."""
    manifest = _read_json(Path(path))
    if not isinstance(manifest, dict):
        raise CorruptDataset(f"{path}: not a manifest (a JSON object expected, found {type(manifest).__name__})")
    return manifest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _differences(want: dict, have: dict, keys: Sequence[str]) -> list[str]:
    return [f"{k}: on disk {have.get(k)!r}, requested {want.get(k)!r}" for k in keys if have.get(k) != want.get(k)]


def _shard_name(i: int, ext: str) -> str:
    return f"shard-{i:05d}.{ext}"


def _index(f: Path) -> int | None:
    m = re.fullmatch(r"shard-(\d{5,})\.(parquet|safetensors|done)", f.name)
    return int(m[1]) if m else None


def _on_disk(root: Path) -> dict[int, set[str]]:
    """Shard index → the extensions present (parquet, safetensors, done)."""
    found: dict[int, set[str]] = {}
    for f in root.glob("shard-*"):
        i = _index(f)
        if i is None:
            raise CorruptDataset(f"{f}: not a file of this store (shard files are shard-NNNNN.parquet|safetensors|"
                                 "done); move it out of the dataset directory")
        found.setdefault(i, set()).add(f.suffix[1:])
    return found


def _check_shard(root: Path, i: int, record: dict, files: Sequence[str] = FILES) -> tuple[list[str], dict[str, Any]]:
    """Problems of shard ``i``'s ``files`` against its ``record`` (``points``, and ``sha256`` per file when
    recorded), one line each naming the file, and the parsed contents (``parquet``: a table, ``safetensors``:
    name → tensor): each file is read once, hashed and parsed from memory, so what is checked is what is loaded."""
    problems, parsed, n = [], {}, record.get("points")
    want = record.get("sha256")
    expected = set(want) if isinstance(want, dict) else (set(FILES) if n else set())
    for ext in files:
        f = root / _shard_name(i, ext)
        if ext not in expected:
            if f.exists():
                problems.append(f"{f.name}: shard {i} has {n} points and no {ext} file, but one is there")
            continue
        if not f.is_file():
            problems.append(f"{f.name}: missing (shard {i}, {n} points expected)")
            continue
        data = f.read_bytes()
        if want is not None and _sha256(data) != want[ext]:
            problems.append(f"{f.name}: content differs from what was written (sha256 expected "
                            f"{want[ext][:12]}…, found {_sha256(data)[:12]}…; {len(data)} bytes)")
            continue
        try:
            parsed[ext] = pq.read_table(pa.BufferReader(data)) if ext == "parquet" else load_tensors(data)
        except (pa.ArrowException, SafetensorError, ValueError, OSError) as e:
            problems.append(f"{f.name}: unreadable ({e})")
            continue
        if ext == "parquet":
            rows = {parsed[ext].num_rows}
            # rows carry their shard index: catches a table moved between shards even without hashes
            other = set(parsed[ext]["shard"].to_pylist()) - {i} if "shard" in parsed[ext].column_names else set()
            if other:
                problems.append(f"{f.name}: holds rows of shard(s) {sorted(other)}, not of shard {i}")
        else:
            rows = {t.shape[0] for t in parsed[ext].values()}
        if rows != {n}:
            problems.append(f"{f.name}: {sorted(rows)} rows, expected {n}")
    return problems, parsed


def _marker(root: Path, i: int) -> dict | None:
    f = root / _shard_name(i, "done")
    if not f.is_file():
        return None
    try:
        rec = _read_json(f)
    except CorruptDataset:
        return {"invalid": f"{f.name}: not valid JSON"}
    if not isinstance(rec, dict) or not isinstance(rec.get("points"), int):
        return {"invalid": f"{f.name}: not a shard marker ({rec!r:.80})"}
    return rec


class PointStore:
    """Writes one decision-point dataset; reopening the same directory resumes it.

    Holds the directory's file lock until ``finalize``/``close`` (or use it as a context manager): a second
    writer is refused with :class:`StoreLocked` naming the holder, after waiting up to ``lock_timeout`` seconds.
    ``manifest["n_shards"]``, when given, is the expected shard count: shards beyond it are deleted on opening
    and ``finalize`` requires all of them."""

    def __init__(self, root: str | Path, manifest: dict[str, Any], *, overwrite: bool = False,
                 lock_timeout: float = 0.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire(lock_timeout)
        try:
            self._open(manifest, overwrite)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------- the lock
    def _acquire(self, timeout: float) -> FileLock:
        # not thread-local: the store, not a thread, owns the lock (close() may run in another thread)
        lock = FileLock(str(self.root / LOCK), thread_local=False)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            who = self._holder(lock)
            if who is not None:
                raise StoreLocked(f"{self.root}: another writer holds this decision-point dataset ({who}); "
                                  "wait for it to finish, or build into another out_dir") from None
        _write_json(self.root / HOLDER, {"pid": os.getpid(), "host": socket.gethostname(),
                                         "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                                         "command": " ".join(sys.argv)})
        return lock

    def _holder(self, lock: FileLock) -> str | None:
        """Who holds the lock, from the note the holder writes right after acquiring; None when the lock was
        released meanwhile and is now ours. Either happens within moments: a writer that has just won the lock
        writes its note next, and one that has just finished already released the lock with its note."""
        for _ in range(100):
            try:
                h = json.loads((self.root / HOLDER).read_text())
                who = (f"pid {h['pid']} on {h['host']} since {h['since']}"
                       + (f", running: {h['command']}" if h.get("command") else ""))
                if h["pid"] == os.getpid() and h["host"] == socket.gethostname():
                    who = f"another PointStore of this process, still open: close() or finalize() it; {who}"
                return who
            except (OSError, ValueError, KeyError, TypeError):
                try:
                    lock.acquire(timeout=0.01)
                    return None
                except Timeout:
                    pass
        return "holder unknown: it wrote no note"

    def close(self) -> None:
        """Release the directory (idempotent)."""
        lock, self._lock = getattr(self, "_lock", None), None
        if lock is not None and lock.is_locked:
            (self.root / HOLDER).unlink(missing_ok=True)
            lock.release()

    def __enter__(self) -> "PointStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # interpreter shutdown: modules may be gone; the OS drops the lock with the process
            pass

    def _require_lock(self) -> None:
        if self._lock is None:
            raise RuntimeError(f"{self.root}: this PointStore was closed; open a new one to write")

    # ------------------------------------------------------------------------------------------- opening
    def _open(self, manifest: dict, overwrite: bool) -> None:
        self.manifest = {"schema_version": SCHEMA_VERSION, **manifest}
        path = self.root / "manifest.json"
        self._clean_temporaries()
        if path.exists() and not overwrite:
            have = read_manifest(path)
            diff = _differences(self.manifest, have, IDENTITY_KEYS)
            if diff:
                raise ManifestMismatch(f"{self.root} holds a different build; resume refused:\n  " + "\n  ".join(diff)
                                       + "\n(use another out_dir, or overwrite=true to rebuild from scratch)")
            self.manifest = {**have, **{k: self.manifest[k] for k in self.manifest
                                        if k not in ("counts", "complete", "shards")}}
            self._repair()
        else:
            if overwrite:
                for f in self.root.glob("shard-*"):
                    f.unlink()
            self.manifest["complete"] = False
            _write_json(path, self.manifest)

    def _clean_temporaries(self) -> None:
        """Temporaries of writers that are gone (or of this process); a live process's files in flight stay."""
        for f in self.root.glob(".*.tmp"):
            m = _TMP_PID.search(f.name)
            if m and int(m[1]) != os.getpid() and _alive(int(m[1])):
                log.warning("%s: leaving %s alone: pid %s is alive (a writer that ignores the lock?)",
                            self.root, f.name, m[1])
                continue
            f.unlink(missing_ok=True)

    def _repair(self) -> None:
        """Keep exactly the shards whose files match their marker; delete the rest so the build recomputes them."""
        ident, n_shards = identity_digest(self.manifest), self.manifest.get("n_shards")
        bad: dict[int, list[str]] = {}
        for i, exts in sorted(_on_disk(self.root).items()):
            rec = _marker(self.root, i)
            if rec is None:
                bad[i] = [f"{', '.join(sorted(exts))} without a .done marker (killed while writing)"]
            elif n_shards is not None and i >= n_shards:
                bad[i] = [f"shard {i} is beyond the {n_shards} shards of this build"]
            elif "invalid" in rec:
                bad[i] = [rec["invalid"]]
            elif rec.get("shard", i) != i:
                bad[i] = [f"{_shard_name(i, 'done')}: marker of shard {rec['shard']} (a copied shard)"]
            elif "identity" in rec and rec["identity"] != ident:
                bad[i] = [f"computed for another identity ({rec['identity']}, this build is {ident})"]
            elif problems := _check_shard(self.root, i, rec)[0]:
                bad[i] = problems
            elif "sha256" not in rec:    # written before hashes: verified by counts, hashed now
                self._mark_done(i, rec["points"])
        if not bad:
            return
        for i, why in bad.items():
            log.warning("%s: shard %d will be recomputed: %s", self.root, i, "; ".join(why))
        self._incomplete()
        for i in bad:
            for ext in ("done", *FILES):      # the marker first: a half-deleted shard is a shard without marker
                (self.root / _shard_name(i, ext)).unlink(missing_ok=True)

    # ------------------------------------------------------------------------------------------- writing
    def _incomplete(self) -> None:
        """Before any shard changes: a complete manifest never describes shards that are being replaced (a
        reader in the meantime, or after a crash, is told the build is not complete)."""
        if self.manifest.get("complete") or "shards" in self.manifest:
            self.manifest.update(complete=False)
            for k in ("counts", "shards"):
                self.manifest.pop(k, None)
            _write_json(self.root / "manifest.json", self.manifest)

    def _shard(self, i: int, ext: str) -> Path:
        return self.root / _shard_name(i, ext)

    def done(self) -> set[int]:
        return {i for i, exts in _on_disk(self.root).items() if "done" in exts}

    def _mark_done(self, i: int, points: int) -> None:
        sha = {ext: _sha256(self._shard(i, ext).read_bytes()) for ext in FILES if points}
        _write_json(self._shard(i, "done"), {"shard": i, "points": points, "sha256": sha,
                                              "identity": identity_digest(self.manifest)})

    def write_shard(self, i: int, rows: list[dict], tensors: dict[str, torch.Tensor]) -> None:
        self._require_lock()
        for name, t in tensors.items():
            if t.shape[0] != len(rows):
                raise ValueError(f"shard {i}: tensor {name!r} has {t.shape[0]} rows for {len(rows)} points")
        if rows and not tensors:
            raise ValueError(f"shard {i}: {len(rows)} points and no feature tensors")
        self._incomplete()
        self._shard(i, "done").unlink(missing_ok=True)     # rewriting a shard: not done until its files are
        if rows:
            _atomic_write(self._shard(i, "safetensors"),
                          lambda tmp: save_file({k: v.contiguous() for k, v in tensors.items()}, tmp))
            table = pa.Table.from_pylist([{**r, "shard": i, "row": k} for k, r in enumerate(rows)])
            _atomic_write(self._shard(i, "parquet"), lambda tmp: pq.write_table(table, tmp))
        else:
            for ext in FILES:
                self._shard(i, ext).unlink(missing_ok=True)
        self._mark_done(i, len(rows))

    def finalize(self, counts: dict[str, Any], command: str | None = None) -> None:
        """Mark the build complete and release the directory; ``command`` (not part of the identity) says how
        it was made. The shard list with each shard's hashes goes into the manifest, after checking every
        shard (all of ``range(n_shards)`` when the manifest names ``n_shards``) against its marker."""
        self._require_lock()
        done, n_shards = sorted(self.done()), self.manifest.get("n_shards")
        expected = list(range(n_shards)) if n_shards is not None else list(range(len(done)))
        if done != expected:
            raise CorruptDataset(f"{self.root}: cannot finalize: shards {done} are done, expected {expected}")
        shards, problems = [], []
        for i in done:
            rec = _marker(self.root, i)
            problems += [rec["invalid"]] if "invalid" in rec else _check_shard(self.root, i, rec)[0]
            shards.append({k: rec.get(k) for k in ("shard", "points", "sha256")})
        total = sum(s["points"] for s in shards)
        if "points" in counts and counts["points"] != total:
            problems.append(f"counts say {counts['points']} points, the shards hold {total}")
        if problems:
            raise CorruptDataset(f"{self.root}: cannot finalize:\n  " + "\n  ".join(problems))
        self.manifest.update(counts=counts, complete=True, shards=shards)
        if command:
            self.manifest["build_command"] = command
        _write_json(self.root / "manifest.json", self.manifest)
        self.close()


@dataclass
class PointSet:
    """A loaded dataset: ``points`` (a ``datasets.Dataset``, one row per point), ``features`` (name → tensor,
    row-aligned with ``points``) and the ``manifest``."""

    points: Any
    features: dict[str, torch.Tensor]
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return len(self.points)

    def select(self, idx) -> "PointSet":
        """The points at row indices ``idx``, features row-aligned."""
        idx = list(idx)
        return PointSet(self.points.select(idx), {k: v[idx] for k, v in self.features.items()}, self.manifest)

    def split(self, name: str) -> "PointSet":
        return self.select(i for i, s in enumerate(self.points["split"]) if s == name)

    @property
    def labels(self) -> torch.Tensor:
        return torch.tensor(self.points["label"], dtype=torch.float32)


def _expected_shards(root: Path, manifest: dict, complete: bool) -> tuple[dict[int, dict], list[str]]:
    """The shard records the dataset must consist of, and problems with the list itself. ``complete``: the
    manifest's shard list and counts are the reference (a finished dataset); otherwise the finished shards'
    markers are (the builder reading back what it wrote, ``require_complete=False``)."""
    mpath, ident = root / "manifest.json", identity_digest(manifest)
    problems: list[str] = []
    on_disk = _on_disk(root)
    markers = {i: _marker(root, i) for i in on_disk}
    markers = {i: m for i, m in markers.items() if m is not None}
    if complete and "shards" in manifest:
        listed = manifest["shards"]
        try:
            records = {int(r["shard"]): r for r in listed}
            if not all(isinstance(r["points"], int) and isinstance(r["sha256"], dict) for r in listed):
                raise ValueError
        except (TypeError, KeyError, ValueError):
            raise CorruptDataset(f"{mpath}: 'shards' is not a list of shard records") from None
        n = manifest.get("n_shards", len(records))
        if sorted(records) != list(range(n)):
            problems.append(f"{mpath.name}: lists shards {sorted(records)}, expected 0..{n - 1}")
        for i, rec in records.items():
            m = markers.get(i)
            if m is None:
                problems.append(f"{_shard_name(i, 'done')}: missing (shard {i} is in the manifest)")
            elif "invalid" in m:
                problems.append(m["invalid"])
            elif ({k: m.get(k) for k in ("shard", "points", "sha256")} != {k: rec.get(k) for k in ("shard", "points", "sha256")}
                  or m.get("identity") != ident):
                problems.append(f"{_shard_name(i, 'done')}: does not match the manifest's record of shard {i} "
                                f"(marker {m!r:.160}; manifest {rec!r:.160}; identity {ident})")
    else:
        if complete:
            log.warning("%s: written before shard hashes were recorded: checking the shard list, files and "
                        "counts only (rerun the build command to add the hashes)", root)
        records = {}
        for i, m in markers.items():
            if "invalid" in m:
                problems.append(m["invalid"])
            elif m.get("shard", i) != i:
                problems.append(f"{_shard_name(i, 'done')}: marker of shard {m['shard']} (a copied shard)")
            elif "identity" in m and m["identity"] != ident:
                problems.append(f"{_shard_name(i, 'done')}: computed for another identity ({m['identity']}, "
                                f"the manifest's is {ident})")
            else:
                records[i] = m
        n = manifest.get("n_shards")
        if n is None and "n_tasks" in manifest and manifest.get("shard_size"):
            n = math.ceil(manifest["n_tasks"] / manifest["shard_size"])   # how data_builders.build cuts tasks
        if n is None:
            n = len(markers)                                              # at least: no gaps
        if complete and sorted(markers) != list(range(n)):
            missing = sorted(set(range(n)) - set(markers))
            problems.append(f"{len(markers)} shards are done, expected {n} (0..{n - 1})"
                            + (f"; missing: {', '.join(_shard_name(i, 'done') for i in missing)}" if missing else ""))
    for i, exts in sorted(on_disk.items()):
        if i not in records and i not in markers:
            problems.append(f"{', '.join(_shard_name(i, e) for e in sorted(exts))}: shard {i} has no .done marker "
                            "and is not in the manifest")
        elif i not in records and complete and "shards" in manifest:
            problems.append(f"{', '.join(_shard_name(i, e) for e in sorted(exts))}: shard {i} is not in the "
                            f"manifest (an extra or copied shard)")
    return records, problems


def load_points(root: str | Path, *, kind: str | None = None, backend: str | None = None,
                featurizer: dict | None = None, require_complete: bool = True, features: bool = True) -> PointSet:
    """Load a dataset directory. ``kind``/``backend``/``featurizer`` (``{"name", "version"}``), when given, must
    match the manifest: features from one policy or featurizer are meaningless to a controller of another.
    The files must be those the manifest records (:class:`CorruptDataset` otherwise, naming each difference).
    ``features=False`` reads the point tables alone (no tensors: a large policy's hidden states are gigabytes)."""
    root = Path(root)
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise FileNotFoundError(f"{root}: no manifest.json; not a decision-point dataset (build it with "
                                "python -m data_builders.build)")
    manifest = read_manifest(mpath)
    want = {"kind": kind, "backend": backend, "featurizer": featurizer}
    diff = _differences(want, manifest, [k for k, v in want.items() if v is not None])
    if diff:
        raise ManifestMismatch(f"{mpath} does not match what was requested:\n  " + "\n  ".join(diff))
    if require_complete and not manifest.get("complete"):
        raise ManifestMismatch(f"{mpath}: the build is not complete; rerun the same build command to resume it")
    records, problems = _expected_shards(root, manifest, require_complete)
    tables, feats, keys = [], {}, None
    for i in sorted(records):
        shard_problems, parsed = _check_shard(root, i, records[i], FILES if features else ("parquet",))
        problems += shard_problems
        if shard_problems or not parsed:
            continue
        tables.append(parsed["parquet"])
        tensors = parsed.get("safetensors", {})
        if keys is None:
            keys = set(tensors)
        elif set(tensors) != keys:
            problems.append(f"{_shard_name(i, 'safetensors')}: tensors {sorted(tensors)}, other shards have "
                            f"{sorted(keys)}")
        for k, v in tensors.items():
            feats.setdefault(k, []).append(v)
    total = sum(r["points"] for r in records.values())
    counted = (manifest.get("counts") or {}).get("points") if require_complete else None
    if counted is not None and counted != total:
        problems.append(f"{mpath.name}: counts say {counted} points, the shards hold {total}")
    if problems:
        how = manifest.get("build_command") or "the build command"
        raise CorruptDataset(f"{root}: the files on disk are not the dataset its manifest describes:\n  "
                             + "\n  ".join(problems)
                             + f"\nRerun {how} to recompute the damaged shards (or rebuild with overwrite=true).")
    # An in-memory Dataset over the Arrow tables: no cache copy under ~/.cache/huggingface.
    points = Dataset(pa.concat_tables(tables, promote_options="default")) if tables else Dataset.from_list([])
    return PointSet(points, {k: torch.cat(v) for k, v in feats.items()}, manifest)
