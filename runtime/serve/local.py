"""``upstream=local``: toolwise's own backend in this process, answering chat completions as an upstream would.

It exists for Probe&Prefill: the probe decides from the policy's hidden states of the first prompt, which no
OpenAI-compatible server returns. On a conversation's first turn with ``gates.probe_prefill`` set, the gating layer
hands :meth:`LocalUpstream.chat` its probe step (:meth:`~.gating.Gater.first_turn`): called here with the backend,
it prefills the prompt once (:meth:`Gates.probe_first_prompt`), decides, and returns the prompt, the prefill state
and the response prefill, and generation resumes from that state, exactly as toolwise's agent loop does; later
turns are plain generations. The messages become the loop's prompt through the runtime API's converter
(:mod:`data_builders.agent.openai_messages`), so the policy sees what it sees inside toolwise. The returned assistant
content is the text the policy generated: a soft prefill (a sentence that steers the generation) is not part of
the reply and never appears in it (the probe's decision record names it); a hard prefill, the forced opening of
the policy's own call or boxed answer, stays part of that call or answer. A call in the text is returned as
structured ``tool_calls`` (finish_reason ``tool_calls``) and its markup is not left in ``content``, which keeps
only the text around it (None when there is none). A ``<tool_call>`` the policy opened but wrote malformed is
neither a call nor the answer: the reply is the text before it (finish_reason ``stop``), and the markup goes to
the gating layer, which returns it in ``toolwise.malformed_calls`` and counts it
(``toolwise_malformed_calls_total``); never an error, and never an empty reply: a turn that is nothing but a malformed
call comes back as its text. ``tool_choice``: ``none`` shows the policy no tools (and nothing it writes is read as
a call); ``required`` and a named function force the call: with xgrammar installed (``upstream.constrained_calls``)
the call is opened and decoded under the grammar of the tools it allows (that function alone, when named), in
one slice, so the turn is that call with arguments that parse against its schema; without it, the call is opened as
far as tool_choice decides it (a named function up to its arguments) and the policy writes the rest. A forced
turn that still holds no such call is a 502 ``tool_choice_not_followed`` from the gating layer, never an empty
reply.

No request can hold the policy for long: a prompt the context (``upstream.max_context``, default the model's
positions) cannot hold is refused with 400 ``context_length_exceeded`` before any forward pass, and ``max_tokens``
is capped to the room the prompt leaves (OpenAI's ``max_tokens`` is a most: the turn ends with finish_reason
``length``). The policy generates for one request at a time (the backend is not thread-safe, and on CPU torch uses
every core), in slices of ``upstream.slice_tokens`` tokens taken in turn: a short request waits for a slice of a
long one, not for all of it, and a request that is cancelled (its client left, the server is shutting down) stops
at its next slice. A long prompt is prefilled the same way, in chunks of ``upstream.prefill_chunk_tokens`` (512)
taken in turn with the other requests, except a first turn the probe reads (its prefill is one forward pass over
the whole prompt, the one the hidden states come from). For throughput put a vLLM server behind
``upstream=http`` — ToolGate and G-STEP work there."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

from anyio import CapacityLimiter, to_thread
from pydantic import ValidationError

from data_builders.agent import prompts as P
from data_builders.agent.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolCall, parse_tool_call
from data_builders.backends.base import SamplingParams
from data_builders.backends.grammar import CallConstraint, import_xgrammar
from data_builders.environments.base import serialize
from data_builders.protocol import CALL_PREFILL
from data_builders.agent.openai_messages import check_tools, episode_from_openai

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
    (the forced call prefix), a named function opens that function's call up to its arguments; "" otherwise."""
    if tool_choice == "required":
        return CALL_PREFILL[call_format]
    if isinstance(tool_choice, dict):
        text = P.tool_call_text(tool_choice["function"]["name"], {}, call_format)
        return text[:text.rindex("{}")]      # ... "arguments": | "parameters":  — the policy writes the rest
    return ""


def forced_call_constraint(tool_choice: Any, tools: list[dict], call_format: str) -> tuple[str, CallConstraint | None]:
    """The opening and the grammar of a turn whose call ``tool_choice`` decides ("required": one of ``tools``; a
    named function: that one), decoded under xgrammar: the call is opened (the forced call prefix) and the rest is
    held to ``{"name": <the tool>, "arguments": <its JSON schema>}`` and the call's close, so the turn is that
    call, well formed, whatever the policy would have written. ``("", None)`` for any other tool_choice."""
    if tool_choice == "required":
        allowed = tools
    elif isinstance(tool_choice, dict):
        allowed = [t for t in tools if (t.get("function") or t).get("name") == tool_choice["function"]["name"]]
    else:
        return "", None
    opening = CALL_PREFILL[call_format]
    return opening, CallConstraint(tuple(allowed), call_format, opened=opening)


