"""What every LLM backend offers the agent loop (docs/architecture.md#backend).

A backend works on *rendered* prompts (chat template already applied, any response prefill already
appended), so the agent loop owns the conversation and the backend owns only tokens and compute.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from .grammar import CallConstraint


@dataclass
class Generation:
    text: str                      # decoded completion, cut after the first stop string
    token_ids: list[int]           # generated tokens (no padding, no tokens after a stop)
    prompt_tokens: int             # tokens of the rendered prompt (the whole context prefilled this turn)
    finish_reason: str             # "stop" (stop string), "eos", or "length"
    # log p(token) under the model's *raw* distribution (HF: also under a call constraint, whose mask comes after;
    # vLLM applies the grammar mask first, so constrained tokens there are renormalized over the allowed set)
    logprobs: list[float] | None = None
    cached_tokens: int = 0         # prompt tokens whose KV was kept before this call (a previous turn, a shared
                                   # prefix; vLLM: its prefix cache)

    @property
    def decode_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class PrefillState:
    """The result of a prompt prefill: the probe's features plus what generation needs to resume.

    ``hidden`` is ``[batch, len(layers), d_model]`` float32, the last prompt token at each chosen
    hidden-state index (0 = embedding output, i = output of decoder layer i).
    """

    prompts: list[str]
    layers: list[int]
    hidden: Any                    # torch.Tensor
    _resume: dict[str, Any] = field(default_factory=dict, repr=False)


#: a temperature below this samples greedily (vLLM's ``_SAMPLING_EPS``): logits divided by 1e-300 overflow to inf,
#: and the sampler then fails on inf/nan probabilities, where OpenAI and vLLM answer greedily
SAMPLING_EPS = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 0.0       # 0 (or below SAMPLING_EPS) → greedy
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self):
        if self.temperature < SAMPLING_EPS:
            object.__setattr__(self, "temperature", 0.0)


class Backend(ABC):
    """A causal LM that the agent drives."""

    model_id: str
    n_layers: int

    @property
    @abstractmethod
    def fingerprint(self) -> str:
        """Stable id of the exact weights: model id + config hash + adapter."""

    @abstractmethod
    def render(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        """Apply the model's chat template with the generation prompt appended."""

    @abstractmethod
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens (When2Tool's token_cost counts this way)."""

    @abstractmethod
    def generate(self, prompts: Sequence[str], params: SamplingParams = SamplingParams(), *,
                 prefill_state: PrefillState | None = None, return_logprobs: bool = False,
                 cache_keys: Sequence[Hashable] | None = None,
                 constraints: Sequence[CallConstraint | None] | None = None) -> list[Generation]:
        """Batched generation. With ``cache_keys`` (one per prompt, e.g. an episode id) the backend keeps
        each row's KV cache and the next call with the same key prefills only the tokens past the
        longest common prefix; :meth:`release` frees them. With ``prefill_state`` from :meth:`prefill` on the same prompts, the
        prompt's KV cache is reused so the probe read costs no second forward pass; ``prompts`` may
        then extend those prompts (a response prefill chosen from the probe's reading). ``constraints`` (one per
        prompt, None = free) hold each prompt's tool calls to its tools' schemas (``backends/grammar.py``). With
        ``cache_keys`` a prompt may be given as token ids instead of text: a generation continued exactly where it
        stopped (its prompt's tokens and the tokens it generated), which re-tokenizing the decoded text need not
        reproduce."""

    def release(self, keys: Sequence[Hashable]) -> None:
        """Forget the KV caches kept for these ``cache_keys`` (no-op for backends that keep none)."""

    @abstractmethod
    def prefill(self, prompts: Sequence[str], layers: Sequence[int] | None = None) -> PrefillState:
        """One forward pass over the prompts; returns last-token hidden states and keeps the cache."""

    def hidden_indices(self, layers: Sequence[int] | None) -> list[int]:
        """The hidden-state indices a :meth:`prefill` reads: 0 (embeddings) .. ``n_layers`` (the last decoder
        layer), all of them for None; an index outside that range is refused, naming the model."""
        layers = list(range(self.n_layers + 1)) if layers is None else [int(x) for x in layers]
        bad = [x for x in layers if not 0 <= x <= self.n_layers]
        if bad:
            raise ValueError(f"layers {bad} out of range 0..{self.n_layers} for {self.model_id}")
        return layers
