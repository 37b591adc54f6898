"""The upstream OpenAI-compatible server (vLLM, SGLang, a hosted API) behind the endpoint, over httpx.

Every failure becomes an :class:`~.protocol.APIError` the client can act on: unreachable or a server error → 502,
timeout → 504, a chat completion that is not one (not JSON, no ``choices``) → 502, a 4xx about the request itself
(400/404/413/422/429) → the same status with the upstream's message. Retries are httpx's transport retries: a
connection that failed to open is retried ``retries`` times; a request the upstream received is not resent (it
may have generated already, and generation is the expensive part)."""
from __future__ import annotations

import json
import os
import time
from typing import Any, AsyncIterator

import httpx
from pydantic import ValidationError

from .protocol import APIError, ChatResponse, validation_error

PASSED_THROUGH = {400, 404, 413, 422, 429}   # upstream statuses about the client's request, not the gateway


class Upstream:
    # No defaults here: the serve config's upstream group (ServeUpstream) is where they are written, once;
    # from_config passes them all.
    def __init__(self, base_url: str, *, api_key: str | None, timeout_s: float, connect_timeout_s: float,
                 retries: int, max_connections: int, transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._client = httpx.AsyncClient(
            base_url=self.base_url + "/",
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            transport=transport or httpx.AsyncHTTPTransport(retries=retries))
        self.last_latency_s = 0.0

    @classmethod
    def from_config(cls, cfg: Any, transport: httpx.AsyncBaseTransport | None = None) -> "Upstream":
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        return cls(cfg.base_url, api_key=key, timeout_s=cfg.timeout_s, connect_timeout_s=cfg.connect_timeout_s,
                   retries=cfg.retries, max_connections=cfg.max_connections, transport=transport)

    def _transport_error(self, e: httpx.HTTPError, what: str) -> APIError:
        """A failed connection, request or stream as the client sees it: a timeout 504, anything else 502."""
        if isinstance(e, httpx.TimeoutException):
            return APIError(504, f"upstream {self.base_url} timed out ({type(e).__name__})", code="upstream_timeout")
        return APIError(502, f"upstream {self.base_url} {what}: {type(e).__name__}: {e}", code="upstream_unreachable")

    def _status_error(self, r: httpx.Response) -> APIError:
        """An error status: one about the client's request passes through with the upstream's message, others 502."""
        detail = _error_message(r)
        if r.status_code in PASSED_THROUGH:
            return APIError(r.status_code, f"upstream rejected the request: {detail}", code="upstream_rejected")
        return APIError(502, f"upstream {self.base_url} answered {r.status_code}: {detail}", code="upstream_error")

    async def _request(self, method: str, path: str, json: dict | None = None) -> tuple[dict, float]:
        start = time.perf_counter()
        try:
            r = await self._client.request(method, path, json=json)
        except httpx.HTTPError as e:
            raise self._transport_error(e, "unreachable") from e
        latency = time.perf_counter() - start
        if r.status_code >= 400:
            raise self._status_error(r)
        try:
            body = r.json()
        except ValueError as e:
            raise APIError(502, f"upstream {self.base_url} answered {r.status_code} with a body that is not JSON: "
                                f"{r.text[:200]!r}", code="upstream_garbage") from e
        if not isinstance(body, dict):
            raise APIError(502, f"upstream {self.base_url} answered a JSON {type(body).__name__}, not an object",
                           code="upstream_garbage")
        return body, latency

    async def chat(self, payload: dict) -> tuple[dict, float]:
        """The upstream's chat completion for ``payload`` (validated) and the request's latency in seconds."""
        body, latency = await self._request("POST", "chat/completions", json=payload)
        try:
            ChatResponse.model_validate(body)
        except ValidationError as e:
            raise validation_error(e, f"upstream {self.base_url} answered an invalid chat completion", 502,
                                   "upstream_garbage") from e
        return body, latency

    async def stream_chat(self, payload: dict) -> AsyncIterator[dict]:
        """The upstream's chat completion for ``payload`` streamed (``stream: true``): each SSE event's JSON chunk as
        it arrives. Failures before the first byte are the same errors as :meth:`chat`'s; an error event mid-stream
        (``data: {"error": ...}``), a chunk that is not JSON, or a broken connection raise an :class:`APIError`
        (502) at that point; a read timeout (no chunk for ``timeout_s``) 504. Leaving the iteration early (the
        client went away) closes the upstream connection, which is how an OpenAI-compatible server learns to stop
        generating."""
        try:
            async with self._client.stream("POST", "chat/completions", json=payload) as r:
                if r.status_code >= 400:
                    await r.aread()
                    raise self._status_error(r)
                data: list[str] = []
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        data.append(line[5:].strip())
                        continue
                    if line or not data:    # an event: / id: / comment line, or a blank line between nothing
                        continue
                    event, data = "\n".join(data), []
                    if event == "[DONE]":
                        return
                    try:
                        chunk = json.loads(event)
                    except ValueError as e:
                        raise APIError(502, f"upstream {self.base_url} streamed a chunk that is not JSON: "
                                            f"{event[:200]!r}", code="upstream_garbage") from e
                    if not isinstance(chunk, dict):
                        raise APIError(502, f"upstream {self.base_url} streamed a JSON {type(chunk).__name__}, not "
                                            f"an object", code="upstream_garbage")
                    if chunk.get("error"):
                        err = chunk["error"]
                        detail = err.get("message") if isinstance(err, dict) else err
                        raise APIError(502, f"upstream {self.base_url} failed mid-stream: {str(detail)[:500]}",
                                       code="upstream_error")
                    yield chunk
        except httpx.HTTPError as e:
            raise self._transport_error(e, "stream broke") from e

    async def models(self) -> list[str]:
        body, _ = await self._request("GET", "models")
        data = body.get("data")
        if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in data):
            raise APIError(502, f"upstream {self.base_url}/models answered no model list", code="upstream_garbage")
        return [m["id"] for m in data]

    async def aclose(self) -> None:
        await self._client.aclose()


def _error_message(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
    except (ValueError, AttributeError):
        pass
    return r.text[:200] or r.reason_phrase
