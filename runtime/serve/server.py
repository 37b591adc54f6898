"""How the endpoint is served: uvicorn's own settings, one ASGI middleware for the request body, and what is left
to a reverse proxy.

Only public interfaces: ``uvicorn.Config``'s documented settings and the ASGI messages. Reaching into uvicorn's
HTTP protocol classes would bound more in process, but a uvicorn release may change those without notice, and
the protection would then be gone with no error. Who bounds what:

* the request head's size: h11's ``h11_max_incomplete_event_size`` (:data:`MAX_HEAD_BYTES`), what h11 buffers
  of a head still incomplete; past it the request is a 400 and the connection closes (a head that arrives
  whole in one read is parsed as it is, so the bound is on memory held, per connection). ``http="h11"``
  because httptools ignores that setting (it would be the parser whenever installed);
* an idle kept-alive connection: ``timeout_keep_alive`` (``limits.keep_alive_s``);
* connections open at once: ``limit_concurrency`` (:data:`MAX_CONNECTIONS`); past it a request gets uvicorn's
  503, so a flood is refused cheaply rather than exhausting file descriptors, which the upstream's connections
  and the model files need too;
* SIGTERM: ``timeout_graceful_shutdown`` (``limits.shutdown_timeout_s``) for the requests in flight, then they
  are cancelled (a local generation stops at its next slice) and :class:`ShutdownResponses` answers each as
  OpenAI would: a 503 ``server_shutting_down`` body, or a closing error event on a stream already under way;
* the request body: :class:`BodyDeadline` (``limits.body_timeout_s``, 408), plain ASGI middleware, since
  uvicorn has no body deadline but an ASGI app sees every part of a body arrive;
* the time a client takes to send a request head, and a connection that sends nothing: no uvicorn setting
  bounds them, and no ASGI app runs before a head is complete, so nothing in this process can without uvicorn's
  private classes. Exposed beyond loopback, the endpoint belongs behind a reverse proxy that bounds them
  (nginx's ``client_header_timeout``, set to ``limits.header_timeout_s``), as set out in
  docs/guide.md, "Gated endpoint behind a reverse proxy".

``limit_max_requests`` is not set: it makes the server exit after that many requests, for a process manager that
starts a fresh worker; this process loads its gates (and with ``upstream=local`` a policy) once and has none.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import anyio
import uvicorn

from .protocol import APIError

#: an incomplete request head buffered past this is refused (h11's own default, made explicit: it is part of the
#: endpoint's limits, not an accident of the parser's version; an OpenAI client's head is far smaller)
MAX_HEAD_BYTES = 16 * 1024
#: connections open at once, idle kept-alive ones included, before uvicorn answers 503: room for hundreds of
#: concurrent clients, below the 1,024 file descriptors a Linux process gets by default
MAX_CONNECTIONS = 512


def _has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether an HTTP/1.1 request has a body to read: only Content-Length or Transfer-Encoding announce one."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class BodyDeadline:
    """A request's body must arrive whole within ``timeout_s`` of the app's start: a client trickling it must not
    hold a connection and a request slot forever. Past the deadline, the app's read fails with 408
    ``request_timeout`` (the app's handler for :class:`~.protocol.APIError` sends it) and the connection closes.

    The deadline holds for a body the app does not read too (a 401, a 413 refused from Content-Length, a route
    that takes no body): before the response starts, the rest of the body is read and dropped, within the same
    deadline; a body still incomplete then gets ``connection: close``. Without that, the server would wait for the
    rest of such a body as long as it trickles. Read rather than closed at once, because closing a connection
    whose client is still sending makes its kernel reset it, and the client would lose the response."""

    def __init__(self, app: Any, timeout_s: float):
        self.app, self.timeout_s = app, float(timeout_s)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        pending = _has_body(scope["headers"])       # body bytes still to come
        deadline = anyio.current_time() + self.timeout_s
        received = 0

        async def next_message() -> dict:
            """``receive()``, bounded by the deadline (TimeoutError) while the body is incomplete."""
            nonlocal pending, received
            if not pending:     # after the body: a wait for the client's disconnect, as long as it takes
                return await receive()
            with anyio.fail_after(max(deadline - anyio.current_time(), 0.0)):
                message = await receive()
            received += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                pending = False
            return message

        async def receive_in_time() -> dict:
            try:
                return await next_message()
            except TimeoutError:
                raise APIError(408, f"the request body did not arrive within {self.timeout_s:g} s ({received} bytes "
                                    "read)", code="request_timeout") from None

        async def send_after_body(message: dict) -> None:
            if message["type"] == "http.response.start" and pending:
                try:
                    while pending:
                        await next_message()
                except TimeoutError:
                    headers = list(message.get("headers", []))
                    if not any(name.lower() == b"connection" for name, _ in headers):
                        message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive_in_time, send_after_body)


class ShutdownResponses:
    """What a request cancelled by the server's shutdown (uvicorn cancels the requests still in flight once
    ``timeout_graceful_shutdown`` has passed) sends its client. Left to uvicorn, one whose response had not started
    got a plain-text ``500 Internal Server Error`` and a logged traceback, and a stream was cut without a last event,
    so OpenAI's clients saw a server fault (or an incomplete read) where the server had only stopped. Here:

    * no response started: a 503 with OpenAI's error body (code ``server_shutting_down``) and ``connection: close``;
      the openai client retries a 503, so behind a load balancer the request goes to a replica still running;
    * a stream under way (``text/event-stream``): a ``data: {"error": ...}`` event, which OpenAI's clients raise,
      ends it (no ``[DONE]``: the answer is incomplete);
    * another response under way: it stops where it was (nothing can be added to a body whose length was sent).

    Only a cancellation reaches this far: a client that disconnects is not cancelled by uvicorn (the app sees
    ``http.disconnect``, :mod:`.disconnect`), and every exception is answered by the app's own handlers. The
    cancellation ends here: the request's task has nothing left to do but finish, which is what the shutdown
    waits for."""

    MESSAGE = "the server is shutting down and stopped this request: send it again (to another replica)"

    def __init__(self, app: Any, metrics: Any = None):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, streaming, finished = False, False, False

        async def tracking(message: dict) -> None:
            nonlocal started, streaming, finished
            if message["type"] == "http.response.start":
                started = True
                streaming = any(k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                                for k, v in message.get("headers", []))
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except asyncio.CancelledError:
            if finished or (started and not streaming):
                return
            error = APIError(503, self.MESSAGE, code="server_shutting_down")
            if self.metrics is not None:
                self.metrics.errors.labels("503", error.code).inc()
            body = json.dumps(error.body()).encode()
            if not started:
                await send({"type": "http.response.start", "status": 503,
                            "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            else:
                await send({"type": "http.response.body", "body": b"data: " + body + b"\n\n", "more_body": False})


def uvicorn_config(app: Any, limits: Any, *, host: str, port: int, log_level: str = "info",
                   max_connections: int | None = MAX_CONNECTIONS) -> uvicorn.Config:
    """The uvicorn config the endpoint runs under (see the module's list), its timeouts from the ``limits`` config
    group; ``max_connections``: uvicorn's ``limit_concurrency`` (None: unbounded)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          http="h11", h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                          limit_concurrency=max_connections,
                          timeout_keep_alive=limits.keep_alive_s,
                          timeout_graceful_shutdown=limits.shutdown_timeout_s)
