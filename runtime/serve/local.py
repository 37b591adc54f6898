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
the policy's own call or boxed answer, stays part of that call or answer. A call in the text is returned as
structured ``tool_calls`` (finish_reason ``tool_calls``) and its markup is not left in ``content``, which keeps
only the text around it (None when there is none). A ``<tool_call>`` the policy opened but wrote malformed is
neither a call nor the answer: the reply is the text before it (finish_reason ``stop``), and the markup goes to
the gating layer, which returns it in ``toolwise.malformed_calls`` and counts it
(``toolwise_malformed_calls_total``); never an error. ``tool_choice``: ``none`` shows the policy no tools (and
nothing it writes is read as a call); ``required`` forces the opening of a call, a named function the opening of
that function's call up to its arguments (the hard "use" prefill, extended), so the policy writes the rest.

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
from data_builders.agent.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolCall, parse_tool_call
from data_builders.backends.base import SamplingParams
from data_builders.environments.base import serialize
from runtime.controller_hooks import prefill_text
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


def forced_call_prefix(tool_choice: Any, call_format: str) -> str:
    """The forced opening of the policy's turn for a ``tool_choice`` that decides the call: "required" opens a call
    (the hard "use" prefill), a named function opens that function's call up to its arguments; "" otherwise."""
    if tool_choice == "required":
        return prefill_text("use", "hard", call_format)
    if isinstance(tool_choice, dict):
        text = P.tool_call_text(tool_choice["function"]["name"], {}, call_format)
        return text[:text.rindex("{}")]      # ... "arguments": | "parameters":  — the policy writes the rest
    return ""


def split_call(text: str, call: ToolCall | None) -> tuple[str, str]:
    """``(content, markup)`` of a turn's text: the call's markup (the ``<tool_call>`` block, or the JSON the lenient
    parser read as the call) apart from the text around it. With no parsed call, an opened ``<tool_call>`` is
    markup nobody could parse (a malformed call); text without either is all content."""
    tag = text.find(TOOL_CALL_OPEN)
    if tag >= 0:
        end = text.find(TOOL_CALL_CLOSE, tag)
        end = len(text) if end < 0 else end + len(TOOL_CALL_CLOSE)
        return (text[:tag] + text[end:]).strip(), text[tag:end]
    if call is not None and call.raw and call.raw in text:
        start = text.index(call.raw)
        before, after = text[:start], text[start + len(call.raw):]
        for fence in ("```json", "```"):        # the fences the parser looks through
            before, after = before.replace(fence, ""), after.replace(fence, "")
        return (before + after).strip(), call.raw
    return ("", text) if call is not None else (text, "")


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
        choice_of_tool = payload.get("tool_choice")
        try:
            view = episode_from_openai(messages, tools, call_format=self.call_format).view
            # tool_choice "none": the policy is shown no tools and nothing it writes is a call
            offered = [] if choice_of_tool == "none" else check_tools(tools)
        except ValueError as e:
            raise APIError(400, f"messages: {e}", code="invalid_messages", param="messages") from e
        params = self._params(payload)
        prompt, state, prefill, shown = first_turn(self.backend) if first_turn is not None else ("", None, "", True)
        if not prompt:
            prompt = self.backend.render(P.template_messages(view.messages), offered)
        if not prefill and offered:     # "required" / a named function: the call is opened for the policy
            prefill = forced_call_prefix(choice_of_tool, self.call_format)
        gen = self.backend.generate([prompt + prefill], params, prefill_state=state,
                                    return_logprobs=bool(payload.get("logprobs")))[0]
        raw = prefill + gen.text            # the turn the policy wrote, as the loop reads it
        call = parse_tool_call(raw) if offered else None
        # the reply is the text around the call, never its markup (that is what tool_calls carries); an opened call
        # nobody could parse is not returned as the answer either: the gating layer records it
        content, markup = split_call(raw if shown else gen.text, call) if offered else (gen.text, "")
        message: dict[str, Any] = {"role": "assistant", "content": content or (None if call is not None else "")}
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
        if call is None and markup:
            body["toolwise"] = {"malformed_call": markup}     # read (and removed) by the gating layer
        return body

    def _token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""
