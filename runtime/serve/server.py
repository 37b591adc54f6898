"""How uvicorn runs the endpoint: its timeouts, and the one it lacks.

uvicorn bounds the idle time between two requests on a kept-alive connection (``timeout_keep_alive``) and, on
SIGTERM, how long in-flight requests may finish (``timeout_graceful_shutdown``), but nothing bounds how long a
client may take to *send* a request: a connection that trickles its request line and headers a byte at a time
(Slowloris) is held open forever, since every byte resets the keep-alive timer and no ASGI app runs before the
head is complete. :class:`HeadDeadline` adds that deadline to uvicorn's HTTP protocol: from the connection's
opening, or from the first byte of its next request, the head must be complete within ``limits.header_timeout_s``
or the connection gets a 408 and is closed. The body is the app's to bound (``read_body`` under
``limits.body_timeout_s``: 408 too), so the deadline ends where the app begins.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

_TIMEOUT_BODY = json.dumps({"error": {"message": "the request head (request line and headers) did not arrive in "
                                                 "time", "type": "invalid_request_error", "param": None,
                                      "code": "request_timeout"}}).encode()
REQUEST_HEAD_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
                        b"content-length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n\r\n" + _TIMEOUT_BODY)


class HeadDeadline:
    """Mixed into uvicorn's HTTP protocol class (h11 or httptools; both keep the request in progress in
    ``self.cycle``): a request's head must arrive within ``head_timeout_s``."""

    head_timeout_s: float = 10.0
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self._between_requests():
            self._arm()         # the first bytes of the next request on a kept-alive connection
        super().data_received(data)  # type: ignore[misc]
        if not self._between_requests():
            self._disarm()      # the head is complete: the app runs (and bounds the body's reading)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def _between_requests(self) -> bool:
        cycle = getattr(self, "cycle", None)
        return cycle is None or cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)  # type: ignore[attr-defined]

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        transport = self.transport  # type: ignore[attr-defined]
        if self._between_requests() and not transport.is_closing():
            transport.write(REQUEST_HEAD_TIMEOUT)
            transport.close()


def protocol_class(head_timeout_s: float, http: str = "auto") -> type:
    """uvicorn's HTTP protocol (``http``: auto = httptools when installed, else h11) with :class:`HeadDeadline`."""
    name = "httptools" if http == "auto" and _has_httptools() else ("h11" if http == "auto" else http)
    base = import_from_string(HTTP_PROTOCOLS[name])
    return type(f"HeadDeadline{base.__name__}", (HeadDeadline, base), {"head_timeout_s": float(head_timeout_s)})


def _has_httptools() -> bool:
    try:
        import httptools  # noqa: F401
    except ImportError:
        return False
    return True


def uvicorn_config(app: Any, limits: Any, *, host: str, port: int, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn config the endpoint runs under, its timeouts from the ``limits`` config group: the request head's
    deadline (``header_timeout_s``), the idle keep-alive (``keep_alive_s``) and, on SIGTERM, how long in-flight
    requests may finish before they are cancelled (``shutdown_timeout_s``; a local generation stops at its next
    slice)."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          http=protocol_class(limits.header_timeout_s),
                          timeout_keep_alive=limits.keep_alive_s,
                          timeout_graceful_shutdown=limits.shutdown_timeout_s)
