"""``stream: true``: a gated chat completion sent as server-sent events in OpenAI's chunk format.

The gating is the non-streamed one (:meth:`~.gating.Gater.complete`, same decisions, same re-asks), run over a
streaming view of the upstream (:class:`TurnStream`): each upstream call is streamed (``stream: true`` with
``stream_options.include_usage``, so the usage of every call is summed as it is for a non-streamed request) and
assembled into the completion the gating layer judges, while the deltas no gate needs go to the client as they
arrive. What is held, and until when:

* with G-STEP loaded, every turn is held until the gating is done (any turn may end as an answer G-STEP must
  judge, and a *continue* re-asks: the client gets the committed answer, never the one sent back for
  verification);
* with ToolGate loaded (and no G-STEP), text streams as it arrives until the turn proposes a call; the call (and
  anything after it in that turn) is held until it is complete and gated, then sent, or, when every call is
  skipped, the re-asked turn streams instead. Text already sent before a skipped call cannot be taken back: it
  stays at the start of the streamed message (a non-streamed response returns the re-asked turn alone);
* with no gate, everything streams as it arrives.

``upstream=local`` generates a turn whole (the in-process engine has no token stream here), then streams it by
the same rules: its time to first token is the turn's generation time.

The last chunk before ``data: [DONE]`` (the usage chunk with ``stream_options.include_usage``, else the finish
chunk) carries ``toolwise`` (decisions, injected messages, usage, timings), as a non-streamed response does.
An error before anything was sent is an ordinary HTTP error; after that, an ``data: {"error": ...}`` event ends the
stream (no ``[DONE]``). A client that disconnects cancels the gating: the upstream stream is closed (an
OpenAI-compatible server stops generating when its client leaves) or the local generation is cancelled."""
from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from .disconnect import ClientClosed, ClientWatch
from .gating import Gater
from .protocol import APIError, ChatResponse, validation_error

log = logging.getLogger(__name__)

END = object()              # the queue's end marker


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def call_deltas(calls: list[dict]) -> list[dict]:
    """Whole tool calls as one chunk's ``delta.tool_calls`` (numbered by ``index``, as clients accumulate them)."""
    return [{"index": i, "id": c["id"], "type": c.get("type", "function"),
             "function": {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}}
            for i, c in enumerate(calls)]


class Assembled:
    """A streamed chat completion put back together: content, tool calls by index, log-probs, finish reason and
    usage, as the non-streamed completion the gating layer judges."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.head: dict = {}
        self.text: list[str] = []
        self.calls: dict[int, dict] = {}
        self.logprobs: list = []
        self.finish_reason: str | None = None
        self.usage: dict | None = None

    def add(self, chunk: dict) -> dict:
        """Adds ``chunk``; returns its first choice's delta (``{}`` for a usage-only chunk)."""
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if not choices:
            return {}
        choice = choices[0]
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        for part in delta.get("tool_calls") or []:
            call = self.calls.setdefault(part.get("index", len(self.calls)),
                                         {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            call["id"] = part.get("id") or call["id"]
            fn = part.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
        lps = (choice.get("logprobs") or {}).get("content")
        if isinstance(lps, list):
            self.logprobs += lps
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        return delta

    def body(self) -> dict:
        if self.finish_reason is None:
            raise APIError(502, f"upstream {self.base_url} ended its stream before a finish_reason",
                           code="upstream_error")
        text = "".join(self.text)
        calls = [self.calls[i] for i in sorted(self.calls)]
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
        if calls:
            message["tool_calls"] = calls
        body = {**self.head, "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason,
                             "logprobs": {"content": self.logprobs} if self.logprobs else None}]}
        if self.usage is not None:
            body["usage"] = self.usage
        try:
            ChatResponse.model_validate(body)
        except ValidationError as e:
            raise validation_error(e, f"upstream {self.base_url} streamed an invalid chat completion", 502,
                                   "upstream_garbage") from e
        return body


class TurnStream:
    """The upstream as the gating layer sees it during a streamed request: ``chat`` returns each whole turn, as
    for a non-streamed one, and hands the session every delta on the way (everything else is the upstream's)."""

    def __init__(self, upstream: Any, session: "StreamSession"):
        self._upstream, self._session = upstream, session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._upstream, name)

    async def chat(self, payload: dict, **kwargs: Any) -> tuple[dict, float]:
        self._session.new_turn()
        if getattr(self._upstream, "local", False):
            # the in-process engine generates the turn whole; it is then streamed by the same rules
            payload = {k: v for k, v in payload.items() if k not in ("stream", "stream_options")}
            body, latency = await self._upstream.chat(payload, **kwargs)
            message = body["choices"][0]["message"]
            delta = {"content": message.get("content"), "tool_calls": call_deltas(message.get("tool_calls") or [])}
            self._session.on_delta(body, delta, body["choices"][0].get("logprobs"))
            return body, latency
        start = time.perf_counter()
        turn = Assembled(self._upstream.base_url)
        options = {**(payload.get("stream_options") or {}), "include_usage": True}   # usage of every call
        async for chunk in self._upstream.stream_chat({**payload, "stream": True, "stream_options": options}):
            delta = turn.add(chunk)
            if delta:
                self._session.on_delta(chunk, delta, (chunk["choices"][0].get("logprobs") or None))
        return turn.body(), time.perf_counter() - start


