"""The FastAPI app: routes, limits, keys and errors around :class:`~.gating.Gater`.

``create_app(cfg, gates, upstream)`` takes the gates and the upstream as objects, so a test injects forced gates
and a fake upstream; ``python -m runtime.serve`` builds the real ones from the config."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, Callable

from anyio import to_thread

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from data_builders.gates import gates as registered

from .auth import key_matches, load_api_keys
from .capture import Capture
from .disconnect import unless_disconnected
from .gating import GATE_MODES, Gater, GatePolicy
from .metrics import Metrics
from .protocol import APIError, ChatRequest, validation_error
from .server import BodyDeadline, ShutdownResponses
from .streaming import stream_completion
from .upstream import Upstream

ROUTES = {"/v1/chat/completions", "/v1/models", "/health", "/metrics", "/admin/reload"}


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``limit`` bytes (before reading it all when
    Content-Length says so). How long it may take to arrive is :class:`~.server.BodyDeadline`'s (408)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes",
                       code="request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise APIError(413, f"request body exceeds the limit of {limit} bytes", code="request_too_large")
    return bytes(body)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_depth(value: Any, limit: int) -> int:
    """The nesting depth of a decoded JSON value, counted without recursion and only up to ``limit + 1``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_request(raw: bytes, max_messages: int, max_depth: int = 64) -> tuple[dict, ChatRequest]:
    if not raw.strip():
        raise APIError(400, "empty request body: send a JSON chat completion request", code="invalid_json")
    try:
        # NaN / Infinity are Python's extension, not JSON: they would reach sampling parameters and the upstream
        body = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:      # the decoder recursed past Python's limit: nesting no request needs
        raise APIError(400, "request body is not valid JSON: nested too deeply", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, f"request body is not valid JSON: {e}", code="invalid_json") from e
    if not isinstance(body, dict):
        raise APIError(400, f"request body must be a JSON object, not a {type(body).__name__}", code="invalid_json")
    # every later step (validation, the chat template, the upstream's JSON encoder) may recurse into the body
    if json_depth(body, max_depth) > max_depth:
        raise APIError(400, f"request body nests JSON deeper than {max_depth} levels (limits.max_json_depth)",
                       code="invalid_json")
    try:
        req = ChatRequest.model_validate(body)
    except ValidationError as e:
        raise validation_error(e, "invalid request") from e
    if len(req.messages) > max_messages:
        raise APIError(400, f"{len(req.messages)} messages exceed the limit of {max_messages}",
                       code="too_many_messages", param="messages")
    if (req.n or 1) != 1:
        raise APIError(400, "n must be 1: the gates decide on one turn", code="invalid_request", param="n")
    return body, req


#: a header value the server sends at most (h11, which httpx and so the openai client use, refuses a response
#: whose header block passes 16 KiB): a longer ``x-toolwise-injected`` is left out (the body still has it)
MAX_HEADER_BYTES = 6144


def _header_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))    # ASCII, no CR/LF: a valid header value


def decision_headers(toolwise: dict) -> dict[str, str]:
    """The body's ``toolwise`` decisions as response headers, for clients whose framework keeps headers but drops
    unknown body fields (LangChain's ``ChatOpenAI(include_response_headers=True)`` puts them in
    ``response_metadata["headers"]``; the openai client: ``.with_raw_response``). ``x-toolwise-decisions``: compact
    JSON, one ``{gate, action, applied, p, tau, round[, call_id][, reason][, mode]}`` per decision (no p / tau for a
    gate that failed);
    ``x-toolwise-injected``: the injected messages as compact JSON, left out when over :data:`MAX_HEADER_BYTES`
    (``x-toolwise-injected-count`` always says how many there are)."""
    keep = {"gate": "gate", "action": "action", "applied": "applied", "probability": "p", "tau": "tau",
            "round": "round", "call_id": "call_id", "reason": "reason", "mode": "mode"}   # a failed gate: no p / tau
    decisions = [{short: round(d[k], 4) if isinstance(d[k], float) else d[k]
                  for k, short in keep.items() if d.get(k) is not None} for d in toolwise["decisions"]]
    headers = {"x-toolwise-decisions": _header_json(decisions),
               "x-toolwise-upstream-calls": str(toolwise["upstream_calls"]),
               "x-toolwise-injected-count": str(len(toolwise["injected"]))}
    injected = _header_json(toolwise["injected"])
    if len(injected) <= MAX_HEADER_BYTES:
        headers["x-toolwise-injected"] = injected
    return headers


