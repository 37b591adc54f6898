"""The decision-point store: atomic shards, resume, identity checks, loading through `datasets`."""
from __future__ import annotations

import json

import pytest
import torch

from data_builders.points.store import ManifestMismatch, PointStore, load_points

MANIFEST = {"kind": "probe", "task_hash": "abc", "backend": "m@1", "featurizer": {"name": "f", "version": 1},
            "label_rule": "r", "shard_size": 2, "builder": {"max_rounds": 2}}


def rows(i, n=2):
    return [{"point_id": f"{i}-{k}", "task_id": f"t{i}{k}", "split": "train" if k else "test", "env": "CalculatorEnv",
             "category": "A", "difficulty": "easy", "label": k % 2} for k in range(n)]


def test_shards_round_trip_and_resume(tmp_path):
    store = PointStore(tmp_path, MANIFEST)
    store.write_shard(0, rows(0), {"x": torch.arange(6.).reshape(2, 3)})
    store.write_shard(1, [], {"x": torch.zeros(0, 3)})          # a shard with no points is still done
    # a shard killed after its tensors but before its marker, and a stray temp file
    (tmp_path / "shard-00002.safetensors").write_bytes(b"partial")
    (tmp_path / ".shard-00003.parquet.123.tmp").write_bytes(b"partial")
    store.close()                                               # a killed build releases its lock with it
    again = PointStore(tmp_path, MANIFEST)
    assert again.done() == {0, 1}
    assert not (tmp_path / "shard-00002.safetensors").exists() and not list(tmp_path.glob(".*.tmp"))
    again.write_shard(2, rows(2), {"x": torch.arange(6., 12.).reshape(2, 3)})
    again.finalize({"points": 4})
    ds = load_points(tmp_path, kind="probe", backend="m@1", featurizer={"name": "f", "version": 1})
    assert ds.points["point_id"] == ["0-0", "0-1", "2-0", "2-1"]
    assert torch.equal(ds.features["x"], torch.arange(12.).reshape(4, 3))
    test = ds.split("test")
    assert test.points["point_id"] == ["0-0", "2-0"] and torch.equal(test.features["x"][1], torch.tensor([6., 7., 8.]))
    assert ds.labels.tolist() == [0., 1., 0., 1.]
    assert json.loads((tmp_path / "manifest.json").read_text())["counts"] == {"points": 4}


def test_resume_refuses_a_different_build(tmp_path):
    PointStore(tmp_path, MANIFEST)
    with pytest.raises(ManifestMismatch, match=r"backend: on disk 'm@1', requested 'other@2'"):
        PointStore(tmp_path, MANIFEST | {"backend": "other@2"})
    store = PointStore(tmp_path, MANIFEST | {"backend": "other@2"}, overwrite=True)
    assert store.done() == set()


def test_loading_checks_backend_featurizer_and_completeness(tmp_path):
    store = PointStore(tmp_path, MANIFEST)
    store.write_shard(0, rows(0), {"x": torch.zeros(2, 3)})
    with pytest.raises(ManifestMismatch, match="not complete"):
        load_points(tmp_path)
    store.finalize({"points": 2})
    with pytest.raises(ManifestMismatch, match=r"backend: on disk 'm@1', requested 'HuggingFaceTB"):
        load_points(tmp_path, backend="HuggingFaceTB/SmolLM2-135M-Instruct@x")
    with pytest.raises(ManifestMismatch, match="featurizer"):
        load_points(tmp_path, featurizer={"name": "f", "version": 2})
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        load_points(tmp_path / "nowhere")


def test_rows_and_tensors_must_align(tmp_path):
    store = PointStore(tmp_path, MANIFEST)
    with pytest.raises(ValueError, match=r"tensor 'x' has 3 rows for 2 points"):
        store.write_shard(0, rows(0), {"x": torch.zeros(3, 1)})
    assert store.done() == set()
