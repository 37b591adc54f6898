"""The ``model`` and ``backend`` groups' schemas: what ``data_builders.backends.loading`` loads a policy from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from data_builders.backends import DTYPES as BACKEND_DTYPES
from data_builders.config_fields import param, required
from recipes.schema import store

DTYPES = ("auto", *BACKEND_DTYPES)                          # data_builders.backends.loading.resolve_dtype


@dataclass
class ModelConfig:
    """``model``: the policy (``data_builders.backends.loading.backend_from_config``)."""
    name: str = required("hub id | local directory | .gguf path | smollm2 (the embedded default)")
    gguf_file: Optional[str] = param(None, "a file inside a hub repo or directory named by name")
    adapter: Optional[str] = param(None, "a peft LoRA directory loaded over the base")
    dtype: str = param("auto", "auto = bfloat16 on a CUDA device with native bf16, else float32; or float32 | "
                               "bfloat16 | float16", choices=DTYPES)
    max_batch_size: int = param(32, "prompts per forward", ge=1)
    max_batch_tokens: int = param(16384, "padded tokens per forward; long prompts get smaller batches", ge=1)
    device: str = param("auto", "auto = CUDA when available, else CPU; or cpu | cuda | cuda:N")


@dataclass
class HFBackendConfig:
    """``backend=hf``: transformers (batched generate, KV reuse across turns, all-layer hidden states)."""
    name: str = param("hf", "the engine", choices=("hf",))


@dataclass
class VLLMBackendConfig:
    """``backend=vllm``: vLLM, the same interface as hf; the probe's hidden-state read runs inside the engine."""
    name: str = param("vllm", "the engine", choices=("vllm",))
    max_model_len: Optional[int] = param(None, "context length; null = the model's own limit", ge=1)
    gpu_memory_utilization: float = param(0.85, "GPU only: share of each GPU for weights + KV cache (leave room "
                                                "if the probe reads on an HF copy)", gt=0, le=1)
    tensor_parallel_size: int = param(1, "GPUs one engine shards each layer over (70B in bf16: 4-8 x 80 GB)", ge=1)
    pipeline_parallel_size: int = param(1, "GPUs (or nodes) one engine splits the layer stack over", ge=1)
    data_parallel_size: int = param(1, "engine replicas: offline, each is an executor worker (executor=ray "
                                       "executor.workers=N); or serve with `vllm serve --data-parallel-size N` and "
                                       "use backend=openai", ge=1)
    max_num_seqs: Optional[int] = param(None, "sequences one engine step batches (null = vLLM's default, 256 on "
                                              "GPU)", ge=1)
    enforce_eager: Optional[bool] = param(None, "null = eager on CPU (compiling costs 30-50 s per start there), "
                                                "graphs on GPU")
    enable_prefix_caching: bool = param(True, "KV reuse across an episode's turns")
    block_size: Optional[int] = param(None, "KV cache block in tokens; null = 32 on CPU while the probe reads in "
                                            "the engine (the generation after a probe read recomputes the prompt's "
                                            "last partial block), else vLLM's default (16 on GPU, 128 on CPU)", ge=1)
    cpu_kv_cache_gib: int = param(4, "CPU only: KV cache size (VLLM_CPU_KVCACHE_SPACE, which vLLM reads as an "
                                     "integer)", ge=1)
    cpu_threads: Optional[int] = param(None, "CPU only: cores bound for compute (null = all)", ge=1)
    probe_in_engine: bool = param(True, "the probe reads its layers inside the vLLM engine (forward hooks in a "
                                        "worker extension; a compiled engine: the toolwise_probe plugin's tap op); "
                                        "false, or an engine that cannot: an HF copy beside it")
    probe_device: Optional[str] = param(None, "where the HF copy for probe reads lives (null = model.device)")
    seed: int = param(0, "vLLM's sampling seed")
    engine_kwargs: Dict[str, Any] = param({}, "free-form: vllm.LLM's own keyword arguments, passed as they are")


@dataclass
class OpenAIBackendConfig:
    """``backend=openai``: any OpenAI-compatible Completions server; prompts are rendered and counted with
    model.name's tokenizer; no hidden states (no probe)."""
    name: str = param("openai", "the engine", choices=("openai",))
    base_url: str = param("http://127.0.0.1:8000/v1", "the server's /v1 URL")
    served_model: Optional[str] = param(None, "the model id to ask for; null = the first model the server lists")
    tokenizer: Optional[str] = param(None, "null = model.name's tokenizer")
    api_key_env: str = param("OPENAI_API_KEY", "the variable the key is read from (EMPTY when unset)")
    max_concurrency: int = param(32, "prompts per request", ge=1)
    timeout_s: float = param(600.0, "a request's timeout", gt=0)
    vllm_extras: bool = param(True, "token-id prompts, server-side stop strings, returned token ids (vLLM servers)")


# what this module adds to Hydra's ConfigStore, (group or None for an entry config, name, schema)
SCHEMAS = [
    ("model", "schema", ModelConfig),
    ("backend", "hf_schema", HFBackendConfig),
    ("backend", "vllm_schema", VLLMBackendConfig),
    ("backend", "openai_schema", OpenAIBackendConfig),
]
store(SCHEMAS)
