"""The probe's tap inside vLLM's compiled model: a custom op in each decoder layer, put there by a vLLM plugin.

vLLM's default engine compiles the decoder stack (torch.compile; on GPUs also CUDA graphs), and module hooks do
not run inside a compiled graph, so ``vllm_probe.py``'s hooks read nothing there. An op the graph *contains*
does run: ``toolwise::probe_tap(h, residual, src, out)`` copies the rows ``src`` names of the residual stream
``h + residual`` into ``out``, a static buffer of the layer. Inductor keeps a custom op as it is (opaque, in
graph order), and on a GPU a graph replays its copy from the same addresses each step.

* ``src`` is one static int64 buffer of ``max_num_seqs`` slots shared by the layers (a step holds at most one last
  prompt token per request). Between reads every slot is -1. During a read, the worker's pre-hook on the outer,
  uncompiled model writes the rows of this step's last prompt tokens into the first slots (``vllm_probe.py``),
  and its post-hook takes ``out`` and sets the slots back to -1.
* On a GPU the copy is branch-free, so a CUDA graph captured with it replays it correctly: every slot is
  gathered, a -1 slot from row 0 (a row every batch has), and the rows nobody asked for are never read. It moves
  ``max_num_seqs`` rows per layer per step, whether or not a read is active (about 1 MiB per layer for an 8B
  model, microseconds beside the layer's weights). On CPU nothing is captured, so the op returns at once when
  slot 0 is -1: between reads the tap costs one call per layer and copies no row.
* Layer ``l``'s input is hidden-state index ``l`` (``0``: the embeddings); the last layer also taps its output,
  the stream before the final norm, which the worker normalizes with the model's own norm weights (index
  ``n_layers``, what transformers' ``output_hidden_states`` returns last).

The patch is installed by :func:`register`, the ``vllm.general_plugins`` entry point in pyproject.toml: vLLM
calls it in every process, workers included, before it builds the model, so the op is in the graph it compiles.
``VLLM_PLUGINS`` (a comma-separated allow-list of plugin names) leaves it out: set it without ``toolwise_probe``.
The op changes the graph, so the plugin also folds :data:`TAP_VERSION` into ``CompilationConfig.compute_hash``,
the hash vLLM's compile cache is keyed by: a graph compiled without the tap is never loaded for one with it.

This module imports neither vLLM nor torch at import time: the package imports without them.
"""
from __future__ import annotations

import os

PLUGIN = "toolwise_probe"           # the entry point's name (pyproject.toml), the name VLLM_PLUGINS selects
TAP_VERSION = "toolwise::probe_tap/1"   # in the compile-cache hash; bump it when the tap's graph changes

# decoder layers whose forward(positions, hidden_states, residual) -> (hidden_states, residual) is tapped; their
# subclasses that keep that forward (Mistral's, for instance) are tapped with them
LAYERS = (("vllm.model_executor.models.llama", "LlamaDecoderLayer"),
          ("vllm.model_executor.models.qwen2", "Qwen2DecoderLayer"))

_state: dict = {"registered": False}


def plugin_enabled() -> bool:
    """Whether vLLM will load this plugin in a new engine: the entry point is installed and VLLM_PLUGINS allows it."""
    from importlib.metadata import entry_points

    if not any(ep.name == PLUGIN for ep in entry_points(group="vllm.general_plugins")):
        return False
    allowed = os.environ.get("VLLM_PLUGINS")
    return allowed is None or PLUGIN in [x.strip() for x in allowed.split(",")]


def _define_op() -> None:
    import torch

    lib = torch.library.Library("toolwise", "DEF")
    lib.define("probe_tap(Tensor h, Tensor? residual, Tensor src, Tensor(a!) out) -> ()")

    def tap(h, residual, src, out):
        if h.device.type == "cpu":
            # no graph replays this call: copy only the slots in use, none between reads
            n = int((src >= 0).sum()) if int(src[0]) >= 0 else 0
            if n:
                rows = src[:n]
                x = h.index_select(0, rows)
                if residual is not None:
                    x = x + residual.index_select(0, rows)
                out[:n].copy_(x)
            return
        # a CUDA graph replays this as captured: no branch on the slots' values, a -1 slot reads row 0
        rows = src.clamp(min=0)
        x = h.index_select(0, rows)
        if residual is not None:      # the same for every step of a layer: the graph captured one side of it
            x = x + residual.index_select(0, rows)
        out.copy_(x)

    lib.impl("probe_tap", tap, "CompositeExplicitAutograd")

    @torch.library.register_fake("toolwise::probe_tap", lib=lib)
    def _fake(h, residual, src, out):
        return None

    _state["lib"] = lib      # the Library object owns the registration: keep it for the life of the process


