"""Decision-point datasets on disk (DESIGN.md, "Decision-point dataset"): a manifest, parquet point tables and
safetensors feature tensors, written shard by shard so a killed build resumes without loss or duplicates.

Layout of a dataset directory::

    manifest.json                 identity (kind, tasks, backend, featurizer, label rule, builder config) + counts
    shard-00000.safetensors       feature tensors of the shard's points, row-aligned with its parquet
    shard-00000.parquet           one row per point: point_id, task_id, split, env, category, difficulty, label, ...
    shard-00000.done              written last: the shard is complete

A shard covers a fixed slice of the task list, so a resumed build computes exactly the shards that have no
``.done`` marker, in the same batches as an uninterrupted build, and the result is bitwise identical. Every
file is written to a temporary name and renamed into place (atomic on POSIX); a shard without its marker
is deleted and recomputed. DESIGN.md names one ``points.parquet``; the table is sharded here because a single
file cannot be appended atomically. ``load_points`` reads all shards back (``datasets`` for the table).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets import Dataset
from safetensors.torch import load_file, save_file

SCHEMA_VERSION = 1
# Manifest keys that identify what the points mean. A resumed build, or a loader that names an expected
# backend/featurizer, must agree on these.
IDENTITY_KEYS = ("schema_version", "kind", "task_hash", "backend", "featurizer", "label_rule", "shard_size", "builder")


class ManifestMismatch(ValueError):
    """The dataset on disk was built for something else than what is asked (backend, featurizer, tasks...)."""


def task_hash(tasks: Iterable[Any]) -> str:
    """Content hash of a task list: ids, instructions, answers, splits, in order."""
    h = hashlib.sha256()
    for t in tasks:
        h.update(json.dumps([str(t.id), t.instruction, t.answer, t.split, t.env.name], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_json(path: Path, obj: Any) -> None:
    _atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2, sort_keys=True)))


def _differences(want: dict, have: dict, keys: Sequence[str]) -> list[str]:
    return [f"{k}: on disk {have.get(k)!r}, requested {want.get(k)!r}" for k in keys if have.get(k) != want.get(k)]


class PointStore:
    """Writes one decision-point dataset; reopening the same directory resumes it."""

    def __init__(self, root: str | Path, manifest: dict[str, Any], *, overwrite: bool = False):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.manifest = {"schema_version": SCHEMA_VERSION, **manifest}
        path = self.root / "manifest.json"
        if path.exists() and not overwrite:
            have = json.loads(path.read_text())
            diff = _differences(self.manifest, have, IDENTITY_KEYS)
            if diff:
                raise ManifestMismatch(f"{self.root} holds a different build; resume refused:\n  " + "\n  ".join(diff)
                                       + "\n(use another out_dir, or overwrite=true to rebuild from scratch)")
            self.manifest = {**have, **{k: self.manifest[k] for k in self.manifest if k not in ("counts", "complete")}}
        else:
            if overwrite:
                for f in self.root.glob("shard-*"):
                    f.unlink()
            self.manifest["complete"] = False
            _write_json(path, self.manifest)
        self._clean_partial()

    def _shard(self, i: int, ext: str) -> Path:
        return self.root / f"shard-{i:05d}.{ext}"

    def _clean_partial(self) -> None:
        for f in self.root.glob(".*.tmp"):
            f.unlink()
        for f in self.root.glob("shard-*.*"):
            if f.suffix != ".done" and not f.with_suffix(".done").exists():
                f.unlink()   # a shard killed between its files: recomputed

    def done(self) -> set[int]:
        return {int(f.stem.split("-")[1]) for f in self.root.glob("shard-*.done")}

    def write_shard(self, i: int, rows: list[dict], tensors: dict[str, torch.Tensor]) -> None:
        for name, t in tensors.items():
            if t.shape[0] != len(rows):
                raise ValueError(f"shard {i}: tensor {name!r} has {t.shape[0]} rows for {len(rows)} points")
        if rows:
            _atomic_write(self._shard(i, "safetensors"),
                          lambda tmp: save_file({k: v.contiguous() for k, v in tensors.items()}, tmp))
            table = pa.Table.from_pylist([{**r, "shard": i, "row": k} for k, r in enumerate(rows)])
            _atomic_write(self._shard(i, "parquet"), lambda tmp: pq.write_table(table, tmp))
        _write_json(self._shard(i, "done"), {"points": len(rows)})

    def finalize(self, counts: dict[str, Any], command: str | None = None) -> None:
        """Mark the build complete; ``command`` (not part of the identity) says how it was made."""
        self.manifest.update(counts=counts, complete=True)
        if command:
            self.manifest["build_command"] = command
        _write_json(self.root / "manifest.json", self.manifest)


@dataclass
class PointSet:
    """A loaded dataset: ``points`` (a ``datasets.Dataset``, one row per point), ``features`` (name → tensor,
    row-aligned with ``points``) and the ``manifest``."""

    points: Any
    features: dict[str, torch.Tensor]
    manifest: dict[str, Any]

    def __len__(self) -> int:
        return len(self.points)

    def split(self, name: str) -> "PointSet":
        idx = [i for i, s in enumerate(self.points["split"]) if s == name]
        return PointSet(self.points.select(idx), {k: v[idx] for k, v in self.features.items()}, self.manifest)

    @property
    def labels(self) -> torch.Tensor:
        return torch.tensor(self.points["label"], dtype=torch.float32)


def load_points(root: str | Path, *, kind: str | None = None, backend: str | None = None,
                featurizer: dict | None = None, require_complete: bool = True) -> PointSet:
    """Load a dataset directory. ``kind``/``backend``/``featurizer`` (``{"name", "version"}``), when given, must
    match the manifest: features from one policy or featurizer are meaningless to a controller of another."""
    root = Path(root)
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise FileNotFoundError(f"{root}: no manifest.json; not a decision-point dataset (build it with "
                                "python -m data_builders.build)")
    manifest = json.loads(mpath.read_text())
    want = {"kind": kind, "backend": backend, "featurizer": featurizer}
    diff = _differences(want, manifest, [k for k, v in want.items() if v is not None])
    if diff:
        raise ManifestMismatch(f"{mpath} does not match what was requested:\n  " + "\n  ".join(diff))
    if require_complete and not manifest.get("complete"):
        raise ManifestMismatch(f"{mpath}: the build is not complete; rerun the same build command to resume it")
    shards = sorted(int(f.stem.split("-")[1]) for f in root.glob("shard-*.done"))
    tables, feats = [], {}
    for i in shards:
        table = root / f"shard-{i:05d}.parquet"
        if not table.exists():
            continue   # a shard with no points
        tables.append(pq.read_table(table))
        for k, v in load_file(str(root / f"shard-{i:05d}.safetensors")).items():
            feats.setdefault(k, []).append(v)
    # An in-memory Dataset over the Arrow tables: no cache copy under ~/.cache/huggingface.
    points = Dataset(pa.concat_tables(tables, promote_options="default")) if tables else Dataset.from_list([])
    return PointSet(points, {k: torch.cat(v) for k, v in feats.items()}, manifest)
