"""Controllers: save/load through the hub mixin (safetensors, strict), the feature contract, clear errors."""
from __future__ import annotations

import ast

import json
import re
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from safetensors.torch import load_file, save_file

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


def test_support_distance_is_the_largest_training_z_and_none_without_statistics():
    c, x = probe()
    flat = c.flatten(x)
    assert torch.allclose(c.support_distance(x), c.norm(flat).abs().amax(-1))
    far = x[:1].clone()
    far[0, 1, 2] = c.norm.mean[6] + 20 * c.norm.std[6]          # one feature 20 training standard deviations out
    assert c.support_distance(far)[0].item() == pytest.approx(20.0, rel=1e-4)
    assert c.support_distance(x).max() < 5                       # the training rows themselves
    fresh = LinearProbe(contract=c.contract)                      # never fit: identity statistics, no support
    assert fresh.support_distance(x) is None


def test_contract_mismatch_is_a_clear_error():
    c, _ = probe()
    with pytest.raises(ContractMismatch, match=r"trained on the policy 'model@abc'; these features come from 'other@1'"):
        c.check_contract(backend="other@1")
    with pytest.raises(ContractMismatch, match="featurizer"):
        c.check_contract(featurizer={"name": "last_token_hidden", "version": 2})
    c.check_contract(featurizer=PROBE_FEAT, backend="model@abc")
    with pytest.raises(ContractMismatch, match=r"expects features of shape \[batch, 3, 4\], got \[2, 31, 576\]"):
        c(torch.zeros(2, 31, 576))


def test_a_checkpoint_s_named_columns_must_be_the_featurizer_s(tmp_path):
    """ToolGate records its structural columns: a featurizer computing other columns (a renamed, dropped or
    reordered feature) is refused on load, naming them, instead of feeding shifted columns to the weights."""
    from data_builders.gates import gate_of_kind

    names = list(gate_of_kind("flip").featurizer.feature_names)
    gate = ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, "m@1", [384 + len(names)],
                                                   feature_names=names, tools_seen=["convert_units"]))
    gate.save_pretrained(tmp_path / "g")
    loaded = controllers.load(tmp_path / "g")
    assert loaded.contract["feature_names"] == names and loaded.contract["tools_seen"] == ["convert_units"]
    loaded.check_contract(featurizer=gate_of_kind("flip").featurizer.id, feature_names=gate_of_kind("flip").featurizer.feature_names)
    with pytest.raises(ContractMismatch, match=r"not computed now: \['no_args'\]; new: \['tool=other'\]"):
        loaded.check_contract(feature_names=[n if n != "no_args" else "tool=other" for n in names])
    with pytest.raises(ContractMismatch, match="the order differs"):
        loaded.check_contract(feature_names=names[::-1])
    # a checkpoint from before columns were recorded: the featurizer version alone decides
    ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, "m@1", [8])).check_contract(feature_names=names)
    with pytest.raises(ValueError, match="contract.feature_names must be a list of strings"):
        ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, "m@1", [8], feature_names="step"))


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
        # the import statements, wherever they are (a function body too); a message may name a command
        imported = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"data_builders", "trainers", "runtime", "recipes"}, (f, imported)
    offenders = []
    for f in list(REPO.glob("controllers/**/*.py")) + list(REPO.glob("trainers/**/*.py")) + \
            list(REPO.glob("data_builders/**/*.py")):
        t = f.read_text()
        if "import pickle" in t or "joblib" in t or ("torch.load(" in t and "weights_only=True" not in t):
            offenders.append(str(f))
    assert offenders == []


# ---------------------------------------------------------------------------- settings and weights are validated
@pytest.mark.parametrize("field,value,message", [
    ("temperature", 0.0, r"temperature must be a finite number > 0, got 0.0"),
    ("temperature", -1.0, r"temperature must be a finite number > 0, got -1.0"),
    ("temperature", float("nan"), r"temperature must be a finite number > 0, got nan"),
    ("temperature", float("inf"), r"temperature must be a finite number > 0, got inf"),
    ("tau", -0.1, r"tau must be a probability threshold in \[0, 1\], got -0.1"),
    ("tau", 1.5, r"tau must be a probability threshold in \[0, 1\], got 1.5"),
    ("tau", float("nan"), r"tau must be a probability threshold in \[0, 1\], got nan"),
    ("tau", "0.5", r"tau must be a number, got '0.5'"),
])
def test_construction_and_assignment_refuse_settings_that_break_every_decision(field, value, message):
    contract = make_contract({"name": "gstep", "version": 1}, "m@1", [7])
    with pytest.raises(ValueError, match=message):
        GStepMLP(contract=contract, **{field: value})
    c = GStepMLP(contract=contract, tau=0.0, temperature=1e-3)      # the bounds themselves are fine
    with pytest.raises(ValueError, match=message):                   # calibration assigns after construction
        setattr(c, field, value)
    assert (c.tau, c.temperature) == (0.0, 1e-3)


