"""Hugging Face transformers backend: batched generation, log-probs, and a probe-read prefill whose
KV cache the following generation reuses.

Generation itself is ``model.generate`` (stop strings, sampling, EOS handling are the library's).
The hand-written part is the prefill forward: ``generate`` cannot hand back intermediate hidden
states *and* continue from them, so we run the prompt once ourselves, read the hidden states the probe needs
with forward hooks (:func:`last_token_states`), and give ``generate`` that cache, cropped by one token when
nothing was appended (``generate`` needs at least one uncached input token; recomputing one token costs
~nothing next to the prompt). Prompts that continue kept caches (an agent's episodes, ``cache_keys``) are
prefilled the same way before they decode (``_prefill_kept``): grouped by the tokens each still needs, with the
prefixes several of them share computed once (``prefix_pool.py``), then decoded together.

An ``HFBackend`` on a *base* model (``AutoModel``: no LM head, ``can_generate()`` false) only reads hidden
states: the probe-only copy beside a vLLM engine (``data_builders/backends/loading.py``), which needs neither
the LM head's weights nor a KV cache.
"""
from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterator, Sequence

import torch
from transformers import DynamicCache, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.stopping_criteria import StopStringCriteria

try:    # transformers >= 4.56: caches made of layer objects (the reserved cache below builds on them)
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:     # older 4.x: the library's DynamicCache only
    Cache = DynamicLayer = None

from .. import progress
from .base import Backend, Generation, PrefillState, SamplingParams
from .chat import ChatText
from .fingerprint import adapter_digest, weights_fingerprint
from .grammar import CallConstraint, GrammarCache, import_xgrammar
from .malloc import keep_freed_memory
from .prefix_pool import PrefixPool, common_prefix, shared_prefixes
from . import ragged_attention

def _position_ids(mask: torch.Tensor) -> torch.Tensor:
    # Same rule as transformers' generate: positions count real tokens only, so left padding and
    # padding inside an appended prefill do not shift the rotary positions.
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


