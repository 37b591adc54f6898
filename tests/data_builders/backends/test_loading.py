"""Model and adapter names that resolve nowhere: a missing path says it is missing (not transformers' "Repo id
must be in the form ..."), a hub id that is neither a local directory nor cached says both, and offline nothing
reaches for the network."""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

import recipes
from data_builders.backends import loading
from tests.doubles import tiny_adapter


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)   # whatever the environment says: no network here
    return tmp_path


@pytest.mark.parametrize("name", ["./no/such/dir", "../no/such/dir", "/abs/missing", "~/no-such-toolwise-model",
                                  "missing.gguf", "a/b/c"])
def test_a_missing_model_path_says_it_does_not_exist(offline, name):
    where = re.escape(str(Path(name).expanduser().resolve()))
    with pytest.raises(FileNotFoundError, match=rf"^model '{re.escape(name)}': no such file or directory \({where}\)$"):
        loading.load_backend(name)
    with pytest.raises(FileNotFoundError, match="no such file or directory"):   # the vLLM path checks it too
        loading.model_directory(name)


def test_a_hub_id_neither_local_nor_cached_names_both_places_and_fails_fast(offline):
    start = time.perf_counter()
    with pytest.raises(OSError) as err:      # "org/name" is a relative path and a hub id alike
        loading.load_backend("toolwise-test-org/no-such-model")
    assert time.perf_counter() - start < 30
    msg = str(err.value)
    assert msg.startswith("model 'toolwise-test-org/no-such-model': neither a local directory nor a cached hub id "
                          f"exists: no directory {offline / 'toolwise-test-org' / 'no-such-model'}, and no snapshot")
    assert f"in {constants.HF_HUB_CACHE} (HF_HUB_OFFLINE is set)" in msg


def test_an_existing_relative_directory_is_used_as_given(tiny_model_dir, offline):
    (offline / "org").mkdir()
    (offline / "org" / "model").symlink_to(tiny_model_dir)
    assert loading.resolve_model("org/model") == "org/model"        # local first, though it looks like a hub id
    assert loading.load_backend("org/model", device="cpu").model_id == "org/model"


def test_a_missing_gguf_file_in_an_existing_directory_is_named(offline):
    with pytest.raises(FileNotFoundError, match=rf"GGUF file {re.escape(str(offline / 'm.Q4.gguf'))} does not exist"):
        loading.load_backend(".", gguf_file="m.Q4.gguf")


