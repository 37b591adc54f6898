"""A policy is identified by its bytes: the same adapter by any path is one policy, an adapter retrained in place is
another, and controllers trained on the old one refuse it; fingerprints that named an adapter by path migrate once."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from controllers import ContractMismatch, ToolGateLogistic, make_contract
from data_builders.backends import fingerprint as F
from data_builders import migrate_fingerprints as M
from data_builders.backends import loading
from data_builders.gates import gate_of_kind
from data_builders.features.toolgate import EMBEDDING_DIM, structural_names
from runtime.controller_hooks import checked
from tests.doubles import tiny_adapter


@pytest.fixture(scope="module")
def adapter(tiny_model_dir, tmp_path_factory) -> Path:
    return tiny_adapter(tiny_model_dir, tmp_path_factory.mktemp("adapters") / "run")


def _load(tiny_model_dir, adapter):
    return loading.load_backend(str(tiny_model_dir), adapter=str(adapter), device="cpu")


def _perturb_lora_b(adapter: Path) -> None:
    """Retrain in place, as far as identity goes: the same path, other lora_B weights."""
    f = adapter / "adapter_model.safetensors"
    weights = load_file(f)
    weights = {k: (v + 0.5 if "lora_B" in k else v) for k, v in weights.items()}
    save_file(weights, f, metadata={"format": "pt"})


@pytest.mark.slow
def test_the_same_adapter_by_any_path_is_one_policy(tiny_model_dir, adapter, tmp_path, monkeypatch):
    monkeypatch.chdir(adapter.parent)
    by_relative = _load(tiny_model_dir, "run").fingerprint
    by_dot = _load(tiny_model_dir, "./run").fingerprint
    by_absolute = _load(tiny_model_dir, adapter.resolve()).fingerprint
    copy = shutil.copytree(adapter, tmp_path / "elsewhere" / "renamed")
    by_copy = _load(tiny_model_dir, copy).fingerprint
    assert by_relative == by_dot == by_absolute == by_copy
    base = loading.load_backend(str(tiny_model_dir), device="cpu").fingerprint
    assert by_relative == f"{base}+adapter:{F.adapter_digest(adapter)}" and len(F.adapter_digest(adapter)) == 16
    assert "run" not in by_relative.partition("+")[2]            # no path in the identity


def test_an_adapter_retrained_in_place_is_refused_by_the_old_controllers(tiny_model_dir, adapter, tmp_path):
    adapter = shutil.copytree(adapter, tmp_path / "checkpoints" / "tool_sft" / "v3")
    before = _load(tiny_model_dir, adapter)
    width = EMBEDDING_DIM + len(structural_names())
    gate = ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, before.fingerprint, [width],
                                                   feature_names=list(gate_of_kind("flip").featurizer.feature_names)))
    gate.save_pretrained(tmp_path / "gate")
    loaded = ToolGateLogistic.from_pretrained(tmp_path / "gate")
    checked(loaded, "toolgate", before.fingerprint)               # the policy it was trained on: accepted
    _perturb_lora_b(adapter)
    after = _load(tiny_model_dir, adapter)
    prompt = before.render([{"role": "user", "content": "hi"}])
    assert not torch.equal(before.prefill([prompt]).hidden, after.prefill([prompt]).hidden)   # other weights
    assert after.fingerprint != before.fingerprint
    with pytest.raises(ContractMismatch, match="was trained on the policy"):
        checked(loaded, "toolgate", after.fingerprint)


def _legacy_gate(tmp_path, policy_base: str) -> Path:
    width = EMBEDDING_DIM + len(structural_names())
    legacy = f"{policy_base}+checkpoints/tool_sft/v3"
    gate = ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, legacy, [width]))
    gate.save_pretrained(tmp_path / "old_gate")
    (tmp_path / "old_gate" / "README.md").write_text(f"- Policy (backend fingerprint): `{legacy}`\n")
    return tmp_path / "old_gate"


def test_a_legacy_fingerprint_is_refused_naming_the_migration_which_makes_it_load(tiny_model_dir, adapter, tmp_path):
    policy = _load(tiny_model_dir, adapter).fingerprint
    old = _legacy_gate(tmp_path, policy.partition("+")[0])
    assert F.legacy_adapter(json.loads((old / "config.json").read_text())["contract"]["backend"]) == \
        "checkpoints/tool_sft/v3"
    with pytest.raises(ContractMismatch, match=r"names its adapter by path.*python -m data_builders."
                                               r"migrate_fingerprints"):
        checked(ToolGateLogistic.from_pretrained(old), "toolgate", policy)
    M.main([str(old), "--adapter", str(adapter)])
    migrated = ToolGateLogistic.from_pretrained(old)
    assert migrated.contract["backend"] == policy
    checked(migrated, "toolgate", policy)
    assert policy in (old / "README.md").read_text()                 # the card says the same
    assert M.migrate(old, adapter) == (policy, policy)               # a second run changes nothing
    with pytest.raises(FileNotFoundError, match="neither a controller checkpoint"):
        M.migrate(tmp_path, adapter)


def test_a_legacy_points_dataset_migrates_and_still_verifies(tiny_model_dir, adapter, tmp_path):
    from data_builders.points.store import CorruptDataset, PointStore, load_points

    policy = _load(tiny_model_dir, adapter).fingerprint
    legacy = f"{policy.partition('+')[0]}+checkpoints/tool_sft/v3"
    root = tmp_path / "points"
    manifest = {"kind": "commit", "task_hash": "t", "backend": legacy, "featurizer": gate_of_kind("commit").featurizer.id,
                "label_rule": "r", "shard_size": 2, "builder": {"max_rounds": 2}}
    with PointStore(root, manifest) as store:
        store.write_shard(0, [{"point_id": "a", "task_id": "a", "split": "train", "env": "E", "category": "A",
                               "difficulty": "easy", "label": 1}], {"x": torch.zeros(1, 3)})
        store.finalize({"points": 1, "positives": 1})
    assert load_points(root).manifest["backend"] == legacy
    M.migrate(root, adapter)
    assert load_points(root, backend=policy).manifest["backend"] == policy    # markers follow the new identity
    shard = next(root.glob("shard-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-8])
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["backend"] = legacy
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptDataset):                               # a damaged dataset is not migrated
        M.migrate(root, adapter)


def test_an_adapter_this_machine_lacks_cannot_be_identified(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="cannot be identified by its content"):
        F.adapter_digest("toolwise-test-org/no-such-adapter")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no adapter_\\* files"):
        F.adapter_digest("empty")


def test_a_changed_file_is_hashed_again(adapter, tmp_path):
    ad = shutil.copytree(adapter, tmp_path / "ad")
    first = F.adapter_digest(ad)
    _perturb_lora_b(ad)
    stat = (ad / "adapter_model.safetensors").stat()
    os.utime(ad / "adapter_model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert F.adapter_digest(ad) != first
