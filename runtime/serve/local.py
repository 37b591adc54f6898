"""``upstream=local``: toolwise's own backend in this process, answering chat completions as an upstream would.

It exists for Probe&Prefill: the probe decides from the policy's hidden states of the first prompt, which no
OpenAI-compatible server returns. On a conversation's first turn with ``gates.probe_prefill`` set, the gating layer
hands :meth:`LocalUpstream.chat` its probe step (:meth:`~.gating.Gater.first_turn`): called here with the backend,
it prefills the prompt once (:meth:`Gates.probe_first_prompt`), decides, and returns the prompt, the prefill state
and the response prefill, and generation resumes from that state, exactly as toolwise's agent loop does; later
turns are plain generations. The messages become the loop's prompt through the runtime API's converter
(:mod:`runtime.messages`), so the policy sees what it sees inside toolwise. The returned assistant
content is the text the policy generated: a soft prefill (a sentence that steers the generation) is not part of
the reply and never appears in it (the probe's decision record names it); a hard prefill, the forced opening of
the policy's own call or boxed answer, stays part of that call or answer. A call in the text is also returned
as structured ``tool_calls``; a call the model wrote malformed stays text (the gating layer counts it in
``toolwise_malformed_calls_total``), never an error.

One generation at a time (the backend is not thread-safe, and on CPU torch uses every core); for throughput put
a vLLM server behind ``upstream=http`` — ToolGate and G-STEP work there."""
from __future__ import annotations

import time
import uuid
from functools import partial
from typing import Any, Callable

from anyio import CapacityLimiter, to_thread
from pydantic import ValidationError

from data_builders.agent import prompts as P
from data_builders.agent.parsing import parse_tool_call
from data_builders.backends.base import SamplingParams
from data_builders.environments.base import serialize
from runtime.messages import check_tools, episode_from_openai

from .protocol import APIError, ChatResponse, validation_error

CALL_STOP = "</tool_call>"     # the loop's stop string: one call per turn


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise APIError(400, "stop: expected a string or a list of strings", code="invalid_request", param="stop")


#: the gating layer's Probe&Prefill step: ``first_turn(backend) -> (prompt, prefill state, response prefill, shown)``;
#: an empty prompt: render it here (the probe failed), generate without a state; ``shown``: the prefill is part of
#: the policy's reply (a hard prefix opening its call or answer), else it only steers and the message leaves it out
FirstTurn = Callable[[Any], tuple[str, Any, str, bool]]


class LocalUpstream:
    local = True        # the policy runs here: the gating layer can probe its first turns (never an HTTP upstream's)

    def __init__(self, backend: Any, *, call_format: str = "xml", models: list[str] | None = None,
                 max_tokens: int = 256, temperature: float = 0.0):
        self.backend, self.call_format = backend, call_format
        self.served = list(models or [backend.model_id])
        self.max_tokens, self.temperature = max_tokens, temperature
        self.base_url = f"local:{backend.fingerprint}"
        self.limiter = CapacityLimiter(1)
        self.tokenizer = getattr(backend, "tokenizer", None)

    @classmethod
    def from_config(cls, cfg: Any) -> "LocalUpstream":
        # why here: loading a policy needs transformers (and vLLM for backend=vllm); upstream=http needs neither
        from data_builders.backends.loading import backend_from_config
        from runtime.messages import call_format_of

        backend = backend_from_config(cfg.model, cfg.backend)
        return cls(backend, call_format=call_format_of(backend.fingerprint),
                   models=list(cfg.upstream.models) if cfg.upstream.models else None,
                   max_tokens=cfg.upstream.max_tokens, temperature=cfg.upstream.temperature)

    async def models(self) -> list[str]:
        return list(self.served)

    async def aclose(self) -> None:
        return None

    async def chat(self, payload: dict, first_turn: FirstTurn | None = None) -> tuple[dict, float]:
        """The chat completion for ``payload`` and its latency in seconds; ``first_turn``: the gating layer's probe
        step, run in the same worker right before generating (the backend serves one call at a time)."""
        start = time.perf_counter()
        body = await to_thread.run_sync(partial(self._complete, payload, first_turn), limiter=self.limiter)
        try:
            ChatResponse.model_validate(body)
        except ValidationError as e:       # our own bug, but the client gets an answer that says so
            raise validation_error(e, "local upstream built an invalid chat completion", 502, "upstream_garbage")
        return body, time.perf_counter() - start

    # ------------------------------------------------------------------------------------------ in a worker
    def _params(self, payload: dict) -> SamplingParams:
        budget = payload.get("max_completion_tokens") or payload.get("max_tokens") or self.max_tokens
        temperature = payload.get("temperature")
        temperature = self.temperature if temperature is None else float(temperature)
        seed = payload.get("seed")
        return SamplingParams(max_new_tokens=int(budget), temperature=temperature,
                              top_p=float(payload.get("top_p") or 1.0), stop=(CALL_STOP, *_stops(payload.get("stop"))),
                              seed=int(seed) if isinstance(seed, int) else None)

    def _complete(self, payload: dict, first_turn: FirstTurn | None) -> dict:
        messages, tools = payload["messages"], payload.get("tools") or []
        try:
            view = episode_from_openai(messages, tools, call_format=self.call_format).view
            tool_specs = check_tools(tools)
        except ValueError as e:
            raise APIError(400, f"messages: {e}", code="invalid_messages", param="messages") from e
        params = self._params(payload)
        prompt, state, prefill, shown = first_turn(self.backend) if first_turn is not None else ("", None, "", True)
        if not prompt:
            prompt = self.backend.render(P.template_messages(view.messages), tool_specs)
        gen = self.backend.generate([prompt + prefill], params, prefill_state=state,
                                    return_logprobs=bool(payload.get("logprobs")))[0]
        raw = prefill + gen.text            # the turn the policy wrote, as the loop reads it
        call = parse_tool_call(raw)
        message: dict[str, Any] = {"role": "assistant", "content": raw if shown else gen.text}
        if call is not None:
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                      "function": {"name": call.name, "arguments": serialize(call.arguments)}}]
        finish = "tool_calls" if call is not None else ("length" if gen.finish_reason == "length" else "stop")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if payload.get("logprobs") and gen.logprobs is not None:
            choice["logprobs"] = {"content": [{"token": self._token(t), "logprob": lp, "bytes": None,
                                               "top_logprobs": []} for t, lp in zip(gen.token_ids, gen.logprobs)]}
        body = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": payload.get("model", self.served[0]), "choices": [choice],
                "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": gen.decode_tokens,
                          "total_tokens": gen.prompt_tokens + gen.decode_tokens}}
        return body

    def _token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""