class CountRequests:
    """Counts every HTTP request by route and status. Plain ASGI, not ``@app.middleware("http")``: starlette's
    BaseHTTPMiddleware keeps the client's disconnect from the endpoint, so a request whose client left would
    generate on (:mod:`.disconnect`)."""

    def __init__(self, app: Any, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = 500        # what the server's error handler sends when the app raises past every handler

        async def sending(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.requests.labels(route, str(status)).inc()


class Reloader:
    """Gate reloads (SIGHUP, ``POST /admin/reload``): ``load(paths)`` builds new gates from gate -> checkpoint paths
    (None: the configured ones, reread: a promoted checkpoint behind the same path), off the event loop; the
    :class:`~.gating.Gater` then swaps them in. One reload at a time; a failed one leaves the serving gates as they
    were. Requests never wait for a reload (the old gates decide until the swap)."""

    def __init__(self, load: Callable[[dict | None], Any] | None, gater: Gater, metrics: Metrics):
        self.load, self.gater, self.metrics = load, gater, metrics
        self.lock = threading.Lock()
        self.paths: dict | None = None      # the paths the serving gates came from, once a reload named new ones

    def reload(self, paths: dict | None = None, modes: dict | None = None) -> dict:
        """Load and swap (blocking: call from a thread); ``modes`` (gate -> enforce | shadow) apply with the new
        gates, e.g. a promoted gate leaving shadow mode. Returns what was loaded; raises on failure."""
        if self.load is None:
            raise APIError(409, "this server was started without a gate loader: nothing to reload",
                           code="reload_unavailable")
        if not self.lock.acquire(blocking=False):
            raise APIError(409, "a reload is already running", code="reload_in_progress")
        started = time.perf_counter()
        try:
            wanted = {**(self.paths or {}), **(paths or {})} or None
            gates = self.load(wanted)
            self.gater.swap(gates)
            if modes:
                # a new dict, assigned whole: a request reading the modes sees the old ones or the new ones
                self.gater.policy.modes = {**self.gater.policy.modes, **modes}
            if paths:
                self.paths = wanted
        except Exception as e:
            self.metrics.gate_reloads.labels("failed").inc()
            logging.getLogger(__name__).error("gate reload failed, the serving gates stay: %s: %s",
                                              type(e).__name__, e)
            if isinstance(e, APIError):
                raise
            raise APIError(500, f"gate reload failed, the serving gates stay: {type(e).__name__}: {e}"[:500],
                           code="reload_failed") from e
        finally:
            self.lock.release()
        self.metrics.gate_reloads.labels("ok").inc()
        loaded = {m: gates.at(m) for m in ("pre_generation", "pre_call", "on_answer")} if gates is not None else {}
        loaded = {m: names for m, names in loaded.items() if names}
        seconds = round(time.perf_counter() - started, 3)
        logging.getLogger(__name__).warning("gates reloaded in %.2f s: %s", seconds, loaded)
        return {"reloaded": loaded, "modes": dict(self.gater.policy.modes), "seconds": seconds}


def create_app(cfg: Any, gates: Any, upstream: Upstream, reload_gates: Callable[[dict | None], Any] | None = None
               ) -> FastAPI:
    """``cfg``: the ``serve`` config (recipes/serve.yaml); ``gates``: a :class:`runtime.api.Gates`
    (or anything with its ``tool_call``/``answer``), None for a plain proxy; ``upstream``: the server behind;
    ``reload_gates(paths)``: new gates for a reload (``paths``: gate -> checkpoint overrides, None: as configured)."""
    policy = GatePolicy(on_error=cfg.gates.on_error, max_reasks=cfg.gates.max_reasks,
                        max_continues=cfg.gates.max_continues,
                        logprobs=(any(g.reads_logprobs and cfg.gates.get(name) is not None
                                      for name, g in registered().items())
                                  if cfg.gates.logprobs is None else cfg.gates.logprobs),
                        concurrency=cfg.gates.concurrency, prefill_style=cfg.gates.prefill_style,
                        modes=dict(cfg.gates.get("modes") or {}), logprobs_auto=cfg.gates.logprobs is None)
    keys = load_api_keys(cfg.auth)
    metrics = Metrics()
    capture = Capture.from_config(cfg.get("capture"), metrics)
    gater = Gater(gates, upstream, policy, metrics, capture)
    reloader = Reloader(reload_gates, gater, metrics)
    admin_env = cfg.auth.get("admin_env")
    admin_key = os.environ.get(admin_env) if admin_env else None
    models: list[str] = list(cfg.upstream.models or [])

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await upstream.aclose()
        if capture is not None:     # what is still queued reaches disk before the process ends
            capture.close()

    app = FastAPI(title="toolwise gated endpoint", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.metrics, app.state.gater, app.state.capture, app.state.reloader = metrics, gater, capture, reloader
    bearer = HTTPBearer(auto_error=False)

    def require_key(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if not keys:
            return
        if creds is None:
            raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
        if not key_matches(creds.credentials, keys):
            raise APIError(401, "invalid API key", code="invalid_api_key")

    async def served_models() -> list[str]:
        if not models:      # none configured: the upstream's own list, asked once
            models.extend(await upstream.models())
        return models

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError) -> JSONResponse:
        metrics.errors.labels(str(e.status), e.code).inc()
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "unknown_route", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return await api_error(request, APIError(e.status_code, f"{request.method} {request.url.path}: {e.detail}",
                                                 code=code))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:
        metrics.errors.labels("500", "internal_error").inc()
        return JSONResponse(APIError(500, f"internal error: {type(e).__name__}", code="internal_error").body(),
                            status_code=500)

    app.add_middleware(BodyDeadline, timeout_s=cfg.limits.body_timeout_s)
    app.add_middleware(ShutdownResponses, metrics=metrics)      # inside CountRequests: its 503s are counted
    app.add_middleware(CountRequests, metrics=metrics)

    @app.get("/health")
    async def health(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> dict:
        """Liveness for anyone (a load balancer's probe sends no key); what is served, and from where (the upstream's
        URL, for upstream=local the policy's fingerprint and adapter path), only to a client the keys admit."""
        if keys and (creds is None or not key_matches(creds.credentials, keys)):
            return {"status": "ok"}
        serving = gater.gates
        return {"status": "ok", "upstream": upstream.base_url,
                "gates": {g: serving is not None and getattr(serving, g, None) is not None for g in registered()}}

    @app.post("/admin/reload")
    async def admin_reload(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> dict:
        """Reload the gates from their checkpoints (body ``{"gates": {"<gate>": "<path>"}}`` points a gate
        elsewhere, ``{"modes": {"<gate>": "enforce"}}`` takes it out of shadow), admitted by the admin key alone
        (``auth.admin_env``); off (404) without one."""
        if not admin_key:
            raise APIError(404, "POST /admin/reload: off (no admin key: set the variable auth.admin_env names)",
                           code="unknown_route")
        if creds is None or not key_matches(creds.credentials, frozenset([admin_key])):
            raise APIError(401, "the admin key is required", code="invalid_admin_key")
        raw = await read_body(request, cfg.limits.max_body_bytes)
        try:
            body = json.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict) or set(body) - {"gates", "modes"}:
                raise ValueError
            paths, modes = body.get("gates"), body.get("modes")
            for value in (paths, modes):
                if value is not None and not (isinstance(value, dict) and all(
                        isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
                    raise ValueError
        except ValueError:
            raise APIError(400, 'expected {"gates": {"<gate>": "<checkpoint path>"}, "modes": {"<gate>": '
                                '"enforce|shadow"}} (both optional) or an empty body', code="invalid_request") from None
        unknown = sorted((set(paths or {}) | set(modes or {})) - set(registered()))
        if unknown:
            raise APIError(400, f"unknown gates {unknown}; known: {sorted(registered())}", code="invalid_request")
        bad = {g: m for g, m in (modes or {}).items() if m not in GATE_MODES}
        if bad:
            raise APIError(400, f"modes {bad}: each is one of {GATE_MODES}", code="invalid_request")
        return await to_thread.run_sync(reloader.reload, paths, modes)

    @app.get("/metrics", dependencies=[Depends(require_key)])
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=[Depends(require_key)])
    async def list_models() -> dict:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "toolwise"}
                                           for m in await served_models()]}

    @app.post("/v1/chat/completions", dependencies=[Depends(require_key)])
    async def chat_completions(request: Request) -> JSONResponse:
        body, req = parse_request(await read_body(request, cfg.limits.max_body_bytes),
                                  cfg.limits.max_messages, cfg.limits.max_json_depth)
        if req.model not in await served_models():
            raise APIError(404, f"model {req.model!r} is not served here (GET /v1/models lists them)",
                           code="model_not_found", param="model")
        if req.stream:      # server-sent events; what is held for the gates and what streams: streaming.py
            return await stream_completion(request, gater, body)
        start = time.perf_counter()
        result = await unless_disconnected(request, gater.complete(body, body["messages"]))
        result["toolwise"]["wall_ms"] = round((time.perf_counter() - start) * 1000, 3)
        return JSONResponse(result, headers=decision_headers(result["toolwise"]))

    return app