@contextmanager
def last_token_states(model, layers: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
    """Hidden states of the last position of each row, read by forward hooks while the forward runs.

    Index ``l < n_layers`` is the input of decoder layer ``l`` (0: the embeddings), index ``n_layers`` the
    final norm's output: the tensors transformers' ``output_hidden_states`` returns (tested), without asking the
    model to return every layer's full [batch, seq, d] states only for us to slice the last row (on the embedded
    model the peak memory is the same either way, benchmarks/probe_memory.py: the KV cache and attention dominate).
    Rows are left-padded, so position -1 is every row's last real token.
    """
    decoder = model.get_decoder()
    n = model.config.num_hidden_layers
    got: dict[int, torch.Tensor] = {}

    def keep(index: int, h: torch.Tensor) -> None:
        got[index] = h[:, -1, :].detach()

    handles = []
    for index in sorted(set(layers)):
        if index < n:
            handles.append(decoder.layers[index].register_forward_pre_hook(
                lambda _m, args, kwargs, i=index: keep(i, args[0] if args else kwargs["hidden_states"]),
                with_kwargs=True))
        else:
            handles.append(decoder.norm.register_forward_hook(lambda _m, _args, out: keep(n, out)))
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


class _ReservedLayer(DynamicLayer or object):
    """A cache layer that writes each step's keys and values into a buffer with room for the tokens still to
    come, and hands attention views of it: the library's ``DynamicLayer`` concatenates the whole cache into a new
    tensor at every decoded token, which made that copy (and the page faults of its allocation) 17% of the main
    job's time on an AVX2 CPU (docs/results.md#where-the-main-jobs-time-goes). The views hold exactly the values
    the concatenation would, in the same layout, so attention computes the same numbers. Anything that replaces
    ``keys``/``values`` itself (beam reordering, batch selection) is picked up at the next update by copying them
    into a fresh buffer."""

    def __init__(self, total: int):
        super().__init__()
        self.total = total          # tokens the buffer is sized for at its first allocation
        self._view = None           # the tensor ``keys`` was last set to by this class

    def _allocate(self, length: int, like: torch.Tensor) -> None:
        """A buffer of at least ``length`` tokens (``total``, or 1.5x when it must grow) holding the cache so far."""
        n = self.get_seq_length()
        have = self._buffers[0].shape[-2] if self._view is not None and self.keys is self._view else 0
        capacity = max(length, self.total if not have else have + have // 2)
        b, h, _, d = like.shape
        fresh = [like.new_empty((b, h, capacity, d)) for _ in range(2)]
        if n:
            fresh[0][:, :, :n] = self.keys
            fresh[1][:, :, :n] = self.values
        self._buffers = fresh
        self._set_views(n)

    def _set_views(self, n: int) -> None:
        self.keys, self.values = self._buffers[0][:, :, :n], self._buffers[1][:, :, :n]
        self._view = self.keys

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        end = n + key_states.shape[-2]
        if (self._view is None or self.keys is not self._view or end > self._buffers[0].shape[-2]
                or self._buffers[0].shape[0] != key_states.shape[0]):
            self._allocate(end, key_states)
        self._buffers[0][:, :, n:end] = key_states
        self._buffers[1][:, :, n:end] = value_states
        self._set_views(end)
        return self.keys, self.values

    def adopt(self, keys: torch.Tensor, values: torch.Tensor, n: int) -> None:
        """Take ``keys``/``values`` ([batch, heads, capacity, dim], their first ``n`` tokens written) as the buffers:
        a batch's kept caches are written into them row by row, with no intermediate concatenation."""
        self.lazy_initialization(keys, values)
        self._buffers = [keys, values]
        self._set_views(n)

    def reserve(self, total: int) -> None:
        """Make room for ``total`` tokens now (one copy of the cache so far), not by growing during decoding."""
        self.total = total
        if self.is_initialized and self.get_seq_length() and (
                self.keys is not self._view or self._buffers[0].shape[-2] < total):
            self._allocate(total, self.keys)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (rows that stopped decoding are dropped), in the same buffer."""
        if self._view is None or self.keys is not self._view:
            return super().batch_select_indices(indices)
        n = self.get_seq_length()
        self._buffers = [self._compact(buf, indices, n) for buf in self._buffers]
        self._set_views(n)

    @staticmethod
    def _compact(buf: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
        """The rows ``indices`` moved to the top of ``buf``, in place: a fresh buffer for every change of the batch
        (a decode batch's is GBs on CPU) landed in new heap memory each time, faulted in page by page. Ascending
        indices (rows that stopped, dropped) move up, each read before it is overwritten; any other order is
        gathered into a new buffer."""
        rows = indices.tolist()
        if any(b <= a for a, b in zip(rows, rows[1:])):
            out = buf.new_empty((len(rows), *buf.shape[1:]))
            out[:, :, :n] = buf[indices, :, :n]
            return out
        for j, i in enumerate(rows):
            if i != j:
                buf[j, :, :n] = buf[i, :, :n]
        return buf[:len(rows)]

    def crop(self, tokens_to_remove: int) -> None:
        if self._view is None or self.keys is not self._view:
            return super().crop(tokens_to_remove)
        if tokens_to_remove > 0:
            raise ValueError(f"crop({tokens_to_remove}): give a negative number of tokens to remove")
        self._set_views(max(self.get_seq_length() + tokens_to_remove, 0))


class _ReservedCache(DynamicCache):
    """A ``DynamicCache`` of :class:`_ReservedLayer`s, each sized for ``total`` tokens (prompt + new tokens)."""

    def __init__(self, n_layers: int, total: int):
        Cache.__init__(self, layers=[_ReservedLayer(total) for _ in range(n_layers)])

    def reserve(self, total: int) -> None:
        for layer in self.layers:
            layer.reserve(total)


class _LogprobRecorder:
    """A logits processor that records log p(token) of each generated token in O(batch x vocab) memory.

    ``output_logits=True`` would keep every step's full logits (batch x steps x 49k floats: GBs for a
    batch of 32). Custom processors run before the sampling warpers (temperature, top-p), so these are
    the model's raw log-probs; at step t we see the token chosen at step t-1 and gather its log-prob.
    """

    def __init__(self):
        self.prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._gather(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def _gather(self, tokens: torch.Tensor) -> None:
        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, tokens[:, None]).squeeze(-1))
            self.prev = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        self._gather(sequences[:, -1])
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros(sequences.shape[0], 0,
                                                                               device=sequences.device)


class _CallGrammar:
    """A logits processor that masks each row to what its call grammar allows (xgrammar's GrammarMatcher and
    ``apply_token_bitmask_inplace``; rows without a grammar are left alone).

    Not ``xgrammar.contrib.hf.LogitsProcessor``: that one asserts every token fed back is accepted, but
    ``generate`` keeps feeding pad tokens to rows a stop string (``</tool_call>``) finished, and it would give
    unconstrained rows a matcher too. A token the matcher rejects can only be such padding, so that row's
    matcher is dropped. It runs after :class:`_LogprobRecorder`, which therefore records the raw distribution.
    """

    def __init__(self, grammars: list, vocab_size: int):
        self._xgr = import_xgrammar()
        self.matchers = [None if g is None else self._xgr.GrammarMatcher(g) for g in grammars]
        self.bitmask = self._xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self.started = False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.started:   # the first call's last input token is the prompt's, not a generated one
            last = input_ids[:, -1].tolist()
            for i, m in enumerate(self.matchers):
                if m is not None and not m.is_terminated() and not m.accept_token(last[i]):
                    self.matchers[i] = None
        self.started = True
        rows = [i for i, m in enumerate(self.matchers) if m is not None and not m.is_terminated()]
        if rows:
            for i in rows:
                self.matchers[i].fill_next_token_bitmask(self.bitmask, i)
            self._xgr.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device), indices=rows)
        return scores


class _StepCounter:
    """A logits processor that reports each decode step's tokens, one per row of the batch, to the progress meter
    (``data_builders.progress``); it leaves the scores alone."""

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        progress.generated(scores.shape[0])
        return scores


class _StopRecorder(StoppingCriteria):
    """The library's stop-string criterion, recording which rows it has stopped: ``generate`` returns the
    sequences but not which rows finished, and a row that completed a stop string on a segment's last step
    looks like one still running."""

    def __init__(self, inner: StoppingCriteria):
        self.inner = inner
        self.done: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        hit = self.inner(input_ids, scores, **kwargs)
        self.done = hit if self.done is None else self.done | hit
        return hit


class HFBackend(ChatText, Backend):
    name = "hf"
    #: ``reserved``: generation writes into a KV cache sized for prompt + new tokens (:class:`_ReservedCache`);
    #: ``dynamic``: the library's DynamicCache, which copies the whole cache at every token (the previous code
    #: path, kept for benchmarks/main_job.py's side-by-side; it gives the same tokens).
    kv_cache = "reserved"
    #: Greedy generation runs in segments of this many tokens; between segments the rows that stopped (stop
    #: string, EOS) leave the batch with their KV cache, so a batch no longer decodes up to max_new_tokens for
    #: every row while one row is still going (:meth:`_decode`). 0: one ``generate`` call for the whole budget (the
    #: previous code path, kept for benchmarks/main_job.py's side-by-side).
    decode_segment = 16
    #: On CPU, :func:`keep_freed_memory` when the backend is made: it tunes malloc only where the process opted in
    #: (the command-line entry points, ``TOOLWISE_MALLOC_TUNING=1``), as it is process-wide. False: glibc's
    #: defaults even there (the previous code path, kept for benchmarks/main_job.py's side-by-side).
    tune_malloc = True
    #: stop-string criteria kept (one per distinct ``stop`` tuple; the agent loop uses a handful)
    max_stop_criteria = 32
    #: Prompts continuing kept caches (``cache_keys``) are prefilled first, in batches grouped by the tokens each
    #: still needs, and then decoded together, in batches grouped by their whole length (``decode_ratio``): decoding
    #: streams every weight once per step whatever the batch, so a step of 32 rows costs 3.4x one of 8, not 4x
    #: (docs/results.md#where-the-main-jobs-time-goes), and a prompt's length says little of what is left to prefill.
    #: False: each batch (grouped by whole length) prefilled and decoded by one ``generate`` call (the previous
    #: code path, kept for benchmarks/main_job.py's side-by-side).
    staged_prefill = True
    #: a decode batch closes at a row longer than this many times its shortest (each step reads every row's KV at the
    #: longest row's length: 2.0 split the main job's rounds into two batches, which decoded 1.19x slower than one),
    #: or at ``decode_batch_tokens`` rows x longest length (its KV cache: 46 KB a token for the embedded model)
    decode_ratio = 4.0
    decode_batch_tokens = 65536
    #: KV of prompt prefixes that several prompts share (an agent's system prompt and tool listing) is computed once
    #: and kept, least recently used out, up to this many MiB (``prefix_pool.py``); 0: none kept (the previous path)
    prefix_pool_mib = 512
    #: shorter shared prefixes are not worth a forward of their own
    prefix_min_tokens = 32
    #: On CPU, a model on SDPA attends at each decode step from where each run of rows begins rather than from the
    #: batch's left edge (``ragged_attention.py``): a step of a left-padded batch reads the padding's keys and values
    #: too. False: transformers' SDPA as is (the previous code path, kept for benchmarks/main_job.py's side-by-side).
    ragged_attention = True
    #: ... and each run's attention is two batched matmuls and a softmax (``ragged_attention.decode_attention``),
    #: not torch's SDPA kernel. False: SDPA per run (the previous code path, kept for benchmarks/main_job.py).
    matmul_decode = True

    def __init__(self, model, tokenizer, *, model_id: str, adapter: str | None = None, max_batch_size: int = 32,
                 max_batch_tokens: int = 16384):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"   # decoder-only batching
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model_id = model_id
        self.adapter = adapter
        # the adapter's identity is the bytes loaded now: hashed once, here (fingerprint.py)
        self.adapter_hash = adapter_digest(adapter) if adapter else None
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self._kv: dict[Hashable, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = {}
        self._prefixes = PrefixPool(self.prefix_pool_mib << 20)
        self._grammars: GrammarCache | None = None   # built on the first constrained generation
        cfg = model.config
        self.n_layers = cfg.num_hidden_layers
        self.d_model = cfg.hidden_size
        self._kv_shape = (  # (kv heads, head dim) of each cached layer
            cfg.num_key_value_heads,
            getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        # transformers 5 renamed ``past_key_values`` to ``cache``; support both so a GPU box pinned
        # to 4.x by vLLM works too.
        fwd = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in fwd else "past_key_values"
        if self.tune_malloc and self.model.device.type == "cpu":
            keep_freed_memory()
        if (self.ragged_attention and self.model.device.type == "cpu"
                and getattr(cfg, "_attn_implementation", None) == "sdpa"):
            self.model.set_attn_implementation(ragged_attention.register(matmul=self.matmul_decode))
        gen_cfg = getattr(model, "generation_config", None)
        eos = getattr(gen_cfg, "eos_token_id", None) or tokenizer.eos_token_id
        self._eos_ids = set(eos if isinstance(eos, list) else [eos])
        self._eos_ids.add(tokenizer.eos_token_id)
        # The ids generate() itself stops a row at (the generation config's, only): a segment's rows that
        # generated one have ended.
        gen_eos = getattr(gen_cfg, "eos_token_id", None)
        self._generate_eos = set(gen_eos if isinstance(gen_eos, list) else [] if gen_eos is None else [gen_eos])
        # the library's stop-string criterion per stop tuple, built once (it preprocesses the whole vocabulary: ≈ 2 MiB
        # for SmolLM2's). Bounded, least recently used out: the endpoint's clients send stop strings without end, and
        # an unbounded cache grew the server by ≈ 2 MiB per distinct `stop` (benchmarks/serve_memory.py)
        self._stop_criterion = functools.lru_cache(maxsize=self.max_stop_criteria)(self._new_stop_criterion)

    # ---------------------------------------------------------------- identity
    @property
    def fingerprint(self) -> str:
        return weights_fingerprint(self.model_id, self.model.config, self.adapter_hash)

    @property
    def config(self):
        return self.model.config

    def _new_cache(self, total: int) -> DynamicCache | None:
        """An empty KV cache for a generation that will hold ``total`` tokens (None: let ``generate`` make one)."""
        if self.kv_cache == "reserved" and DynamicLayer is not None:
            return _ReservedCache(self.n_layers, total)
        if self.kv_cache not in ("reserved", "dynamic"):
            raise ValueError(f"HFBackend.kv_cache={self.kv_cache!r}: choose 'reserved' or 'dynamic'")
        return None

    # ---------------------------------------------------------------- text
    def _encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        # The chat template already wrote every special token; adding BOS again would change the prompt.
        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, add_special_tokens=False)
        return {k: v.to(self.device) for k, v in enc.items()}

    @property
    def device(self) -> torch.device:
        return self.model.device

    def _chunks(self, prompts: Sequence, lengths: Sequence[int] | None = None, *, ratio: float = 1.5,
                max_tokens: int | None = None) -> list[list[int]]:
        """Batches of prompt indices, sorted by length, so padding stays small.

        A batch closes at ``max_batch_size`` rows, at ``max_tokens`` padded tokens (default ``max_batch_tokens``),
        or when the next prompt is over ``ratio`` times the batch's shortest: a 2,300-token 2-D list prompt padded
        beside 350-token ones would multiply the prefill work (measured: 9 mixed prompts, 58 s as one batch).
        Results are returned in input order by the callers.
        """
        if lengths is None:
            lengths = [len(self.tokenizer(p, add_special_tokens=False).input_ids) for p in prompts]
        max_tokens = self.max_batch_tokens if max_tokens is None else max_tokens
        order = sorted(range(len(prompts)), key=lambda i: lengths[i])
        chunks: list[list[int]] = []
        for i in order:
            c = chunks[-1] if chunks else None
            if (c is None or len(c) >= self.max_batch_size or (len(c) + 1) * lengths[i] > max_tokens
                    or lengths[i] > ratio * max(lengths[c[0]], 1)):
                chunks.append([i])
            else:
                c.append(i)
        return chunks

    # ---------------------------------------------------------------- prefill (probe read)
    @torch.inference_mode()
    def prefill(self, prompts: Sequence[str], layers: Sequence[int] | None = None) -> PrefillState:
        layers = self.hidden_indices(layers)
        hidden = torch.empty(len(prompts), len(layers), self.d_model, dtype=torch.float32)
        # A generating model keeps the prompt's KV cache for the generation that continues it (one logit row
        # is computed and dropped); a probe-only base model keeps nothing.
        generates = self.model.can_generate()
        extra = {"use_cache": True, "logits_to_keep": 1} if generates else {"use_cache": False}
        chunks = []
        for idx in self._chunks(prompts):
            enc = self._encode([prompts[i] for i in idx])
            cache = self._new_cache(enc["input_ids"].shape[1]) if generates else None
            with last_token_states(self.model, layers) as got:
                out = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                 position_ids=_position_ids(enc["attention_mask"]), **extra,
                                 **({self._cache_kw: cache} if cache is not None else {}))
            hidden[idx] = torch.stack([got[l] for l in layers], dim=1).float().cpu()
            if generates:
                cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
                chunks.append({"idx": idx, "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                               "cache": cache})
            del out, got
        return PrefillState(prompts=list(prompts), layers=layers, hidden=hidden, _resume={"chunks": chunks})

    # ---------------------------------------------------------------- generation
    def _gen_kwargs(self, params: SamplingParams) -> dict[str, Any]:
        kw: dict[str, Any] = {"max_new_tokens": params.max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id,
                              "return_dict_in_generate": True}
        if params.temperature > 0:
            kw.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None)
        else:
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kw   # stop strings: _StopRecorder around the library's criterion (_decode)

    @torch.inference_mode()
    @progress.generation
    def generate(self, prompts: Sequence[str], params: SamplingParams = SamplingParams(), *,
                 prefill_state: PrefillState | None = None, return_logprobs: bool = False,
                 cache_keys: Sequence[Hashable] | None = None,
                 constraints: Sequence[CallConstraint | None] | None = None) -> list[Generation]:
        if not self.model.can_generate():
            raise RuntimeError(f"{self.model_id}: this HF copy was loaded without its LM head (probe_only) and only "
                               "reads hidden states; generation runs on the engine beside it")
        prompts = list(prompts)
        if cache_keys is not None and len(cache_keys) != len(prompts):
            raise ValueError("cache_keys must give one key per prompt")
        if (cache_keys is None or prefill_state is not None) and not all(isinstance(p, str) for p in prompts):
            raise ValueError("a prompt given as token ids continues a kept KV cache: it needs cache_keys (and no "
                             "prefill_state)")
        grammars = self._compile(prompts, constraints)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        kw = self._gen_kwargs(params)
        results: list[Generation | None] = [None] * len(prompts)
        if prefill_state is None and cache_keys is not None:
            # tokenized once; a prompt given as token ids (its key's own tokens and more) is taken as is, since
            # decoding generated tokens and tokenizing the text again need not give the same tokens back
            ids = [self.tokenizer(p, add_special_tokens=False).input_ids if isinstance(p, str) else list(p)
                   for p in prompts]
            if self.staged_prefill:
                reused = self._prefill_kept(ids, cache_keys)
                # one batch's cache at a time (a generator): a decode batch's KV is GBs on CPU
                batches = (self._reuse_batch(idx, ids, cache_keys, params.max_new_tokens, reused, handed_over=True)
                           for idx in self._chunks(ids, [len(r) + params.max_new_tokens for r in ids],
                                                   ratio=self.decode_ratio, max_tokens=self.decode_batch_tokens))
            else:
                batches = [self._reuse_batch(idx, ids, cache_keys, params.max_new_tokens)
                           for idx in self._chunks(prompts, [len(r) for r in ids])]
        elif prefill_state is None:
            batches = [(idx, self._encode([prompts[i] for i in idx]), None) for idx in self._chunks(prompts)]
        else:
            batches = [self._resume_batch(prefill_state, c, prompts) for c in prefill_state._resume["chunks"]]
        for idx, enc, cache in batches:
            # Room for every token this generation can add, so the cache never grows while decoding.
            total = enc["input_ids"].shape[1] + params.max_new_tokens
            if cache is None:
                cache = self._new_cache(total)
            elif isinstance(cache, _ReservedCache):
                cache.reserve(total)
            gens = self._decode(enc, cache, kw, params, return_logprobs, [grammars[i] for i in idx] if grammars else [],
                                None if cache_keys is None else [cache_keys[i] for i in idx])
            for row, i in enumerate(idx):
                results[i] = gens[row]
                results[i].cached_tokens = int(enc.get("reused", [0] * len(idx))[row])
        return results  # type: ignore[return-value]

    def _decode(self, enc: dict, cache, kw: dict, params: SamplingParams, return_logprobs: bool, grammars: list,
                keys: list[Hashable] | None) -> list[Generation]:
        """One batch's generations (rows as in ``enc``); each row's KV cache is kept under its key when ``keys``.

        Greedy decoding runs in segments of ``decode_segment`` tokens: after each, the rows that stopped leave the
        batch (their KV kept first) and the others continue from the cache. A row computes what it would in one
        call: attention reads only that row, its padding columns stay where they were, and each segment resumes
        with the row's last token as its one uncached input, as the next step of one call would. Only the
        floating-point rounding can differ: a BLAS product's last bits depend on how many rows it multiplies
        (log-probs move by ~1e-5; the main job's 64 episodes generate the same text:
        docs/results.md#where-the-main-jobs-time-goes). Sampling stays one call (fewer rows would change which
        random numbers each row draws), and so do grammar-constrained batches (each row's matcher follows the
        batch's rows)."""
        width = enc["input_ids"].shape[1]
        n_prompt = [int(n) for n in enc["attention_mask"].sum(-1).tolist()]
        constrained = any(g is not None for g in grammars)
        segment = params.max_new_tokens
        if self.decode_segment and not kw.get("do_sample") and not constrained:
            segment = self.decode_segment
        ids, mask = enc["input_ids"], enc["attention_mask"]
        live = list(range(ids.shape[0]))          # batch row -> row of enc
        tokens: list[list[int]] = [[] for _ in live]
        logprobs: list[list[float]] = [[] for _ in live]
        gens: list[Generation | None] = [None] * len(live)
        left = params.max_new_tokens
        batch_generated = 0         # progress: what this batch decoded, closed when its last row ends
        while True:
            extra = {self._cache_kw: cache} if cache is not None else {}
            recorder = _LogprobRecorder() if return_logprobs else None
            # progress: every decode step's tokens as they come (the bar's unit; a segment takes seconds on a CPU)
            processors = [_StepCounter()] + ([recorder] if recorder is not None else [])
            if constrained:
                # After the recorder, so that it reads the raw scores before the grammar masks them.
                processors.append(_CallGrammar(grammars, self.model.config.vocab_size))
            if processors:
                extra["logits_processor"] = LogitsProcessorList(processors)
            stopper = _StopRecorder(self._stop_criterion(tuple(params.stop))) if params.stop else None
            if stopper is not None:
                extra["stopping_criteria"] = StoppingCriteriaList([stopper])
            out = self.model.generate(input_ids=ids, attention_mask=mask,
                                      **{**kw, "max_new_tokens": min(segment, left)}, **extra)
            new = out.sequences[:, ids.shape[1]:]
            lp = recorder.finish(out.sequences).tolist() if recorder is not None else None
            left -= new.shape[1]
            progress_after = len(live) * new.shape[1]       # the segment's tokens, every live row (a bar's unit)
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], new.shape[1])], 1)
            new_rows = new.tolist()
            ended = []
            for b, r in enumerate(live):
                tokens[r] += new_rows[b]
                if lp is not None:
                    logprobs[r] += lp[b]
                stopped = (stopper is not None and stopper.done is not None and bool(stopper.done[b])) or any(
                    t in self._generate_eos for t in new_rows[b])
                if stopped or left <= 0:
                    ended.append(b)
                    gens[r] = self._finish(tokens[r], logprobs[r] if lp is not None else None, n_prompt[r], params.stop)
            # progress (data_builders.progress): the budget the rows that stopped leave (their tokens: _StepCounter)
            progress.credit(len(ended) * max(left, 0))
            batch_generated += progress_after
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            if keys is not None and ended:
                self._store(cache, out.sequences, mask, width, ended, [n_prompt[live[b]] for b in ended],
                            [gens[live[b]] for b in ended], [keys[live[b]] for b in ended])
            if len(ended) == len(live):
                progress.close(batch_generated, len(gens) * params.max_new_tokens)
                return gens  # type: ignore[return-value]
            keep = [b for b in range(len(live)) if b not in set(ended)]    # still decoding
            if ended:
                rows = torch.tensor(keep, device=ids.device)
                cache.batch_select_indices(rows)
                ids, mask = out.sequences[rows], mask[rows]
                live = [live[b] for b in keep]
            else:
                ids = out.sequences

    def _new_stop_criterion(self, stop: tuple[str, ...]) -> StoppingCriteria:
        """The library's stop-string criterion for ``stop`` (cached by ``self._stop_criterion``)."""
        return StopStringCriteria(tokenizer=self.tokenizer, stop_strings=list(stop))

    def _compile(self, prompts: list[str], constraints) -> list | None:
        """Each prompt's compiled call grammar (None: unconstrained), or None when no prompt has one."""
        if constraints is None or not any(c is not None for c in constraints):
            return None
        if len(constraints) != len(prompts):
            raise ValueError("constraints must give one entry (a CallConstraint or None) per prompt")
        if self._grammars is None:
            self._grammars = GrammarCache(self.tokenizer, self.model.config.vocab_size)
        return [None if c is None else self._grammars.get(c) for c in constraints]

    # ---------------------------------------------------------------- KV reuse across turns
    # An agent's next prompt is its last prompt + what it generated + the appended messages. Keeping
    # each episode's KV cache and prefilling only the tokens past the longest common prefix removes the
    # re-prefill of the whole context every turn, which dominates CPU rollouts (prefill is compute-bound).
    # Rows of a batch carry caches of different lengths: they are left-padded with masked zeros, and
    # the new tokens are padded inside the sequence, exactly as for a response prefill.

    def release(self, keys: Sequence[Hashable]) -> None:
        for k in keys:
            self._kv.pop(k, None)

    def _kept(self, row: list[int], key: Hashable) -> tuple[int, list | None]:
        """``(n, kv)``: the tokens of ``row`` whose KV is kept (its episode's last turn, or a shared prefix: the
        longer), at most all but the last (a generation needs one uncached token), and that KV."""
        limit, n, kv = len(row) - 1, 0, None
        stored = self._kv.get(key)
        if stored is not None:
            n, kv = min(common_prefix(stored[0], row), limit), stored[1]
        if n < limit and self.prefix_pool_mib:
            p, entry = self._prefixes.match(row, limit)
            if p > n:
                n, kv = p, entry
        return n, (kv if n else None)

    def _reuse_batch(self, idx: list[int], all_ids: list[list[int]], keys: Sequence[Hashable], room: int = 0,
                     reused: list[int] | None = None, handed_over: bool = False):
        """One batch of prompts continuing kept KV (``_kept``); ``reused``: each prompt's tokens that came from a
        kept cache before this call's own prefill (``_prefill_kept``) extended it. ``handed_over``: the episodes'
        kept KV is dropped once it is in the batch's cache (the generation keeps it anew when it ends): on CPU,
        memory first touched is paid for in page faults, and the main job's peak held every episode's KV twice."""
        ids = [all_ids[i] for i in idx]
        starts = [self._kept(row, keys[i]) for i, row in zip(idx, ids)]
        enc, cache = self._batch(ids, starts, room)
        enc["reused"] = [n for n, _ in starts] if reused is None else [reused[i] for i in idx]
        if handed_over:
            del starts
            self.release([keys[i] for i in idx])
        return idx, enc, cache

    def _batch(self, rows: list[list[int]], starts: list[tuple[int, list | None]], room: int = 0):
        """Model inputs for ``rows`` whose first ``n`` tokens' KV is given (``starts``: ``(n, per-layer kv)``) and
        the cache holding it, with room for ``room`` more tokens (None when no row has any).

        Rows carry caches of different lengths: they are left-padded with masked zeros, and the new tokens are
        padded inside the sequence, exactly as for a response prefill."""
        reuse = [n for n, _ in starts]
        past, width = max(reuse), max(len(r) - n for r, n in zip(rows, reuse))
        pad = self.tokenizer.pad_token_id
        ids, masks = [], []
        for row, n in zip(rows, reuse):
            seg = row[n:]
            ids.append([pad] * (past - n) + row[:n] + [pad] * (width - len(seg)) + seg)
            masks.append([0] * (past - n) + [1] * n + [0] * (width - len(seg)) + [1] * len(seg))
        enc = {"input_ids": torch.tensor(ids, device=self.device),
               "attention_mask": torch.tensor(masks, device=self.device)}
        if past == 0:
            return enc, None
        cache = self._new_cache(past + width + room) or DynamicCache()   # room for the ``room`` new tokens
        (heads, dim), dtype = self._kv_shape, self.model.dtype
        reserved = isinstance(cache, _ReservedCache)
        shape = (len(rows), heads, past + width + room if reserved else past, dim)
        for layer in range(self.n_layers):
            bufs = [torch.empty(shape, dtype=dtype, device=self.device) for _ in range(2)]
            for part, buf in enumerate(bufs):
                for b, (n, kv) in enumerate(starts):
                    buf[b, :, :past - n].zero_()        # masked left padding: finite, so attention weighs it 0
                    if n:
                        buf[b, :, past - n:past] = kv[layer][part][0, :, :n]
            if reserved:
                cache.layers[layer].adopt(bufs[0], bufs[1], past)
            else:
                cache.update(bufs[0], bufs[1], layer)
        return enc, cache

    def _prefill_kept(self, ids: list[list[int]], keys: Sequence[Hashable]) -> list[int]:
        """Extend every prompt's kept KV to all of it but its last token, kept under its key; returns the tokens
        of each whose KV was kept before this call. Prefixes that several of the prompts share are prefilled first,
        once each, and kept in the pool (``prefix_pool.py``)."""
        before = [self._kept(row, key)[0] for row, key in zip(ids, keys)]
        if self.prefix_pool_mib:
            short = [row for row, n in zip(ids, before) if n < len(row) - 1]
            fresh = [p for p in shared_prefixes(short, self.prefix_min_tokens)
                     if self._prefixes.match(p)[0] < len(p)]
            while fresh:    # in waves: a prefix that begins with another fresh one is computed from it
                wave = [p for p in fresh if not any(len(q) < len(p) and p[:len(q)] == q for q in fresh)]
                for prefix, kv in zip(wave, self._forward_kv([list(p) for p in wave],
                                                             [self._kept(list(p), None) for p in wave])):
                    self._prefixes.add(prefix, kv, sum(k.nbytes + v.nbytes for k, v in kv))
                fresh = [p for p in fresh if p not in set(wave)]
        starts = [self._kept(row, key) for row, key in zip(ids, keys)]
        todo = [i for i, (row, (n, _)) in enumerate(zip(ids, starts)) if n < len(row) - 1]
        todo_starts = [starts[i] for i in todo]
        del starts      # kept caches are replaced as each batch ends: the old ones are not all held to the end

        def keep(j: int, kv: list) -> None:
            self._kv[keys[todo[j]]] = (ids[todo[j]][:-1], kv)
        self._forward_kv([ids[i][:-1] for i in todo], todo_starts, keep)
        return before

    def _forward_kv(self, rows: list[list[int]], starts: list[tuple[int, list | None]],
                    done: Callable[[int, list], None] | None = None) -> list[list]:
        """Each row's KV over all its tokens (per layer ``(keys, values)`` of shape [1, heads, tokens, dim]): the
        first ``n`` from ``starts``, the rest computed in batches grouped by the tokens each still needs. With
        ``done``, each row's KV goes to ``done(row, kv)`` as its batch ends instead (nothing is returned)."""
        out: list[list | None] = [None] * len(rows)
        for idx in self._chunks(rows, [len(rows[i]) - starts[i][0] for i in range(len(rows))]):
            enc, cache = self._batch([rows[i] for i in idx], [starts[i] for i in idx])
            past = max(starts[i][0] for i in idx)      # columns the cache holds: only the rest is fed
            if cache is None:
                cache = self._new_cache(enc["input_ids"].shape[1])
            got = self.model(input_ids=enc["input_ids"][:, past:], attention_mask=enc["attention_mask"],
                             position_ids=_position_ids(enc["attention_mask"])[:, past:], use_cache=True,
                             logits_to_keep=1, **({self._cache_kw: cache} if cache is not None else {}))
            cache = getattr(got, "cache", None) or getattr(got, "past_key_values", None)
            layers = [(l.keys, l.values) for l in cache.layers] if hasattr(cache, "layers") else list(
                zip(cache.key_cache, cache.value_cache))
            for b, i in enumerate(idx):
                real = enc["attention_mask"][b].nonzero().squeeze(-1)
                kv = [(k[b:b + 1, :, real], v[b:b + 1, :, real]) for k, v in layers]
                if done is None:
                    out[i] = kv
                else:
                    starts[i] = None        # the row's old KV may go now
                    done(i, kv)
            del got, cache, layers, enc
        return out  # type: ignore[return-value]

    def _store(self, cache, sequences: torch.Tensor, mask: torch.Tensor, width: int, rows: list[int],
               n_prompt: list[int], gens: list[Generation], keys: list[Hashable]) -> None:
        """Keep batch ``rows``' KV cache for their episodes' next turns. ``mask`` covers ``sequences`` (the prompt's
        mask, then ones over the generated columns); ``width``: the prompt's columns."""
        if cache is None:
            return
        layers = [(l.keys, l.values) for l in cache.layers] if hasattr(cache, "layers") else list(
            zip(cache.key_cache, cache.value_cache))
        cache_len = layers[0][0].shape[2]
        seq, mask = sequences[:, :cache_len], mask[:, :cache_len]
        for row, n, gen, key in zip(rows, n_prompt, gens, keys):
            real = mask[row].nonzero().squeeze(-1)
            # Fed generated tokens: all but the last step's; pads fed after a row finished are dropped.
            real = real[:n + min(len(gen.token_ids), cache_len - width)]
            self._kv[key] = (seq[row, real].tolist(),
                             [(k[row:row + 1, :, real], v[row:row + 1, :, real]) for k, v in layers])

    def _resume_batch(self, state: PrefillState, chunk: dict, prompts: list[str]):
        """Extend a prefilled batch by each row's appended text (the response prefill)."""
        if len(prompts) != len(state.prompts):
            raise ValueError("prefill_state was made for a different number of prompts")
        idx, ids, mask = chunk["idx"], chunk["input_ids"], chunk["attention_mask"]
        suffixes = []
        for i in idx:
            if not prompts[i].startswith(state.prompts[i]):
                raise ValueError(f"prompt {i} does not extend the prefilled prompt; re-run prefill")
            suffixes.append(prompts[i][len(state.prompts[i]):])
        cache = chunk["cache"]
        chunk["cache"] = None  # a cache is consumed by the generation that continues it
        if cache is None:
            raise ValueError("this prefill_state was already used for a generation")
        # ``generate`` needs >= 1 uncached token per row and predicts from each row's last column, so
        # drop the last prompt token from the cache and re-feed it followed by the row's suffix. Rows
        # are left-padded *inside* the sequence (mask 0) to a common width, which attention masking
        # and mask-derived position ids handle exactly; every row's last column stays a real token.
        cache.crop(-1)  # negative = drop that many tokens (same meaning in transformers 4.x and 5.x)
        suf = [self.tokenizer(s, add_special_tokens=False).input_ids if s else [] for s in suffixes]
        width = max(len(s) for s in suf)
        pad = self.tokenizer.pad_token_id
        last = ids[:, -1].tolist()
        seg_ids = torch.tensor([[pad] * (width - len(s)) + [t] + s for s, t in zip(suf, last)], dtype=ids.dtype,
                               device=ids.device)
        seg_mask = torch.tensor([[0] * (width - len(s)) + [1] * (len(s) + 1) for s in suf], dtype=mask.dtype,
                                device=mask.device)
        enc = {"input_ids": torch.cat([ids[:, :-1], seg_ids], 1), "attention_mask": torch.cat([mask[:, :-1], seg_mask], 1)}
        return idx, enc, cache

    def _finish(self, tokens: list[int], logprobs: list[float] | None, n_prompt: int, stop: Sequence[str]) -> Generation:
        pad = self.tokenizer.pad_token_id
        end = next((k for k, t in enumerate(tokens) if t in self._eos_ids or t == pad), len(tokens))
        text = self.tokenizer.decode(tokens[:end], skip_special_tokens=True)
        hit = [(text.find(s) + len(s)) for s in stop if s in text]
        if hit:
            cut = min(hit)
            text, reason = text[:cut], "stop"
        elif end < len(tokens) and tokens[end] in self._eos_ids:
            end, reason = end + 1, "eos"   # the EOS token was generated: it counts as decode work
        else:
            reason = "length"
        return Generation(text=text, token_ids=tokens[:end], prompt_tokens=n_prompt, finish_reason=reason,
                          logprobs=None if logprobs is None else logprobs[:end])