def test_adapter_paths(offline, tmp_path):
    assert loading.resolve_adapter(None) is None
    (tmp_path / "ad").mkdir()
    assert loading.resolve_adapter("ad") == "ad"
    with pytest.raises(FileNotFoundError, match=rf"^adapter '/abs/missing/adapter': no such directory "
                                                r"\(looked at /abs/missing/adapter\)$"):
        loading.resolve_adapter("/abs/missing/adapter")
    both = f"{tmp_path / 'checkpoints/tool_sft/nope'} and {loading.REPO_ROOT / 'checkpoints/tool_sft/nope'}"
    with pytest.raises(FileNotFoundError, match=rf"no such directory \(looked at {re.escape(both)}\)"):
        loading.resolve_adapter("checkpoints/tool_sft/nope")
    with pytest.raises(FileNotFoundError, match=r"^adapter 'ck/nope': neither a local directory nor a cached hub id "
                                                rf"exists: no directory {re.escape(str(tmp_path / 'ck/nope'))} or "):
        loading.resolve_adapter("ck/nope")
    with pytest.raises(FileNotFoundError, match=r"HF_HUB_OFFLINE is set"):   # through the model config as well
        loading.backend_from_config({"name": "./no-model", "adapter": "ck/nope"})


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[:len(data) // 2])


def _forbid_model_loads(monkeypatch):
    """Fails the test if transformers is asked for the base model: a bad file must be found before that work."""
    def fail(*a, **k):
        raise AssertionError("the base model was loaded before the adapter's files were checked")
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", fail)


def test_a_truncated_adapter_names_its_file_before_the_base_model_loads(tiny_model_dir, tmp_path, monkeypatch):
    adapter = tiny_adapter(tiny_model_dir, tmp_path / "adapter")
    assert loading.load_backend(str(tiny_model_dir), adapter=str(adapter), device="cpu").model is not None  # intact
    weights = adapter / "adapter_model.safetensors"
    _truncate(weights)
    _forbid_model_loads(monkeypatch)
    said = rf"^{re.escape(str(weights))}: adapter weights is truncated or corrupt, not a complete safetensors file"
    with pytest.raises(loading.CorruptCheckpoint, match=said):      # was peft's bare SafetensorError, no path
        loading.load_backend(str(tiny_model_dir), adapter=str(adapter), device="cpu")
    with pytest.raises(loading.CorruptCheckpoint, match=said):      # the merged copy for vLLM, the policy trainers
        loading.model_directory(str(tiny_model_dir), adapter=str(adapter))
    weights.write_bytes(b"\x01")                                    # shorter than a safetensors header
    with pytest.raises(loading.CorruptCheckpoint, match=re.escape(str(weights))):
        loading.resolve_adapter(str(adapter))


def test_a_corrupt_adapter_config_names_its_file(tiny_model_dir, tmp_path, monkeypatch):
    adapter = tiny_adapter(tiny_model_dir, tmp_path / "adapter")
    config = adapter / "adapter_config.json"
    _truncate(config)
    _forbid_model_loads(monkeypatch)
    with pytest.raises(loading.CorruptCheckpoint, match=rf"^{re.escape(str(config))}: the adapter's config is "
                                                        r"truncated or corrupt, not valid JSON"):
        loading.load_backend(str(tiny_model_dir), adapter=str(adapter), device="cpu")


def test_truncated_model_weights_name_their_file(tiny_model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    _truncate(model / "model.safetensors")
    said = rf"^{re.escape(str(model / 'model.safetensors'))}: model weights is truncated or corrupt"
    with pytest.raises(loading.CorruptCheckpoint, match=said):
        loading.load_backend(str(model), device="cpu")
    with pytest.raises(loading.CorruptCheckpoint, match=said):      # what vLLM would be handed
        loading.model_directory(str(model))


class _FakeVLLM:
    """Stands in for the vllm module: records what ``vllm.LLM`` would be given (the real engine is tested in
    tests/data_builders/backends/test_vllm.py, in the vLLM venv)."""

    def __init__(self):
        self.kwargs = None
        fake = self

        class LLM:
            def __init__(self, **kw):
                fake.kwargs = kw
        self.LLM = LLM


def test_vllm_scale_options_reach_the_engine_by_name(tiny_model_dir, monkeypatch):
    from hydra import compose, initialize_config_dir

    from recipes import CONFIG_DIR
    fake = _FakeVLLM()
    monkeypatch.setattr(loading, "import_vllm", lambda: fake)
    monkeypatch.setattr("data_builders.backends.vllm_backend.import_vllm", lambda: fake)
    monkeypatch.setattr(loading, "vllm_environment", lambda *a, **k: None)
    recipes.register()     # the schemas, as a command's own imports store them
    with initialize_config_dir(CONFIG_DIR, version_base="1.3"):
        cfg = compose("rollout", ["backend=vllm", "model=hf", f"model.name={tiny_model_dir}", "model.adapter=null",
                                  "backend.tensor_parallel_size=4", "backend.max_num_seqs=64",
                                  "backend.gpu_memory_utilization=0.6", "model.device=cuda"])
    gpu = loading.backend_from_config(cfg.model, cfg.backend)
    kw = fake.kwargs
    assert (kw["tensor_parallel_size"], kw["max_num_seqs"], kw["gpu_memory_utilization"]) == (4, 64, 0.6)
    assert kw["distributed_executor_backend"] == "mp" and kw["pipeline_parallel_size"] == 1
    # the probe's hooks ride on a worker extension; a GPU engine that compiles its model reads through the tap op the
    # toolwise vLLM plugin puts in its decoder layers (data_builders/backends/vllm_probe_op.py)
    assert kw["worker_extension_cls"] == "data_builders.backends.vllm_probe.ProbeWorkerExtension"
    assert kw["enforce_eager"] is False and gpu.probe_path == "op" and gpu._probe_off is None
    # one device: the engine stays in this process; vLLM's own default batch size when max_num_seqs is unset
    cfg.backend.tensor_parallel_size, cfg.backend.max_num_seqs = 1, None
    loading.backend_from_config(cfg.model, cfg.backend)
    assert fake.kwargs["distributed_executor_backend"] == "uni" and "max_num_seqs" not in fake.kwargs


def test_vllm_data_parallel_in_one_process_says_how_to_get_replicas(tiny_model_dir):
    from data_builders.backends.vllm_backend import VLLMBackend
    with pytest.raises(ValueError, match=r"data_parallel_size=2.*executor=ray executor.workers=N.*--data-parallel-size"):
        VLLMBackend(str(tiny_model_dir), model_id="tiny", adapter=None, data_parallel_size=2)