def grammar_installed() -> bool:
    """Whether xgrammar (``.[constrained]``; vLLM ships it) is importable: forced calls are then decoded under
    their grammar."""
    try:
        import_xgrammar()
    except ImportError:
        return False
    return True


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


@dataclass
class _Generation:
    """One turn being generated, slice by slice (:meth:`LocalUpstream.chat`)."""

    prompt: str                     # the rendered prompt
    prefill: str                    # the response prefill (probe) or forced call opening (tool_choice)
    shown: bool                     # the prefill belongs in the reply (see FirstTurn)
    offered: bool                   # tools were offered: the text may hold a call
    params: SamplingParams          # budget = params.max_new_tokens (capped to the context)
    logprobs: bool
    state: Any = None               # the probe's prefill state, consumed by the first slice
    constraint: CallConstraint | None = None    # a forced call's grammar: the generation is one slice
    prompt_ids: list[int] = field(default_factory=list)    # the first slice's prompt as the backend tokenized it
    token_ids: list[int] = field(default_factory=list)
    token_logprobs: list[float] | None = None
    text: str = ""                  # the generated text so far (after the prefill), cut at a stop string
    prompt_tokens: int = 0
    finish: str | None = None       # stop | eos | length once done
    slices: int = 0


class LocalUpstream:
    local = True        # the policy runs here: the gating layer can probe its first turns (never an HTTP upstream's)

    def __init__(self, backend: Any, *, call_format: str = "xml", models: list[str] | None = None,
                 max_tokens: int = 256, temperature: float = 0.0, max_context: int | None = None,
                 slice_tokens: int = 32, constrained_calls: bool | None = None, prefill_chunk_tokens: int = 512):
        if getattr(backend, "name", None) == "openai":
            raise ValueError("upstream=local runs the policy in this process (backend=hf or vllm); for an "
                             "OpenAI-compatible server, serve it with upstream=http")
        self.backend, self.call_format = backend, call_format
        self.served = list(models or [backend.model_id])
        self.max_tokens, self.temperature, self.slice_tokens = max_tokens, temperature, slice_tokens
        self.prefill_chunk_tokens = prefill_chunk_tokens
        if constrained_calls and not grammar_installed():
            import_xgrammar()       # raises, with the install hint
        self.constrained_calls = grammar_installed() if constrained_calls is None else constrained_calls
        positions = getattr(getattr(backend, "config", None), "max_position_embeddings", None)
        self.max_context = int(max_context or positions or 32768)
        self.base_url = f"local:{backend.fingerprint}"
        # One generation slice at a time (the backend is not thread-safe, torch already uses every core), in the
        # order requests ask (anyio's limiter is first come, first served): a long generation and a short one
        # take turns slice by slice instead of the short one waiting for the whole long one.
        self.limiter = CapacityLimiter(1)
        self.tokenizer = getattr(backend, "tokenizer", None)

    @classmethod
    def from_config(cls, cfg: Any) -> "LocalUpstream":
        # why here: loading a policy needs transformers (and vLLM for backend=vllm); upstream=http needs neither
        from data_builders.backends.loading import backend_from_config
        from data_builders.agent.openai_messages import call_format_of

        backend = backend_from_config(cfg.model, cfg.backend)
        up = cfg.upstream
        return cls(backend, call_format=call_format_of(backend.fingerprint),
                   models=list(up.models) if up.models else None, max_tokens=up.max_tokens,
                   temperature=up.temperature, max_context=up.max_context, slice_tokens=up.slice_tokens,
                   constrained_calls=up.constrained_calls, prefill_chunk_tokens=up.prefill_chunk_tokens)

    async def models(self) -> list[str]:
        return list(self.served)

    async def aclose(self) -> None:
        return None

    async def chat(self, payload: dict, first_turn: FirstTurn | None = None) -> tuple[dict, float]:
        """The chat completion for ``payload`` and its latency in seconds; ``first_turn``: the gating layer's probe
        step, run in the same worker right before generating (the backend serves one call at a time).

        The prompt is prefilled in chunks of ``prefill_chunk_tokens`` and the generation runs in slices of
        ``slice_tokens`` tokens, each its own turn on the policy, the KV cache kept between them (``cache_keys``): a
        request waiting for the policy gets it after the current chunk or slice, and a cancelled request (its client
        left, the server is shutting down) stops after the one in progress."""
        start = time.perf_counter()
        key = ("serve", uuid.uuid4().hex)       # this generation's KV cache in the backend
        try:
            gen = await to_thread.run_sync(partial(self._begin, payload, first_turn), limiter=self.limiter)
            for end in self._prefill_chunks(gen):
                await to_thread.run_sync(partial(self._prefill_to, gen, end, key), limiter=self.limiter)
            while gen.finish is None:
                await to_thread.run_sync(partial(self._slice, gen, key), limiter=self.limiter)
        finally:        # a slice never outlives its await (the worker finishes first), so the cache is free
            self.backend.release([key])
        body = self._body(payload, gen)
        try:
            ChatResponse.model_validate(body)
        except ValidationError as e:       # our own bug, but the client gets an answer that says so
            raise validation_error(e, "local upstream built an invalid chat completion", 502, "upstream_garbage")
        return body, time.perf_counter() - start

    # ------------------------------------------------------------------------------------------ in a worker
    def _params(self, payload: dict, room: int) -> SamplingParams:
        """The request's sampling, its budget capped to ``room`` (the context left after the prompt): a client's
        max_tokens is a most, and the policy cannot write past its context anyway."""
        budget = payload.get("max_completion_tokens") or payload.get("max_tokens") or self.max_tokens
        temperature = payload.get("temperature")
        temperature = self.temperature if temperature is None else float(temperature)
        seed = payload.get("seed")
        return SamplingParams(max_new_tokens=min(int(budget), room), temperature=temperature,
                              top_p=float(payload.get("top_p") or 1.0), stop=(CALL_STOP, *_stops(payload.get("stop"))),
                              seed=int(seed) if isinstance(seed, int) else None)

    def _too_long(self, tokens: int, what: str) -> APIError:
        return APIError(400, f"{what} is {tokens} tokens; the model's context holds {self.max_context} (prompt and "
                             f"completion together), which leaves no room to generate: shorten the messages or "
                             f"tools", code="context_length_exceeded", param="messages")

    def _begin(self, payload: dict, first_turn: FirstTurn | None) -> _Generation:
        """Convert and check the request, refuse a prompt the context cannot hold (before any forward pass: the
        probe's prefill included), and run the probe step: the turn, ready to prefill and generate."""
        messages, tools = payload["messages"], payload.get("tools") or []
        choice_of_tool = payload.get("tool_choice")
        try:
            view = episode_from_openai(messages, tools, call_format=self.call_format).view
            # tool_choice "none": the policy is shown no tools and nothing it writes is a call
            offered = [] if choice_of_tool == "none" else check_tools(tools)
        except ValueError as e:
            raise APIError(400, f"messages: {e}", code="invalid_messages", param="messages") from e
        rendered = self.backend.render(P.template_messages(view.messages), offered)
        chars_per_token = getattr(self.backend, "max_token_chars", None)
        if isinstance(chars_per_token, int) and len(rendered) // chars_per_token >= self.max_context:
            # a bound from below, without tokenizing a prompt that may be a megabyte
            raise self._too_long(len(rendered) // chars_per_token, "the prompt (at least)")
        prompt_tokens = self.backend.count_tokens(rendered)
        if prompt_tokens >= self.max_context:
            raise self._too_long(prompt_tokens, "the prompt")
        prompt, state, prefill, shown = first_turn(self.backend) if first_turn is not None else ("", None, "", True)
        if not prompt:
            prompt = rendered
        constraint = None
        if not prefill and offered and self.constrained_calls:
            # "required" / a named function: the call is opened and decoded under its grammar, so the turn is
            # that call (an unconstrained policy may write another, or a malformed one: an empty answer)
            prefill, constraint = forced_call_constraint(choice_of_tool, offered, self.call_format)
        elif not prefill and offered:   # without xgrammar the call is opened up to its arguments
            prefill = forced_call_prefix(choice_of_tool, self.call_format)
        room = self.max_context - prompt_tokens - (self.backend.count_tokens(prefill) if prefill else 0)
        if room < 1:
            raise self._too_long(self.max_context - room, "the prompt with its response prefill")
        gen = _Generation(prompt=prompt, prefill=prefill, shown=shown, offered=bool(offered),
                          params=self._params(payload, room), logprobs=bool(payload.get("logprobs")), state=state,
                          constraint=constraint)
        return gen

    def _prefill_chunks(self, gen: _Generation) -> list[int]:
        """Where the prompt's chunked prefill stops before the first slice: every ``prefill_chunk_tokens`` tokens
        of the prompt (the first slice prefills what is left, at least one token, and generates). A long prompt's
        prefill then takes turns with the other requests and can be cancelled between chunks, where one forward pass
        held the only policy for its whole length (a 7,800-token prompt: over a minute on 2 CPU cores). Not after
        the probe: it prefilled the whole prompt to read its states, and the generation resumes from that state."""
        if gen.state is not None or not self.prefill_chunk_tokens or self.tokenizer is None:
            return []
        gen.prompt_ids = self._ids(gen.prompt + gen.prefill)    # the tokens the first slice's prompt reads as
        return list(range(self.prefill_chunk_tokens, len(gen.prompt_ids), self.prefill_chunk_tokens))

    def _prefill_to(self, gen: _Generation, end: int, key: Any) -> None:
        """Prefill the prompt's first ``end`` tokens into the KV cache kept under ``key``: a one-token generation
        whose token is not kept (the backend keeps the KV of what it fed, the prompt; the next chunk, or the first
        slice, reuses that prefix and feeds only what follows)."""
        self.backend.generate([gen.prompt_ids[:end]], SamplingParams(max_new_tokens=1, temperature=0.0),
                              cache_keys=[key])

    def _slice(self, gen: _Generation, key: Any) -> None:
        """Generate up to ``slice_tokens`` more tokens of ``gen``, resuming from the KV cache kept under ``key``.

        A later slice's prompt is token ids, the first slice's prompt tokens followed by every token generated
        since, never the decoded text: tokenizing generated text again need not give the generated tokens back (a
        run of newlines, a character split over two tokens), and the continuation would then read another
        sequence than the one an unsliced generation reads. So slicing changes no token of the output."""
        budget = gen.params.max_new_tokens
        # a grammar's state lives in one generate call: a constrained turn (a forced call) is one slice
        step = budget if gen.constraint is not None else self.slice_tokens
        params = replace(gen.params, max_new_tokens=min(step, budget - len(gen.token_ids)),
                         seed=gen.params.seed if gen.slices == 0 else None)     # seeded once, not every slice
        if gen.slices == 0:
            prompt: str | list[int] = gen.prompt + gen.prefill
            # the tokens the backend reads this as: one text, or with the probe's state the prompt as prefilled
            # and the response prefill tokenized after it (a chunked prefill has them already)
            gen.prompt_ids = (self._ids(gen.prompt) + self._ids(gen.prefill) if gen.state is not None
                              else gen.prompt_ids or self._ids(prompt))
        else:
            prompt = gen.prompt_ids + gen.token_ids
        constrained = {"constraints": [gen.constraint]} if gen.constraint is not None else {}
        out = self.backend.generate([prompt], params, prefill_state=gen.state, return_logprobs=gen.logprobs,
                                    cache_keys=[key], **constrained)[0]
        gen.state = None        # a prefill state is consumed by the generation that continues it
        if gen.slices == 0:
            gen.prompt_tokens = out.prompt_tokens
        gen.slices += 1
        gen.token_ids += out.token_ids
        if out.logprobs is not None:
            gen.token_logprobs = (gen.token_logprobs or []) + list(out.logprobs)
        # the text of every token so far decoded as one (a character split over two slices decodes whole)
        gen.text = (self.tokenizer.decode(gen.token_ids, skip_special_tokens=True) if self.tokenizer is not None
                    else gen.text + out.text)
        stops = [gen.text.find(s) + len(s) for s in gen.params.stop if s in gen.text]
        if stops:       # also one that straddles two slices (each slice sees only its own text)
            gen.text, gen.finish = gen.text[:min(stops)], "stop"
        elif out.finish_reason in ("stop", "eos"):
            gen.finish = out.finish_reason
        elif len(gen.token_ids) >= budget:
            gen.finish = "length"

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids if text else []

    def _body(self, payload: dict, gen: _Generation) -> dict:
        raw = gen.prefill + gen.text            # the turn the policy wrote, as the loop reads it
        call = parse_tool_call(raw) if gen.offered else None
        # the reply is the text around the call, never its markup (that is what tool_calls carries); an opened call
        # nobody could parse is not returned as the answer either: the gating layer records it
        content, markup = split_call(raw if gen.shown else gen.text, call) if gen.offered else (gen.text, "")
        if call is None and markup and not content:
            # a malformed call and nothing else: returned as the text it is (still recorded as malformed), since a
            # reply with no content and no call ends a client's agent with an empty output
            content = (raw if gen.shown else gen.text).strip()
        message: dict[str, Any] = {"role": "assistant", "content": content or (None if call is not None else "")}
        if call is not None:
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                      "function": {"name": call.name, "arguments": serialize(call.arguments)}}]
        finish = "tool_calls" if call is not None else ("length" if gen.finish == "length" else "stop")
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if gen.logprobs and gen.token_logprobs is not None:
            choice["logprobs"] = {"content": [{"token": self._token(t), "logprob": lp, "bytes": None,
                                               "top_logprobs": []}
                                              for t, lp in zip(gen.token_ids, gen.token_logprobs)]}
        completion = len(gen.token_ids)
        body = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": payload.get("model", self.served[0]), "choices": [choice],
                "usage": {"prompt_tokens": gen.prompt_tokens, "completion_tokens": completion,
                          "total_tokens": gen.prompt_tokens + completion}}
        if call is None and markup:
            body["toolwise"] = {"malformed_call": markup}     # read (and removed) by the gating layer
        return body

    def _token(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id]) if self.tokenizer is not None else ""