def _tapped_forward(forward):
    import torch

    def tapped(self, positions, hidden_states, residual):
        src = getattr(self, "toolwise_src", None)
        if src is None:                       # a layer built before the patch (or outside vLLM's model init)
            return forward(self, positions, hidden_states, residual)
        torch.ops.toolwise.probe_tap(hidden_states, residual, src, self.toolwise_in)
        hidden_states, residual = forward(self, positions, hidden_states, residual)
        if self.toolwise_out is not None:     # the last layer: the stream the final norm takes
            torch.ops.toolwise.probe_tap(hidden_states, residual, src, self.toolwise_out)
        return hidden_states, residual

    tapped.__wrapped__ = forward
    tapped.toolwise_tapped = True
    return tapped


def _tapped_init(init):
    import torch

    def tapped(self, *args, **kwargs):
        init(self, *args, **kwargs)
        from vllm.config import get_current_vllm_config_or_none
        from vllm.model_executor.models.utils import extract_layer_index

        cfg = get_current_vllm_config_or_none()
        prefix = kwargs.get("prefix", args[1] if len(args) > 1 else "")
        prefix = prefix if isinstance(prefix, str) else ""       # an architecture that passes it otherwise
        if cfg is None or cfg.model_config is None or not prefix:
            return
        if not getattr(type(self).forward, "toolwise_tapped", False):
            return      # a subclass with a forward of its own: no tap runs, so no buffers claim one does
        text = cfg.model_config.hf_text_config
        slots, d = int(cfg.scheduler_config.max_num_seqs), int(text.hidden_size)
        try:
            index = extract_layer_index(prefix)
        except (AssertionError, ValueError):      # a layer built outside a numbered stack: not the probe's
            return
        # one slot buffer for the whole stack (its layers are built one after another under the same config);
        # the default device is the one vLLM builds the model on
        owner, src = _state.get("src", (None, None))
        if owner is not cfg:
            src = torch.full((slots,), -1, dtype=torch.long)
            _state["src"] = (cfg, src)
        dtype = cfg.model_config.dtype
        # buffers, not plain attributes: the compiled graph takes them as inputs (same storage every step)
        self.register_buffer("toolwise_src", src, persistent=False)
        self.register_buffer("toolwise_in", torch.zeros(slots, d, dtype=dtype), persistent=False)
        last = index == text.num_hidden_layers - 1
        self.register_buffer("toolwise_out", torch.zeros(slots, d, dtype=dtype) if last else None, persistent=False)
        self.toolwise_index = index

    tapped.__wrapped__ = init
    return tapped


def _fold_into_compile_hash() -> None:
    from vllm.config.compilation import CompilationConfig

    compute_hash = CompilationConfig.compute_hash
    if getattr(compute_hash, "toolwise_tap", False):
        return

    def with_tap(self) -> str:
        from vllm.config.utils import hash_factors

        return hash_factors({"compilation_config": compute_hash(self), "tap": TAP_VERSION})

    with_tap.toolwise_tap = True
    with_tap.__wrapped__ = compute_hash
    CompilationConfig.compute_hash = with_tap


def register() -> None:
    """The ``vllm.general_plugins`` entry point: define the op, tap the supported layers, key the cache on it.
    vLLM may call it more than once per process; the second call changes nothing."""
    if _state["registered"]:
        return
    import importlib

    _define_op()
    for module, name in LAYERS:
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):     # a vLLM without this architecture: nothing to tap
            continue
        cls.__init__ = _tapped_init(cls.__init__)
        cls.forward = _tapped_forward(cls.forward)
    _fold_into_compile_hash()
    _state["registered"] = True


def tapped_layers(decoder) -> list:
    """The decoder's tapped layers (those that hold the tap's buffers), in stack order."""
    return [layer for layer in getattr(decoder, "layers", []) if getattr(layer, "toolwise_src", None) is not None]
