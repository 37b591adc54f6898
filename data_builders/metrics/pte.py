"""PTE — Prefill Token Equivalents (Su et al., arXiv 2604.05404): one hardware-aware cost per trajectory.

Why not count tokens: a prefill token is compute-bound (≈ 2·N FLOPs) while a decoded token is memory-bound and
must re-read the whole KV cache, so its cost grows with the context. PTE prices decode in prefill tokens:

    PTE = Σ_turns ( D_prefill_i + γ · L_seq_i · D_decode_i )
    γ   = 2 · n_layers · d_model · HOI / N_params   × (n_kv_heads / n_q_heads under GQA)

γ is the KV-cache bytes one decoded token reads per context token (4·n_layers·d_kv at 2 bytes/value), turned
into FLOPs by the hardware's operational intensity HOI (peak FLOP/s ÷ bandwidth, ``data_builders.metrics.hardware``),
divided by the 2·N FLOPs of one prefill token. It is a property of a (model, hardware) pair.

Per turn, in the fields of the agent loop's typed turns (``data_builders/agent/trajectory.py``, ``Trajectory.turns``):

* ``D_prefill_i`` = ``prefill_tokens``: the whole context at turn i — the paper assumes the tool call's pause
  evicts the KV cache, so every turn re-prefills everything. ``cache_reuse=True`` uses ``new_tokens`` (context
  not present at the end of the previous turn) instead: the variant for a server that keeps the cache.
* ``L_seq_i`` = ``context_len``: the paper's "cumulative sequence length before the decode phase begins in
  turn i", i.e. the prompt length of the turn (the loop writes the same number as ``prefill_tokens``). Like the
  paper, the growth of the context *during* the turn's decode is not counted.
* ``D_decode_i`` = ``decode_tokens``: tokens generated in turn i.

N_params. The paper's Table 3 column is the model card's "active"/"non-embedding" count where the vendor gives
one (Qwen2.5-7B: 6.53B non-embedding, Qwen3, MoE active counts) and the total otherwise (Llama-3.1-8B: 8.0B,
its footnote 2). ``param_count`` computes both from a config; γ defaults to ``params="non_embedding"`` — the
FLOPs of a prefill token are in the transformer blocks: the input embedding is a lookup, and engines compute
lm_head logits for the last prompt position only (Kaplan et al.'s C ≈ 2N, which the paper cites, is
non-embedding too). The paper's printed γ also rounds the GQA-free γ to 3 decimals before applying the head
ratio; ``paper_rounding=True`` reproduces that arithmetic exactly (tests/data_builders/metrics/test_pte.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Iterable, Mapping

from data_builders.agent.trajectory import Trajectory, TrajectoryError, Turn
from data_builders.metrics.hardware import DEFAULT_HARDWARE, PROFILES, HardwareProfile, get_profile

__all__ = [
    "DEFAULT_HARDWARE", "PROFILES", "HardwareProfile", "get_profile",
    "gamma", "param_count", "gamma_from_config", "gamma_for_backend", "config_of",
    "turn_cost", "pte_per_turn", "pte", "trajectory_pte", "PTEConfig",
]

PARAM_CONVENTIONS = ("non_embedding", "total")
# Layouts whose weights param_count knows exactly (a config without model_type is assumed to be one of them).
KNOWN_LAYOUTS = ("llama", "mistral", "qwen2", "qwen3")
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


# ---------------------------------------------------------------------------------------------------- γ
def _hoi(hoi: float | str | HardwareProfile | Mapping) -> float:
    if isinstance(hoi, (int, float)) and not isinstance(hoi, bool):
        value = float(hoi)
    else:
        value = get_profile(hoi).hoi
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"HOI must be a positive number of FLOP/byte, got {hoi!r}")
    return value


def gamma(n_layers: int, d_model: int, n_params: float, hoi: float | str | HardwareProfile,
          n_kv_heads: int | None = None, n_q_heads: int | None = None, *, paper_rounding: bool = False) -> float:
    """γ = 2·n_layers·d_model·HOI / N_params, times n_kv_heads/n_q_heads under GQA.

    ``hoi`` is FLOP/byte or a hardware profile (name or object). ``paper_rounding`` rounds the GQA-free value
    to 3 decimals before the head ratio and the result to 5, which is how the paper's Table 3 was computed
    (e.g. Qwen2.5-7B: 0.02327 → 0.023, × 1/7 → 0.00329); use it only to compare with the paper.
    """
    for key, value in (("n_layers", n_layers), ("d_model", d_model), ("n_params", n_params)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"gamma: {key} must be positive, got {value!r}")
    if (n_kv_heads is None) != (n_q_heads is None):
        raise ValueError("gamma: give both n_kv_heads and n_q_heads (GQA) or neither (multi-head attention)")
    if n_q_heads is not None and not (0 < n_kv_heads <= n_q_heads):
        raise ValueError(f"gamma: need 0 < n_kv_heads <= n_q_heads, got {n_kv_heads} / {n_q_heads}")
    base = 2 * n_layers * d_model * _hoi(hoi) / n_params
    kv, q = (n_kv_heads, n_q_heads) if n_q_heads is not None else (1, 1)
    if not paper_rounding:
        return base * kv / q
    # Decimal so that the paper's half-up rounding of printed values (e.g. 0.001625 → 0.00163) is exact.
    rounded = Decimal(repr(base)).quantize(Decimal("0.001"), ROUND_HALF_UP) * kv / q
    return float(rounded.quantize(Decimal("0.00001"), ROUND_HALF_UP))


# ---------------------------------------------------------------------------------------------------- configs
_MISSING = object()


def _text_config(config: Any) -> Any:
    """The language-model part of a config (multimodal configs nest it under ``text_config``)."""
    if isinstance(config, Mapping):
        return config.get("text_config") or config
    if callable(getattr(config, "get_text_config", None)):
        return config.get_text_config()
    return config


def _get(config: Any, key: str, default: Any = _MISSING) -> Any:
    if isinstance(config, Mapping):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    if value is _MISSING:
        raise KeyError(f"model config has no {key!r} (needed for PTE's γ / parameter count)")
    return value


def _check_config(config: Any) -> Any:
    if config is None:
        raise TypeError("no model config: pass a transformers config (AutoConfig / model.config) or a "
                        "config.json dict")
    if not isinstance(config, Mapping) and not hasattr(config, "num_hidden_layers"):
        raise TypeError(f"expected a transformers config (AutoConfig / model.config) or a config.json dict, "
                        f"got {type(config).__name__} without num_hidden_layers")
    return _text_config(config)


def _heads(config: Any) -> tuple[int, int, int]:
    n_q = int(_get(config, "num_attention_heads"))
    n_kv = _get(config, "num_key_value_heads", None)
    n_kv = n_q if n_kv is None else int(n_kv)          # transformers' convention: absent = multi-head attention
    head_dim = _get(config, "head_dim", None)
    head_dim = int(head_dim) if head_dim else int(_get(config, "hidden_size")) // n_q
    return n_q, n_kv, head_dim


def _unsupported(config: Any) -> str | None:
    if _get(config, "kv_lora_rank", None):
        return "multi-head latent attention (MLA: the paper replaces d_model by d_latent + d_rope)"
    for key in _MOE_KEYS:
        experts = _get(config, key, None)
        if isinstance(experts, int) and experts > 1:
            return f"mixture of experts ({key}={experts}: γ needs the *active* parameter count)"
    return None


def param_count(config: Any, *, embeddings: bool = True) -> int:
    """Parameters of a dense decoder-only LM, from its config alone (no weights loaded).

    Counts token embeddings (+ the lm_head when not tied), per layer the q/k/v/o projections (GQA widths from
    ``head_dim``), the gated MLP (gate/up/down at ``intermediate_size``), the two RMSNorms, and the final norm;
    biases where the architecture has them (Qwen2: q/k/v; ``attention_bias`` / ``mlp_bias`` flags; Qwen3's
    q/k norms). ``embeddings=False`` leaves out the embedding and lm_head matrices: the "non-embedding" count.
    Layouts outside ``KNOWN_LAYOUTS``, MoE and MLA models raise: give their (active) count yourself.
    """
    config = _check_config(config)
    model_type = _get(config, "model_type", None)
    if model_type is not None and model_type not in KNOWN_LAYOUTS:
        raise NotImplementedError(f"param_count knows the {', '.join(KNOWN_LAYOUTS)} layouts, not "
                                  f"{model_type!r}; pass n_params explicitly")
    why = _unsupported(config)
    if why:
        raise NotImplementedError(f"param_count does not handle {why}; pass n_params explicitly")

    d, inter = int(_get(config, "hidden_size")), int(_get(config, "intermediate_size"))
    n_layers, vocab = int(_get(config, "num_hidden_layers")), int(_get(config, "vocab_size"))
    n_q, n_kv, head_dim = _heads(config)
    q_dim, kv_dim = n_q * head_dim, n_kv * head_dim

    attn = d * q_dim + 2 * d * kv_dim + q_dim * d
    if model_type == "qwen2":                               # Qwen2 hard-codes q/k/v biases, none on o_proj
        attn += q_dim + 2 * kv_dim
    elif _get(config, "attention_bias", False):
        attn += q_dim + 2 * kv_dim + d
    if model_type == "qwen3":                               # per-head RMSNorm on queries and keys
        attn += 2 * head_dim
    mlp = 3 * d * inter + (2 * inter + d if _get(config, "mlp_bias", False) else 0)
    blocks = n_layers * (attn + mlp + 2 * d) + d            # + input/post-attention norms, + final norm
    if not embeddings:
        return blocks
    # transformers' own default when the key is absent (PretrainedConfig ties; Llama/Qwen configs set it).
    tied = bool(_get(config, "tie_word_embeddings", True))
    return blocks + vocab * d * (1 if tied else 2)


def gamma_from_config(config: Any, hoi: float | str | HardwareProfile = DEFAULT_HARDWARE, *,
                      params: str = "non_embedding", n_params: float | None = None,
                      paper_rounding: bool = False) -> float:
    """γ for a model given its transformers config (``AutoConfig``, ``model.config``) or config.json dict.

    Reads num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads; N_params is
    ``param_count(config)`` under ``params`` ("non_embedding", default, or "total") unless ``n_params`` is
    given (MoE: the active count). Note the paper's formula uses d_model·n_kv/n_q as the KV width, which is
    the true width n_kv·head_dim only when n_q·head_dim = d_model (true for Llama, Qwen2.5, SmolLM2; not for
    e.g. Qwen3-32B, whose γ the paper also computed this way).
    """
    config = _check_config(config)
    if params not in PARAM_CONVENTIONS:
        raise ValueError(f"params must be one of {PARAM_CONVENTIONS}, got {params!r}")
    if _get(config, "kv_lora_rank", None):
        raise NotImplementedError("γ for multi-head latent attention (MLA) is not implemented: call gamma() "
                                  "with d_model = kv_lora_rank + qk_rope_head_dim and no head ratio")
    if n_params is None:
        n_params = param_count(config, embeddings=(params == "total"))
    n_q, n_kv, _ = _heads(config)
    return gamma(int(_get(config, "num_hidden_layers")), int(_get(config, "hidden_size")), n_params, hoi,
                 n_kv, n_q, paper_rounding=paper_rounding)


def config_of(backend_or_config: Any) -> Any:
    """The model config behind a backend (``.config`` on every toolwise backend, else ``.model.config``), or
    the argument itself when it already is a config (dict or transformers config)."""
    obj = backend_or_config
    if isinstance(obj, Mapping) or hasattr(obj, "num_hidden_layers"):
        return obj
    config = getattr(obj, "config", None)
    if config is None:
        config = getattr(getattr(obj, "model", None), "config", None)
    if config is None:
        raise TypeError(
            f"{type(obj).__name__} exposes no model config (an OpenAI-compatible server without a local "
            f"tokenizer/config has none): pass the model's config.json dict or AutoConfig, or a fixed gamma")
    return config


def gamma_for_backend(backend: Any, hardware: str | HardwareProfile | Mapping = DEFAULT_HARDWARE, *,
                      params: str = "non_embedding", n_params: float | None = None) -> float:
    """γ for the model a backend serves, on a hardware profile (name, profile or composed Hydra node)."""
    return gamma_from_config(config_of(backend), get_profile(hardware), params=params, n_params=n_params)


# ---------------------------------------------------------------------------------------------------- PTE
def _check_gamma(g: float) -> float:
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0:
        raise ValueError(f"gamma must be a non-negative number, got {g!r}")
    return float(g)


def turn_cost(turn: Turn, gamma: float, *, cache_reuse: bool = False, index: int = 0) -> tuple[float, float]:
    """(prefill, decode) PTE of one turn: ``prefill_tokens`` (or ``new_tokens``) and
    γ·``context_len``·``decode_tokens``. ``index`` only names the turn in errors. The token counts were
    checked by the trajectory's validator; ``new_tokens`` is the one a record may lack (files written before
    the loop recorded it), so cache-reuse PTE refuses such a turn."""
    prefill = turn.new_tokens if cache_reuse else turn.prefill_tokens
    if prefill is None:
        raise TrajectoryError(None, f"turns[{index}].new_tokens", "not recorded, and cache-reuse PTE needs it")
    decode = _check_gamma(gamma) * turn.context_len * turn.decode_tokens
    return float(prefill), decode


def pte_per_turn(turns: Iterable[Turn], gamma: float, *, cache_reuse: bool = False) -> list[float]:
    """Each turn's PTE (the paper's per-step figure, Fig. 5)."""
    return [sum(turn_cost(t, gamma, cache_reuse=cache_reuse, index=i)) for i, t in enumerate(turns)]


def pte(turns: Iterable[Turn], gamma: float, *, cache_reuse: bool = False) -> float:
    """Σ_turns (prefill_i + γ · context_len_i · decode_i); prefill_i is the whole context (``prefill_tokens``,
    full KV eviction as in the paper) or, with ``cache_reuse``, the tokens new since the last turn."""
    return float(sum(pte_per_turn(turns, gamma, cache_reuse=cache_reuse)))


def trajectory_pte(trajectory: Trajectory, gamma: float, *, cache_reuse: bool = False) -> float:
    """PTE of one trajectory (one line of ``trajectories.jsonl``: its ``turns``). A trajectory with no turns
    (e.g. the prompt exceeded the context before any generation) costs 0."""
    try:
        return pte(trajectory.turns, gamma, cache_reuse=cache_reuse)
    except TrajectoryError as e:
        raise TrajectoryError(trajectory.task_id, e.field, e.problem) from None


@dataclass(frozen=True)
class PTEConfig:
    """How an evaluation or a reward prices trajectories: the hardware profile (a name, a profile, or the
    composed ``hardware`` Hydra node), the parameter convention, the eviction mode, or a fixed γ (for a model
    whose config is not available, e.g. behind an API)."""

    hardware: Any = DEFAULT_HARDWARE
    params: str = "non_embedding"
    cache_reuse: bool = False
    gamma: float | None = None

    @property
    def profile(self) -> HardwareProfile:
        return get_profile(self.hardware)

    def gamma_for(self, backend_or_config: Any = None) -> float:
        if self.gamma is not None:
            return _check_gamma(self.gamma)
        if backend_or_config is None:
            raise TypeError("PTEConfig without a fixed gamma needs a backend or model config")
        return gamma_from_config(config_of(backend_or_config), self.profile, params=self.params)

    def trajectory_pte(self, trajectory: Trajectory, gamma: float) -> float:
        return trajectory_pte(trajectory, gamma, cache_reuse=self.cache_reuse)
