"""toolwise's gates as a LiteLLM proxy guardrail, for agents that already go through a LiteLLM proxy
(``pip install -e ".[litellm]"``; docs/guide.md, "LiteLLM guardrail")::

    guardrails:
      - guardrail_name: toolwise
        litellm_params:
          guardrail: runtime.litellm_guardrail.ToolwiseGuardrail
          mode: post_call
          default_on: true
          toolgate: checkpoints/toolgate/<run>     # either or both; the gates' own options below
          g_step: checkpoints/g_step/<run>

A post-call guardrail: once the model's turn is back, ToolGate decides on each proposed ``tool_calls`` entry and
G-STEP on an answer, exactly as the gated endpoint does (the same :class:`~runtime.serve.gating.Gater`: a skip
re-asks the model with the skipped-call tool message, a *continue* adds one verification round, with the same
limits and ``on_error`` rule). Re-asks go through the proxy's own router (``llm_router.acompletion``: the same
deployment, retries and fallbacks as the client's call). The response carries ``toolwise`` (decisions, injected
messages, usage of the extra calls) and each decision is logged on the proxy's logger (``LITELLM_LOG=INFO``).

A streamed request (``stream: true``) is gated in LiteLLM's streaming-iterator hook, as LiteLLM's own streaming
guardrails do: the whole turn is buffered (the client gets its first byte only once the gating is done, re-asks
included), assembled into a completion (``litellm.main.stream_chunk_builder``, plus the token log-probs G-STEP
reads), gated as above (re-asks are non-streamed calls through the router), and the resulting turn is sent as
chunks: the message (role and content), its tool calls, the finish chunk, then the usage chunk if the client asked
for one (``stream_options.include_usage``). The last chunk carries ``toolwise`` (and the request's summed ``usage``:
LiteLLM serializes a chunk's extra fields only on chunks that carry more than text). A stream that cannot be gated
(no chunks, chunks that do not assemble into a chat completion) goes to the client as it came and is logged as
ungated (``toolwise ungated call=...``); a stream that fails upstream, or a failed re-ask, fails the request with
LiteLLM's error. The post-call success hook leaves streamed requests to the streaming hook, so each request is
gated exactly once."""
from __future__ import annotations

import copy
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from litellm._logging import verbose_proxy_logger
from litellm.integrations.custom_guardrail import CustomGuardrail
from litellm.main import stream_chunk_builder
from litellm.types.guardrails import GuardrailEventHooks
from litellm.types.utils import Delta, ModelResponse, ModelResponseStream, StreamingChoices, Usage
from openai.types.chat.completion_create_params import CompletionCreateParamsBase

from data_builders.gates import gates as registered
from runtime.serve.capture import Capture, load_callable
from runtime.serve.gating import Gater, GatePolicy
from runtime.serve.metrics import Metrics

#: what of LiteLLM's request data is the OpenAI request (the rest is the proxy's metadata): what a re-ask resends
OPENAI_PARAMS = frozenset(CompletionCreateParamsBase.__annotations__) - {"stream", "stream_options"}


class _Proxied:
    """The upstream the gating layer sees inside the proxy: the first turn is the response LiteLLM already has,
    every re-ask a call through the proxy's router."""

    local = False

    def __init__(self, first: dict, model: str):
        self.first, self.base_url = first, f"litellm:{model}"

    async def chat(self, payload: dict, **_: Any) -> tuple[dict, float]:
        if self.first is not None:
            body, self.first = self.first, None
            return body, 0.0
        start = time.perf_counter()
        from litellm.proxy.proxy_server import llm_router     # the proxy's router, set once its config is loaded

        if llm_router is not None:
            response = await llm_router.acompletion(**payload)
        else:       # the guardrail used from the SDK, without a proxy
            import litellm

            response = await litellm.acompletion(**payload)
        return response.model_dump(), time.perf_counter() - start


