"""Load test of the gated endpoint (``python -m runtime.serve``), loopback only.

    python benchmarks/serve_load.py [--requests 500] [--concurrency 16] [--upstream-delay-ms 20] \
        [--gates forced|reference]

Three processes on 127.0.0.1: a scripted OpenAI-compatible upstream (``serve/testing.py``; it answers after
``--upstream-delay-ms``, standing in for generation), the endpoint in front of it, and this client, which sends
``--requests`` chat completions, ``--concurrency`` at a time, with the official ``openai``-style body over httpx.
Half the requests offer tools and get a proposed call (a ToolGate decision), half carry a tool result and get an
answer (a G-STEP decision); the gates never skip or continue, so each request is one upstream call.

``--gates forced``: the test double's gates (decide at once: the figures are the endpoint's own overhead);
``--gates reference``: the committed ToolGate and G-STEP (recipes/checkpoints/reference.yaml) through the runtime
API (``runtime.api``), MiniLM and all — their decision latency is then in the added latency.

Added latency per request = the client's wall time − the upstream time the endpoint measured for it
(``toolwise.upstream_ms``): parsing, keys, gates, JSON and the extra loopback hop. ``lost`` counts requests that
got no HTTP response at all. Ends with one line:
``requests=… errors=… lost=… p50_added_ms=… p99_added_ms=… toolgate_ms=…``.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import time

import httpx
import numpy as np
import uvicorn

import recipes
from runtime.serve import Upstream, create_app
from runtime.serve.testing import ForcedGates, ScriptedUpstream, free_port

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
ASK = [{"role": "user", "content": "What is 6*7? Use the calculator if you need it."}]
ANSWER = ASK + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"x": 0}'}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": '{"success": true, "result": 42}'}]


def run_upstream(port: int, delay_s: float) -> None:
    uvicorn.run(ScriptedUpstream(delay_s=delay_s).app, host="127.0.0.1", port=port, log_level="error")


def run_endpoint(port: int, upstream_port: int, gates: str) -> None:
    cfg = recipes.compose("serve", [f"upstream.base_url=http://127.0.0.1:{upstream_port}/v1", f"port={port}",
                                    "upstream.models=[scripted]", "gates.logprobs=true"])
    if gates == "reference":
        ref = recipes.compose("rollout").checkpoints
        # why here: the runtime API loads torch, the controllers and MiniLM; the forced run needs none of it
        from runtime.api import Gates

        loaded = Gates.load(toolgate=ref.toolgate, g_step=ref.g_step)
    else:
        loaded = ForcedGates()
    app = create_app(cfg, loaded, Upstream.from_config(cfg.upstream))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


async def wait_up(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(url)).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not come up in {timeout_s:.0f} s")
            await asyncio.sleep(0.1)


async def load(base: str, n: int, concurrency: int) -> tuple[list[dict], int, int]:
    sem = asyncio.Semaphore(concurrency)
    results: list[dict] = []
    errors = lost = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        async def one(i: int) -> None:
            nonlocal errors, lost
            body = {"model": "scripted", "messages": ASK if i % 2 == 0 else ANSWER, "tools": TOOLS}
            async with sem:
                start = time.perf_counter()
                try:
                    r = await client.post("/v1/chat/completions", json=body)
                except httpx.HTTPError:
                    lost += 1
                    return
                wall_ms = (time.perf_counter() - start) * 1000
            if r.status_code != 200:
                errors += 1
                return
            tw = r.json()["toolwise"]
            results.append({"wall_ms": wall_ms, "upstream_ms": tw["upstream_ms"], "decisions": tw["decisions"]})

        await asyncio.gather(*(one(i) for i in range(n)))
    return results, errors, lost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--upstream-delay-ms", type=float, default=20.0)
    ap.add_argument("--gates", choices=["forced", "reference"], default="forced")
    args = ap.parse_args()

    up_port, ep_port = free_port(), free_port()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=run_upstream, args=(up_port, args.upstream_delay_ms / 1000), daemon=True),
             ctx.Process(target=run_endpoint, args=(ep_port, up_port, args.gates), daemon=True)]
    for p in procs:
        p.start()
    try:
        base = f"http://127.0.0.1:{ep_port}"
        asyncio.run(wait_up(f"http://127.0.0.1:{up_port}/v1/models"))
        asyncio.run(wait_up(f"{base}/health"))
        asyncio.run(load(base, 16, args.concurrency))             # warm-up: connections, first gate calls
        start = time.perf_counter()
        results, errors, lost = asyncio.run(load(base, args.requests, args.concurrency))
        elapsed = time.perf_counter() - start
    finally:
        for p in procs:
            p.terminate()
            p.join(timeout=10)

    added = np.array([r["wall_ms"] - r["upstream_ms"] for r in results]) if results else np.array([np.nan])
    upstream = [r["upstream_ms"] for r in results] or [float("nan")]
    gate_ms = {g: [d["latency_ms"] for r in results for d in r["decisions"] if d["gate"] == g]
               for g in ("toolgate", "g_step")}
    med = {g: statistics.median(v) if v else float("nan") for g, v in gate_ms.items()}
    print(f"gates={args.gates} requests={args.requests} concurrency={args.concurrency} "
          f"elapsed_s={elapsed:.2f} throughput_rps={len(results) / elapsed:.1f}")
    print(f"{'median ms':>24} | upstream {statistics.median(upstream):8.2f} | toolgate {med['toolgate']:8.3f} | "
          f"g_step {med['g_step']:8.3f} | added p50 {np.percentile(added, 50):8.2f} p99 "
          f"{np.percentile(added, 99):8.2f}")
    print(f"requests={args.requests} errors={errors} lost={lost} p50_added_ms={np.percentile(added, 50):.2f} "
          f"p99_added_ms={np.percentile(added, 99):.2f} toolgate_ms={med['toolgate']:.3f}")


if __name__ == "__main__":
    main()