class StreamSession:
    """One streamed request: runs the gating over a :class:`TurnStream` and queues the SSE events to send."""

    def __init__(self, gater: Gater, request: dict):
        self.request = request
        self.queue: asyncio.Queue = asyncio.Queue()
        self.gater = copy.copy(gater)       # the same gates, limiter and metrics, over the streaming upstream
        self.gater.upstream = TurnStream(gater.upstream, self)
        self.hold_answers = gater.enforces("on_answer")     # a shadowed gate changes no turn: nothing is held
        self.hold_calls = gater.enforces("pre_call")
        self.client_logprobs = bool(request.get("logprobs"))
        self.include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self.head: dict = {}
        self.role_sent = False
        self.started = time.perf_counter()
        self.first_content_s: float | None = None
        self.new_turn()

    def new_turn(self) -> None:
        self.turn_text = ""             # this turn's text already sent
        self.turn_calls = False         # this turn proposed a call
        self.turn_calls_sent = False    # ... and its calls were sent as they came (no ToolGate)

    def emit(self, delta: dict, logprobs: Any = None, finish_reason: str | None = None, **extra: Any) -> None:
        if not self.role_sent:
            delta, self.role_sent = {"role": "assistant", **delta}, True
        chunk = {**self.head, "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
                 **extra}
        self.queue.put_nowait(sse(chunk))

    def on_delta(self, chunk: dict, delta: dict, logprobs: Any) -> None:
        """A delta of the turn in progress: sent now when no gate needs it (see the module's rules), else held
        (the turn is sent from the gating's result)."""
        if not self.head:       # the first upstream call names the stream, as OpenAI's chunks share one id
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        if self.hold_answers:
            return
        if delta.get("tool_calls"):
            self.turn_calls = True
            if not self.hold_calls:
                self.emit({"tool_calls": delta["tool_calls"]})
                self.turn_calls_sent = True
        text = delta.get("content")
        if text and not (self.turn_calls and self.hold_calls):
            self.emit({"content": text}, logprobs if self.client_logprobs else None)
            self.turn_text += text
            if self.first_content_s is None:
                self.first_content_s = time.perf_counter() - self.started

    def finish(self, result: dict) -> None:
        """The gating's result: what of the returned turn was held, the finish chunk, usage, ``[DONE]``."""
        if not self.head:
            self.head = {k: result[k] for k in ("id", "created", "model") if k in result}
        choice = result["choices"][0]
        message = choice["message"]
        text = message.get("content") or ""
        if text.startswith(self.turn_text) and len(text) > len(self.turn_text):
            # the turn's log-probs go with it when none of its text went out live
            self.emit({"content": text[len(self.turn_text):]},
                      choice.get("logprobs") if self.client_logprobs and not self.turn_text else None)
            if self.first_content_s is None:
                self.first_content_s = time.perf_counter() - self.started
        if message.get("tool_calls") and not self.turn_calls_sent:
            self.emit({"tool_calls": call_deltas(message["tool_calls"])})
        toolwise = {**result["toolwise"], "wall_ms": round((time.perf_counter() - self.started) * 1000, 3),
                    "first_content_ms": None if self.first_content_s is None else
                    round(self.first_content_s * 1000, 3)}
        last = {} if self.include_usage else {"toolwise": toolwise}
        self.emit({}, None, choice.get("finish_reason") or "stop", **last)
        if self.include_usage:
            self.queue.put_nowait(sse({**self.head, "object": "chat.completion.chunk", "choices": [],
                                       "usage": result.get("usage"), "toolwise": toolwise}))
        self.queue.put_nowait("data: [DONE]\n\n")

    async def run(self) -> None:
        try:
            self.finish(await self.gater.complete(self.request, self.request["messages"]))
        except APIError as e:
            self.queue.put_nowait(e)
        except Exception as e:  # noqa: BLE001 - the client gets an error event, never a stream that just stops
            log.exception("streamed completion failed")
            self.queue.put_nowait(APIError(500, f"internal error: {type(e).__name__}", code="internal_error"))
        finally:
            self.queue.put_nowait(END)


async def stream_completion(request: Request, gater: Gater, body: dict) -> StreamingResponse:
    """The streamed response to the chat completion ``body``. Nothing is sent (so a failure is still an HTTP error
    with its status) until the first event is ready; from then on the events go out as they are queued. Every
    wait for an event is raced against the client's disconnect (:mod:`.disconnect`): a client gone before the
    first event ends the request with 499, one gone later ends the stream, and either way the gating (with its
    upstream request or local generation) is cancelled."""
    session = StreamSession(gater, body)
    work = asyncio.ensure_future(session.run())
    watch = ClientWatch(request)
    metrics = gater.metrics
    try:
        first = await watch.run(session.queue.get())
    except BaseException:
        work.cancel()
        watch.close()
        raise
    if isinstance(first, APIError):
        work.cancel()
        watch.close()
        raise first

    async def events():
        item = first
        try:
            while item is not END:
                if isinstance(item, APIError):
                    metrics.errors.labels(str(item.status), item.code).inc()
                    yield sse(item.body())      # OpenAI's clients raise it; the stream ends here, no [DONE]
                    return
                yield item
                # raced here too, not left to starlette: it watches for the disconnect itself only under servers
                # of ASGI spec < 2.4, and otherwise notices one at the next send, which a held turn may not make
                # for the whole of its generation
                item = await watch.run(session.queue.get())
        except ClientClosed:
            return
        finally:
            watch.close()
            if not work.done():
                work.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