class ToolwiseGuardrail(CustomGuardrail):
    """``<gate>: <checkpoint>`` for each gate it applies (``toolgate``, ``g_step``, or any other gate of the registry
    at ``pre_call`` / ``on_answer``: exported checkpoint dirs or hub ids), loaded by :meth:`runtime.api.Gates.load`
    with ``policy`` / ``strict`` / ``taus`` / ``support_z``; ``on_error``, ``max_reasks``, ``max_continues``,
    ``modes`` (gate -> ``enforce`` | ``shadow``): as the gated endpoint's ``gates.*``; ``capture``: its
    ``capture.*`` options as a mapping (``{dir: ..., redact: [...]}``). ``gates_factory``
    (``module:callable``) with ``gates_kwargs`` builds another gates object instead (anything with ``at`` / ``tool_call`` / ``answer``, e.g. the tests' ``runtime.serve.testing:ForcedGates``)."""

    def __init__(self, policy: str | None = None, strict: bool = True, on_error: str = GatePolicy.on_error,
                 max_reasks: int = GatePolicy.max_reasks, max_continues: int = GatePolicy.max_continues,
                 concurrency: int = GatePolicy.concurrency, taus: dict | None = None, support_z: dict | None = None,
                 modes: dict | None = None, capture: dict | None = None,
                 gates_factory: str | None = None, gates_kwargs: dict | None = None, **kwargs: Any):
        paths = {name: kwargs.pop(name) for name in list(kwargs) if name in registered()}
        kwargs.setdefault("event_hook", GuardrailEventHooks.post_call)
        super().__init__(supported_event_hooks=[GuardrailEventHooks.post_call], **kwargs)
        reads_states = [name for name, path in paths.items()
                        if path is not None and registered()[name].moment == "pre_generation"]
        if reads_states:
            raise ValueError(f"the toolwise guardrail cannot apply {reads_states}: a gate before generation reads "
                             "the policy's hidden states, which a proxied model does not return (serve it with "
                             "python -m runtime.serve upstream=local)")
        if gates_factory is not None:
            gates = load_callable(gates_factory)(**(gates_kwargs or {}))
        elif all(path is None for path in paths.values()):
            names = [n for n, g in registered().items() if g.moment != "pre_generation"]
            raise ValueError(f"the toolwise guardrail needs one or more of {names} (exported checkpoint dirs), or "
                             "gates_factory")
        else:
            from runtime.api import Gates     # torch, the controllers and MiniLM: loaded once, at proxy start-up

            gates = Gates.load(paths, policy=policy, strict=strict, taus=taus, support_z=support_z).warmup()
        self.gates = gates
        self.policy = GatePolicy(on_error=on_error, max_reasks=max_reasks, max_continues=max_continues,
                                 concurrency=concurrency, modes=dict(modes or {}))
        self.metrics = Metrics()
        # capture: the endpoint's capture options as a mapping ({dir: ..., redact: [...]}, runtime/serve/capture.py)
        self.capture = (Capture(capture["dir"], metrics=self.metrics, **{k: v for k, v in capture.items() if k != "dir"})
                        if capture and capture.get("dir") else None)
        self.gater = Gater(gates, _Proxied({}, ""), self.policy, self.metrics, self.capture)   # limiter shared

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        # LiteLLM takes a guardrail's streaming hook from the registered class's own __dict__, not from its bases:
        # without it there, a subclass's streams would go out ungated
        name = "async_post_call_streaming_iterator_hook"
        if name not in cls.__dict__:
            setattr(cls, name, getattr(cls, name))

    def _request(self, data: dict) -> dict | None:
        """The OpenAI request in LiteLLM's request ``data`` (None: not a chat completion, nothing to gate)."""
        request = {k: v for k, v in data.items() if k in OPENAI_PARAMS}
        return request if isinstance(request.get("messages"), list) else None

    async def _gate(self, data: dict, request: dict, first: ModelResponse) -> dict:
        """The gated completion (``toolwise`` included) of a request whose first turn is ``first``; each decision
        logged, one line each, the same for a streamed and a non-streamed request."""
        gater = copy.copy(self.gater)       # the same gates, limiter and metrics, over this request's upstream
        gater.upstream = _Proxied(first.model_dump(), str(request["model"]))
        body = await gater.complete(request, request["messages"])
        call_id = data.get("litellm_call_id")
        for d in body["toolwise"]["decisions"]:
            verbose_proxy_logger.info("toolwise %s call=%s round=%s action=%s applied=%s p=%.3f tau=%.3f%s%s", d["gate"],
                                      call_id, d.get("round"), d["action"], d["applied"],
                                      d.get("probability", float("nan")), d.get("tau", float("nan")),
                                      f" error={d['error']}" if d.get("error") else "",
                                      " mode=shadow" if d.get("mode") == "shadow" else "")
        return body

    async def async_post_call_success_hook(self, data: dict, user_api_key_dict: Any, response: Any) -> Any:
        if data.get("stream") is True:
            # LiteLLM (1.108.7) also calls this hook once a streamed chat completion is over, on the response it
            # assembled for its spend logs ("audit-only": the client has had every chunk). The streaming hook below
            # gates streams; gating here as well would make re-asks whose results nobody receives.
            return None
        if not isinstance(response, ModelResponse) or not response.choices:
            return None         # embeddings, images, ...: nothing to gate
        request = self._request(data)
        if request is None:
            return None
        body = await self._gate(data, request, response)
        if body["toolwise"]["upstream_calls"] == 1:
            # no re-ask: the model's own response goes on (LiteLLM's ids, cost and hidden params kept), less the
            # calls the gates skipped in a turn whose other calls execute (the gating layer drops them from its copy)
            kept = {c["id"] for c in body["choices"][0]["message"].get("tool_calls") or []}
            message = response.choices[0].message
            if message.tool_calls and len(kept) < len(message.tool_calls):
                message.tool_calls = [c for c in message.tool_calls if c.id in kept]
            response.toolwise = body["toolwise"]
            return response
        out = ModelResponse(**{k: v for k, v in body.items() if k != "toolwise"})
        out.toolwise = body["toolwise"]
        return out

    async def async_post_call_streaming_iterator_hook(self, user_api_key_dict: Any, response: AsyncIterator[Any],
                                                      request_data: dict) -> AsyncGenerator[Any, None]:
        call_id = request_data.get("litellm_call_id")
        request = self._request(request_data)
        iterator = aiter(response)
        first_chunk = await anext(iterator, None)
        if first_chunk is None:
            verbose_proxy_logger.warning("toolwise ungated call=%s: the stream had no chunk", call_id)
            return
        if request is None or not isinstance(first_chunk, ModelResponseStream):
            # not a chat completion stream (another route's events): nothing to gate, so nothing to hold back
            verbose_proxy_logger.info("toolwise ungated call=%s: %s", call_id,
                                      "the request has no chat messages" if request is None
                                      else f"{type(first_chunk).__name__} chunks are not chat completion chunks")
            yield first_chunk
            async for chunk in iterator:
                yield chunk
            return
        if not (self.gater.enforces("pre_call") or self.gater.enforces("on_answer")):
            # every gate in shadow: the stream goes to the client as it comes, and the gates decide on the whole
            # turn afterwards (logged; no re-ask, as a shadowed decision is never acted on)
            chunks = [first_chunk]
            yield first_chunk
            async for chunk in iterator:
                chunks.append(chunk)
                yield chunk
            first, why = assemble(chunks, request["messages"])
            if first is None:
                verbose_proxy_logger.warning("toolwise ungated call=%s: %s", call_id, why)
            else:
                await self._gate(request_data, request, first)
            return
        # the whole turn is held: a gate decides on a complete call or answer, and neither a skipped call nor an
        # answer sent back for verification may reach the client
        chunks = [first_chunk, *[chunk async for chunk in iterator]]
        first, why = assemble(chunks, request["messages"])
        if first is None:
            verbose_proxy_logger.warning("toolwise ungated call=%s: %s; its %d chunks pass unchanged", call_id, why,
                                         len(chunks))
            for chunk in chunks:
                yield chunk
            return
        body = await self._gate(request_data, request, first)
        for chunk in stream_chunks(body, chunks[0], client_usage=client_asked_usage(request_data)):
            yield chunk


