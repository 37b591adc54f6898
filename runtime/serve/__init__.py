"""``python -m runtime.serve``: an OpenAI-compatible endpoint that puts toolwise's exported gates
in front of any OpenAI-compatible server (vLLM, SGLang, a hosted API).

* :mod:`.app` — the FastAPI app (``create_app(cfg, gates, upstream)``): routes, API keys, limits, errors;
* :mod:`.gating` — one gated completion: ToolGate on proposed calls, G-STEP on answers, re-asks;
* :mod:`.upstream` — the upstream over httpx, its failures as 502/504;
* :mod:`.protocol` — the request/response models (pydantic) and the OpenAI-style error body;
* :mod:`.local` — ``upstream=local``: the policy in this process (Probe&Prefill), generating in slices;
* :mod:`.server` — how uvicorn runs the app (its public settings only), the request body's deadline (ASGI), and
  what is a reverse proxy's to bound;
* :mod:`.disconnect` — a client that leaves cancels its request's work (``http.disconnect``);
* :mod:`.auth`, :mod:`.metrics` — bearer keys, Prometheus metrics;
* :mod:`.testing` — a scripted upstream and forced gates (tests, the load benchmark, trying it without a model).
"""
from .app import create_app
from .upstream import Upstream

__all__ = ["create_app", "Upstream"]