def test_construction_refuses_a_contract_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"contract.input_shape must be a list of 2 positive integers, got \[12\]"):
        LinearProbe(contract=make_contract(PROBE_FEAT, "m@1", [12]))
    with pytest.raises(ValueError, match=r"contract.backend must be a string, got None"):
        ToolGateLogistic(contract={"featurizer": PROBE_FEAT, "backend": None, "input_shape": [3]})


def _saved(tmp_path, name="ck"):
    c, _ = probe()
    c.save_pretrained(tmp_path / name)
    return tmp_path / name


def _edit_config(ck: Path, **fields) -> Path:
    cfg_file = ck / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg.update(fields)
    cfg_file.write_text(json.dumps(cfg))     # json writes NaN/Infinity, and reads them back as floats
    return cfg_file


@pytest.mark.parametrize("field,value,message", [
    ("temperature", 0, "temperature must be a finite number > 0, got 0"),
    ("temperature", -2.0, "temperature must be a finite number > 0, got -2.0"),
    ("temperature", float("inf"), "temperature must be a finite number > 0, got inf"),
    ("tau", 1.2, r"tau must be a probability threshold in \[0, 1\], got 1.2"),
    ("tau", float("nan"), r"tau must be a probability threshold in \[0, 1\], got nan"),
    ("tau", None, "tau must be a number, got None"),
    ("contract", {"featurizer": PROBE_FEAT, "backend": "m@1"},
     r"contract.input_shape must be a list of 2 positive integers, got None"),
])
def test_load_refuses_bad_settings_naming_the_file_and_field(tmp_path, field, value, message):
    cfg_file = _edit_config(_saved(tmp_path), **{field: value})
    with pytest.raises(ControllerLoadError, match=rf"^{re.escape(str(cfg_file))}: field '{field}': {message}$"):
        controllers.load(cfg_file.parent)


@pytest.mark.parametrize("tensor,value,message", [
    ("linear.weight", float("nan"), r"tensor 'linear.weight' has 1 non-finite value\(s\) \(NaN/inf\) of 12"),
    ("linear.bias", float("-inf"), r"tensor 'linear.bias' has 1 non-finite value\(s\)"),
    ("norm.mean", float("inf"), r"tensor 'norm.mean' has 1 non-finite value\(s\)"),
    ("norm.std", 0.0, r"tensor 'norm.std' has a standardisation scale <= 0"),
])
def test_load_refuses_weights_that_would_decide_every_point_alike(tmp_path, tensor, value, message):
    ck = _saved(tmp_path)
    weights = ck / "model.safetensors"
    tensors = load_file(weights)
    tensors[tensor].view(-1)[0] = value
    save_file(tensors, weights)
    with pytest.raises(ControllerLoadError, match=rf"^{re.escape(str(weights))}: {message}"):
        controllers.load(ck)


@pytest.mark.parametrize("text,message", [
    ("[1, 2]", r"expected a JSON object of the controller's settings \(controller, contract, tau, temperature, "
               r"\.\.\.\), got a list"),
    ("not json", r"not valid JSON"),
    ('"linear_probe"', r"expected a JSON object .* got a str"),
])
def test_a_config_that_is_not_an_object_is_named(tmp_path, text, message):
    ck = _saved(tmp_path)
    (ck / "config.json").write_text(text)
    with pytest.raises(ControllerLoadError, match=rf"^{re.escape(str(ck / 'config.json'))}: {message}"):
        controllers.load(ck)


def test_missing_paths_say_so_and_a_missing_hub_id_names_both_places(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)   # never reach for the network, whatever the env says
    for missing in ("./ck/nope", str(tmp_path / "abs" / "missing"), "~/no-such-toolwise-ck", "a/b/c"):
        with pytest.raises(ControllerLoadError, match=r"not a controller directory \(/.* does not exist\)"):
            controllers.load(missing)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ControllerLoadError, match=r"a file, not a controller directory"):
        controllers.load("file")
    start = time.perf_counter()
    with pytest.raises(ControllerLoadError) as err:   # "ck/nope" is a relative path and a hub id alike
        controllers.load("ck/nope")
    assert time.perf_counter() - start < 10
    msg = str(err.value)
    assert msg.startswith("ck/nope: neither a local directory nor a cached hub id exists: ")
    assert f"no directory {tmp_path / 'ck' / 'nope'}" in msg
    assert f"no snapshot of hub id 'ck/nope' in {constants.HF_HUB_CACHE} (HF_HUB_OFFLINE is set)" in msg
    assert isinstance(controllers.load(_saved(tmp_path).relative_to(tmp_path)), LinearProbe)   # relative dir loads