def assemble(chunks: list[ModelResponseStream], messages: list[dict]) -> tuple[ModelResponse | None, str]:
    """The chat completion a buffered stream makes, or (None, why it cannot be gated)."""
    try:
        built = stream_chunk_builder(chunks=chunks, messages=messages)
    except Exception as e:  # noqa: BLE001 - an unassemblable stream goes out ungated, never lost
        return None, f"assembly failed: {type(e).__name__}: {e}"[:300]
    if not isinstance(built, ModelResponse) or not built.choices:
        return None, f"it assembles to {type(built).__name__}{'' if built is None else ' without choices'}"
    tokens: dict[int, list] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            lp = getattr(choice, "logprobs", None)
            content = lp.get("content") if isinstance(lp, dict) else getattr(lp, "content", None)
            tokens.setdefault(choice.index, []).extend(content or [])
    for choice in built.choices:
        if tokens.get(choice.index):
            # LiteLLM's assembly leaves the streamed token log-probs out; G-STEP reads them with the answer, as it
            # does a non-streamed response's
            choice.logprobs = {"content": [t.model_dump() if hasattr(t, "model_dump") else t
                                           for t in tokens[choice.index]]}
        if choice.message.content == "" and choice.message.tool_calls:
            # a stream opens with an empty content delta where a non-streamed call turn has none: the turn re-sent
            # in a re-ask and its copy in toolwise.injected are the same for a streamed and a non-streamed request
            choice.message.content = None
    return built, ""


