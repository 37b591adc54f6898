"""OpenAI-compatible client backend: drive the agent with a model served elsewhere (a vLLM server, or any
server with the Completions API).

    python -m data_builders.rollout backend=openai backend.base_url=http://127.0.0.1:8000/v1 model=smollm2_base

The agent renders prompts itself (chat template + tool listing, as with every backend), so this backend
sends rendered prompts to ``/v1/completions`` and counts tokens with the local tokenizer of the named
model: trajectories are comparable with the HF and vLLM backends token for token. A server gives no
hidden states, so the probe (Probe&Prefill) cannot run here; ToolGate, G-STEP and the prompt baselines can.

With ``vllm_extras`` (default; vLLM servers) prompts go in as token ids, the stop string is kept in the
output, and vLLM returns the generated token ids and which stop ended the turn. Other servers get text
prompts and no server-side stop (they drop the stop string and do not say whether EOS or a stop string
ended generation); the stop string is then cut here, at the cost of decoding past it.

Call constraints (``agent.constrained_calls``) need a vLLM server: prompts are sent grouped by structural tag,
each group with the request field ``structured_outputs: {"structural_tag": ...}`` (vLLM masks before it computes
log-probs: see ``vllm_backend.py``). Other servers (``vllm_extras: false``) get a clear error, not free decoding.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

from transformers import AutoConfig, AutoTokenizer

from .. import progress
from .base import Backend, Generation, PrefillState, SamplingParams
from .chat import ChatText
from .grammar import CallConstraint

OPENAI_INSTALL_HINT = "The OpenAI-compatible backend needs the openai client: pip install '.[openai]'"


class NoHiddenStates(RuntimeError):
    pass


class OpenAIBackend(ChatText, Backend):
    name = "openai"
    n_layers = 0

    def __init__(self, *, base_url: str, tokenizer: str, model: str | None = None, api_key: str = "EMPTY",
                 max_concurrency: int = 32, timeout_s: float = 600, vllm_extras: bool = True, client=None):
        if client is None:
            try:
                import openai   # why: optional extra (.[openai]); tests pass a client and need none
            except ImportError as e:
                raise ImportError(OPENAI_INSTALL_HINT) from e
            client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=2)
        self.client = client
        self.base_url = base_url
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        try:
            self._config = AutoConfig.from_pretrained(tokenizer)
        except (OSError, ValueError):
            self._config = None
        self.served_model = model or self._first_served_model()
        self.model_id = self.served_model
        self.max_concurrency = max_concurrency
        self.vllm_extras = vllm_extras

    def _first_served_model(self) -> str:
        models = list(self.client.models.list())
        if not models:
            raise RuntimeError(f"{self.base_url} serves no models (GET /models returned none)")
        return models[0].id

    @property
    def fingerprint(self) -> str:
        # The server's weights cannot be hashed from here: the id names the served model and where.
        return f"openai:{self.served_model}@{self.base_url}"

    @property
    def config(self):
        return self._config

    def prefill(self, prompts: Sequence[str], layers: Sequence[int] | None = None) -> PrefillState:
        raise NoHiddenStates("the OpenAI-compatible backend exposes no hidden states, so the probe "
                             "(Probe&Prefill) cannot run on it; use backend=hf or backend=vllm")

    # ---------------------------------------------------------------- generation
    def _request(self, prompts: list[str], ids: list[list[int]], params: SamplingParams, return_logprobs: bool,
                 structural_tag: str | None = None):
        kw: dict[str, Any] = dict(model=self.served_model, max_tokens=params.max_new_tokens,
                                  temperature=params.temperature, top_p=params.top_p if params.temperature > 0 else 1.0)
        if params.seed is not None and params.temperature > 0:
            kw["seed"] = params.seed
        if return_logprobs:
            kw["logprobs"] = 0 if self.vllm_extras else 1
        if self.vllm_extras:
            extra: dict[str, Any] = {"include_stop_str_in_output": True, "return_token_ids": True,
                                     "skip_special_tokens": True}
            if params.temperature > 0 and params.top_k:
                extra["top_k"] = params.top_k
            if structural_tag is not None:
                extra["structured_outputs"] = {"structural_tag": structural_tag}
            kw.update(prompt=ids, stop=list(params.stop) or None, extra_body=extra)
        else:
            kw.update(prompt=prompts)
        resp = self.client.completions.create(**kw)
        return sorted(resp.choices, key=lambda c: c.index)

    @progress.generation
    def generate(self, prompts: Sequence[str], params: SamplingParams = SamplingParams(), *,
                 prefill_state: PrefillState | None = None, return_logprobs: bool = False,
                 cache_keys: Sequence[Hashable] | None = None,
                 constraints: Sequence[CallConstraint | None] | None = None) -> list[Generation]:
        if prefill_state is not None:
            raise NoHiddenStates("prefill_state given to the OpenAI-compatible backend, which has no prefill")
        prompts = list(prompts)
        if constraints is not None and len(constraints) != len(prompts):
            raise ValueError("constraints must give one entry (a CallConstraint or None) per prompt")
        groups: dict[str | None, list[int]] = {}   # one structured-outputs request per structural tag
        for i, c in enumerate(constraints or [None] * len(prompts)):
            groups.setdefault(None if c is None else c.key(), []).append(i)
        if not self.vllm_extras and any(k is not None for k in groups):
            raise ValueError(f"agent.constrained_calls on {self.base_url}: constrained decoding is sent as vLLM's "
                             "`structured_outputs` request field, which needs a vLLM server (backend.vllm_extras=true)")
        ids = [self.tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
        out: list[Generation | None] = [None] * len(prompts)
        for tag, rows in groups.items():
            for s in range(0, len(rows), self.max_concurrency):
                part = rows[s:s + self.max_concurrency]
                choices = self._request([prompts[i] for i in part], [ids[i] for i in part], params, return_logprobs,
                                        tag)
                if len(choices) != len(part):
                    raise RuntimeError(f"{self.base_url} returned {len(choices)} completions for {len(part)} prompts")
                for i, c in zip(part, choices):
                    out[i] = self._generation(c, len(ids[i]), params)
        return out  # type: ignore[return-value]

    def _generation(self, choice, n_prompt: int, params: SamplingParams) -> Generation:
        d = choice.model_dump() if hasattr(choice, "model_dump") else dict(choice)
        text = d.get("text") or ""
        lp = (d.get("logprobs") or {}).get("token_logprobs")
        token_ids = d.get("token_ids")
        if self.vllm_extras:
            if d.get("finish_reason") == "length":
                reason = "length"
            else:
                reason = "stop" if isinstance(d.get("stop_reason"), str) else "eos"
        else:
            hits = [text.find(s) + len(s) for s in params.stop if s in text]
            if hits:
                text, reason = text[:min(hits)], "stop"
                token_ids = None   # cut here: recount the kept text
            else:
                reason = "length" if d.get("finish_reason") == "length" else "eos"
        if token_ids is None:
            token_ids = self.tokenizer(text, add_special_tokens=False).input_ids
        token_ids = list(token_ids)
        logprobs = None if lp is None else [float(x) for x in lp[:len(token_ids)]]
        return Generation(text=text, token_ids=token_ids, prompt_tokens=n_prompt, finish_reason=reason,
                          logprobs=logprobs)
