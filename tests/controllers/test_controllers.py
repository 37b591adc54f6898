"""Controllers: save/load through the hub mixin (safetensors, strict), the feature contract, clear errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import controllers
from controllers import ContractMismatch, ControllerLoadError, GStepMLP, LinearProbe, ToolGateLogistic, make_contract

REPO = Path(__file__).resolve().parents[2]
PROBE_FEAT = {"name": "last_token_hidden", "version": 1}


def probe(tau=0.3):
    c = LinearProbe(contract=make_contract(PROBE_FEAT, "model@abc", [3, 4]), tau=tau, temperature=2.0)
    torch.manual_seed(0)
    x = torch.randn(16, 3, 4) * 5 + 2
    c.norm.fit(c.flatten(x))
    torch.nn.init.normal_(c.linear.weight)
    return c, x


@pytest.mark.parametrize("make", [
    lambda: probe()[0],
    lambda: ToolGateLogistic(contract=make_contract({"name": "toolgate_minilm", "version": 1}, "m@1", [10])),
    lambda: GStepMLP(contract=make_contract({"name": "gstep", "version": 1}, "m@1", [7]), hidden=8, depth=2),
])
def test_save_load_round_trip_is_exact(make, tmp_path):
    c = make().eval()
    c.tau, c.temperature = 0.77, 1.3          # calibrated after construction: must be what is saved
    c.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) >= ["README.md", "config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["controller"] == c.registry_name and cfg["contract"] == c.contract
    back = controllers.load(tmp_path).eval()
    assert type(back) is type(c) and (back.tau, back.temperature) == (0.77, 1.3)
    x = torch.randn(5, *c.contract["input_shape"])
    torch.testing.assert_close(back(x), c(x), rtol=0, atol=0)
    for (k, a), (_, b) in zip(c.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k


def test_probe_standardises_inside_and_uses_temperature_and_tau():
    c, x = probe(tau=0.3)
    z = c.norm(c.flatten(x))
    assert torch.allclose(z.mean(0), torch.zeros(12), atol=1e-5)
    raw = c.logits(x)
    torch.testing.assert_close(c(x), raw / 2.0)
    assert torch.equal(c.decide(x), torch.sigmoid(raw / 2.0) >= 0.3)
    single = LinearProbe(contract=c.contract, layers=[2])           # the best-single-layer baseline form
    assert single.linear.in_features == 4


def test_contract_mismatch_is_a_clear_error():
    c, _ = probe()
    with pytest.raises(ContractMismatch, match=r"trained on the policy 'model@abc'; these features come from 'other@1'"):
        c.check_contract(backend="other@1")
    with pytest.raises(ContractMismatch, match="featurizer"):
        c.check_contract(featurizer={"name": "last_token_hidden", "version": 2})
    c.check_contract(featurizer=PROBE_FEAT, backend="model@abc")
    with pytest.raises(ContractMismatch, match=r"expects features of shape \[batch, 3, 4\], got \[2, 31, 576\]"):
        c(torch.zeros(2, 31, 576))


def test_unknown_type_corrupt_weights_and_missing_files_are_clear_errors(tmp_path):
    c, _ = probe()
    c.save_pretrained(tmp_path / "ok")
    bad = tmp_path / "unknown"
    c.save_pretrained(bad)
    cfg = json.loads((bad / "config.json").read_text()) | {"controller": "magic_gate"}
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ControllerLoadError, match=r"unknown controller type 'magic_gate'; known: \['gstep_mlp', "):
        controllers.load(bad)
    corrupt = tmp_path / "corrupt"
    c.save_pretrained(corrupt)
    data = (corrupt / "model.safetensors").read_bytes()
    (corrupt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ControllerLoadError, match=r"model.safetensors: cannot be loaded as a linear_probe"):
        controllers.load(corrupt)
    (corrupt / "model.safetensors").unlink()
    with pytest.raises(ControllerLoadError, match="missing"):
        controllers.load(corrupt)
    with pytest.raises(ControllerLoadError, match="not a controller directory"):
        controllers.load(tmp_path / "nowhere" / "at" / "all")


def test_strict_loading_refuses_weights_of_another_shape(tmp_path):
    c, _ = probe()
    c.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["contract"]["input_shape"] = [3, 5]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ControllerLoadError, match="cannot be loaded"):
        controllers.load(tmp_path)


def test_controllers_import_neither_data_builders_nor_trainers_and_nothing_loads_pickle():
    for f in (REPO / "controllers").glob("*.py"):
        text = f.read_text()
        assert "data_builders" not in text.replace("``data_builders``", "") and "import trainers" not in text, f
    offenders = []
    for f in list(REPO.glob("controllers/**/*.py")) + list(REPO.glob("trainers/**/*.py")) + \
            list(REPO.glob("data_builders/**/*.py")):
        t = f.read_text()
        if "import pickle" in t or "joblib" in t or ("torch.load(" in t and "weights_only=True" not in t):
            offenders.append(str(f))
    assert offenders == []