def client_asked_usage(request_data: dict) -> bool:
    """Whether the client asked for the usage chunk: LiteLLM may ask the upstream for it on its own (for its spend
    logs) and then strips it from what the client gets (``_litellm_strip_stream_usage``)."""
    options = request_data.get("stream_options")
    return (isinstance(options, dict) and options.get("include_usage") is True
            and request_data.get("_litellm_strip_stream_usage") is not True)


def stream_chunks(body: dict, template: ModelResponseStream, client_usage: bool) -> list[ModelResponseStream]:
    """The gated completion ``body`` as stream chunks: per choice, the message (role, reasoning, content and its
    log-probs), then its tool calls whole (by ``index``, as clients accumulate them); a finish chunk per choice; the
    usage chunk if the client asked for it. The last chunk carries ``toolwise`` and the request's usage: LiteLLM's
    proxy drops the extra fields of a chunk it can serialize as plain text, which a usage rules out. ``template``:
    the upstream's first chunk, whose hidden params (deployment, model id) every chunk keeps."""
    head = {k: body[k] for k in ("id", "created", "model", "system_fingerprint") if body.get(k) is not None}
    hidden = dict(getattr(template, "_hidden_params", None) or {})

    def chunk(choice: StreamingChoices | None, **extra: Any) -> ModelResponseStream:
        out = ModelResponseStream(choices=[choice] if choice is not None else [], **head, **extra)
        out._hidden_params = dict(hidden)
        return out

    chunks, finishes = [], []
    for choice in body["choices"]:
        index, message = choice.get("index", 0), choice["message"]
        opening = {k: message[k] for k in ("reasoning_content", "content") if message.get(k)}
        chunks.append(chunk(StreamingChoices(index=index, delta=Delta(role="assistant", **opening),
                                             logprobs=choice.get("logprobs"))))
        if message.get("tool_calls"):
            calls = [{"index": i, "id": c["id"], "type": c.get("type") or "function",
                      "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
                     for i, c in enumerate(message["tool_calls"])]
            chunks.append(chunk(StreamingChoices(index=index, delta=Delta(tool_calls=calls))))
        finishes.append(StreamingChoices(index=index, delta=Delta(), finish_reason=choice.get("finish_reason")))
    counts = body.get("usage")
    usage = Usage(**{k: counts[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens") if k in counts}
                  ) if counts else None
    chunks += [chunk(c) for c in finishes[:-1]]
    if client_usage:
        chunks += [chunk(finishes[-1]), chunk(None, usage=usage)]
    else:
        chunks.append(chunk(finishes[-1], usage=usage))
    chunks[-1].toolwise = body["toolwise"]
    return chunks
