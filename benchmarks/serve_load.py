"""Load test of the gated endpoint (``python -m runtime.serve``), loopback only.

    python benchmarks/serve_load.py [--requests 500] [--concurrency 16] [--upstream-delay-ms 20] \
        [--gates forced|reference] [--capture [--null] | --reload-every S]

Processes on 127.0.0.1: a scripted OpenAI-compatible upstream (``serve/testing.py``; it answers after
``--upstream-delay-ms``, standing in for generation), the server under test in front of it, and this client, which
sends ``--requests`` chat completions, ``--concurrency`` at a time, with the official ``openai``-style body over
httpx. Three servers are measured in turn, in the same run: the endpoint with ``--gates`` (and once more with
``--serve-set`` overrides, when given), the endpoint with no gates, and a LiteLLM proxy (no gates; only when
``litellm[proxy]`` is installed, ``pip install -e ".[litellm]"``). The endpoint runs under the uvicorn config
``python -m runtime.serve`` uses. Half the requests offer tools and get a proposed call (a ToolGate decision), half
carry a tool result and get an answer (a G-STEP decision); each request asks its own question, so no cache of
repeated text can stand in for a gate's work. A skip or a continue costs the request another upstream call: the
forced gates never decide either, the reference ones decide as they were trained (``upstream_calls`` counts them).

``--gates forced``: the test double's gates (decide at once: the figures are the endpoint's own overhead);
``--gates reference``: the committed ToolGate and G-STEP (recipes/checkpoints/reference.yaml) through the runtime
API (``runtime.api``), MiniLM and all — their decision latency is then in the added latency.

Added latency per request = the client's wall time − the upstream time the endpoint measured for it
(``toolwise.upstream_ms``; LiteLLM reports no such time, so its line has wall times only): parsing, keys, gates,
JSON and the extra loopback hop. ``lost`` counts requests that got no HTTP response at all. Ends with
one line per server: ``server=… requests=… errors=… lost=… rps=… p50_ms=… p99_ms=… upstream_calls=…``, then the CPU
time per request of each process (``cpu_ms_endpoint=… cpu_ms_upstream=… cpu_ms_client=…``, LiteLLM's as
``cpu_ms_litellm``) and ``cores_busy=…`` (the machine's cores busy over the run: near 1, the figures are set by CPU,
not by waiting), the gated one also ``p50_added_ms=… p99_added_ms=… toolgate_ms=…``.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing as mp
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np
import uvicorn

import recipes
from runtime.serve import Upstream, create_app
from runtime.serve.server import uvicorn_config
from data_builders.gates import gates_at
from runtime.serve.testing import ForcedGates, ScriptedUpstream, free_port

#: the gates this load exercises: the registry's first at a proposed call and at an answer
TOOLGATE, GSTEP = (gates_at(moment)[0].name for moment in ("pre_call", "on_answer"))

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]


def ask(i: int) -> list[dict]:
    """Request ``i``'s question: each its own, so no cache of repeated text can stand in for the gate's work."""
    return [{"role": "user", "content": f"What is {i}*7? Use the calculator if you need it."}]


def answer(i: int) -> list[dict]:
    """Request ``i``'s conversation after its call's result: G-STEP judges the answer."""
    return ask(i) + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": '{"x": 0}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": f'{{"success": true, "result": {i * 7}}}'}]


def run_upstream(port: int, delay_s: float) -> None:
    uvicorn.run(ScriptedUpstream(delay_s=delay_s).app, host="127.0.0.1", port=port, log_level="error")


def gate_loader(gates: str):
    """What the endpoint serves for ``--gates`` (and loads again on each reload)."""
    if gates == "none":
        return lambda paths=None: None
    if gates == "reference":
        ref = recipes.compose("rollout").checkpoints
        # why here: the runtime API loads torch, the controllers and MiniLM; the forced run needs none of it
        from runtime.api import Gates

        return lambda paths=None: Gates.load({g: ref[g] for g in (TOOLGATE, GSTEP)}).warmup()
    return lambda paths=None: ForcedGates()


def run_endpoint(port: int, upstream_port: int, gates: str, capture_dir: str | None = None,
                 admin_key: str | None = None, overrides: tuple = ()) -> None:
    if admin_key:
        os.environ["TOOLWISE_ADMIN_KEY"] = admin_key
    cfg = recipes.compose("serve", [f"upstream.base_url=http://127.0.0.1:{upstream_port}/v1", f"port={port}",
                                    "upstream.models=[scripted]", "gates.logprobs=true",
                                    *([f"capture.dir={capture_dir}"] if capture_dir else []), *overrides])
    load = gate_loader(gates)
    app = create_app(cfg, load(), Upstream.from_config(cfg.upstream), reload_gates=load)
    # served as `python -m runtime.serve` serves it (h11, the connection and shutdown limits), not uvicorn's defaults
    uvicorn.Server(uvicorn_config(app, cfg.limits, host="127.0.0.1", port=port, log_level="error")).run()


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


def start_litellm(port: int, upstream_port: int, root: str) -> tuple[subprocess.Popen, str] | None:
    """A LiteLLM proxy (no guardrail) in front of the same upstream, or None when litellm[proxy] is not installed.
    Returns (the process, its master key)."""
    if importlib.util.find_spec("litellm") is None:
        return None
    config = {"model_list": [{"model_name": "scripted", "litellm_params": {
        "model": "openai/scripted", "api_base": f"http://127.0.0.1:{upstream_port}/v1", "api_key": "unused"}}]}
    path = os.path.join(root, "litellm.yaml")
    with open(path, "w") as f:
        json.dump(config, f)        # JSON is YAML
    key = f"sk-{secrets.token_hex(24)}"
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen([sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", path, "--host",
                             "127.0.0.1", "--port", str(port)], cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    return proc, key


async def load(base: str, n: int, concurrency: int, headers: dict | None = None) -> tuple[list[dict], int, int]:
    sem = asyncio.Semaphore(concurrency)
    results: list[dict] = []
    errors = lost = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits, headers=headers) as client:
        async def one(i: int) -> None:
            nonlocal errors, lost
            body = {"model": "scripted", "messages": ask(i) if i % 2 == 0 else answer(i), "tools": TOOLS}
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
            tw = r.json().get("toolwise") or {"upstream_ms": None, "decisions": [], "upstream_calls": 1}
            results.append({"wall_ms": wall_ms, "upstream_ms": tw["upstream_ms"], "decisions": tw["decisions"],
                            "upstream_calls": tw["upstream_calls"]})

        await asyncio.gather(*(one(i) for i in range(n)))
    return results, errors, lost


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system, all threads) each process of ``pids`` has used so far; psutil, which
    ``benchmarks/serve_memory.py`` uses too, comes with the project's dependencies."""
    import psutil

    times = {name: psutil.Process(pid).cpu_times() for name, pid in pids.items()}
    return {name: t.user + t.system for name, t in times.items()}


_CPU_PER_REQUEST = {}      # the last measure()'s CPU per request by process, for report()


def measure(base: str, args, headers: dict | None = None, pids: dict[str, int] | None = None
            ) -> tuple[list[dict], int, int, float]:
    """The load on ``base`` after a warm-up; ``pids``: the server-side processes whose CPU time per request
    :func:`report` prints beside this client's (``cpu_ms_<name>=``) with how busy the machine's cores were
    (``cores_busy=``: the load measured is CPU-bound when it nears 1)."""
    asyncio.run(load(base, 16, args.concurrency, headers))             # warm-up: connections, first gate calls
    pids = {**(pids or {}), "client": os.getpid()}
    before = cpu_seconds(pids)
    start = time.perf_counter()
    results, errors, lost = asyncio.run(load(base, args.requests, args.concurrency, headers))
    elapsed = time.perf_counter() - start
    used = {name: t - before[name] for name, t in cpu_seconds(pids).items()}
    _CPU_PER_REQUEST.clear()
    _CPU_PER_REQUEST.update({f"cpu_ms_{name}": 1000 * t / max(len(results), 1) for name, t in used.items()},
                     cores_busy=sum(used.values()) / elapsed / (os.cpu_count() or 1))
    return results, errors, lost, elapsed


def report(server: str, args, results: list[dict], errors: int, lost: int, elapsed: float,
           upstream_ms: float | None = None) -> str:
    walls = np.array([r["wall_ms"] for r in results]) if results else np.array([np.nan])
    line = (f"server={server} requests={args.requests} errors={errors} lost={lost} "
            f"rps={len(results) / elapsed:.1f} p50_ms={np.percentile(walls, 50):.2f} "
            f"p99_ms={np.percentile(walls, 99):.2f} upstream_calls={sum(r['upstream_calls'] for r in results)}"
            + "".join(f" {k}={v:.2f}" for k, v in _CPU_PER_REQUEST.items()))
    if upstream_ms is None:
        return line
    added = np.array([r["wall_ms"] - r["upstream_ms"] for r in results]) if results else np.array([np.nan])
    gate_ms = {g: [d["latency_ms"] for r in results for d in r["decisions"] if d["gate"] == g]
               for g in (TOOLGATE, GSTEP)}
    med = {g: statistics.median(v) if v else float("nan") for g, v in gate_ms.items()}
    return (line + f" p50_added_ms={np.percentile(added, 50):.2f} p99_added_ms={np.percentile(added, 99):.2f} "
            f"{TOOLGATE}_ms={med[TOOLGATE]:.3f} {GSTEP}_ms={med[GSTEP]:.3f} upstream_ms={upstream_ms:.2f}")


def serve_and_measure(args, up_port: int, gates: str, capture_dir: str | None = None,
                      upstream_pid: int | None = None) -> tuple:
    ctx = mp.get_context("spawn")
    port = free_port()
    endpoint = ctx.Process(target=run_endpoint, args=(port, up_port, gates, capture_dir), daemon=True)
    endpoint.start()
    try:
        base = f"http://127.0.0.1:{port}"
        asyncio.run(wait_up(f"{base}/health"))
        pids = {"endpoint": endpoint.pid, **({"upstream": upstream_pid} if upstream_pid else {})}
        return measure(base, args, pids=pids)
    finally:
        endpoint.terminate()
        endpoint.join(timeout=10)


def compare_capture(args) -> None:
    """``--capture``: what capture adds to a request, off and on in turn (each run its own upstream and server
    processes, the machine to itself), with the median over ``--rounds`` of each setting's p50 added latency and
    requests/s, and how many records reached disk.

    Why the design: run as "off, on" every round, an A/A comparison (``--null``: capture off in both) read −9 %
    requests/s — the second run of a pair was slower whatever it ran, on a shared upstream — and 500 requests (one
    second at ~500/s) left ±10 % between identical runs. So the order alternates (off-on, on-off, ...), each run
    gets a fresh upstream, and the figures are meant for ``--requests 3000 --rounds 4``, where the A/A reads within
    1 %."""
    ctx = mp.get_context("spawn")
    got: dict[str, list] = {"off": [], "on": []}
    for r in range(args.rounds):
        for setting in (("off", "on") if r % 2 == 0 else ("on", "off")):
            up_port = free_port()
            upstream = ctx.Process(target=run_upstream, args=(up_port, args.upstream_delay_ms / 1000), daemon=True)
            upstream.start()
            try:
                asyncio.run(wait_up(f"http://127.0.0.1:{up_port}/v1/models"))
                with tempfile.TemporaryDirectory() as root:
                    capture = root if setting == "on" and not args.null else None
                    results, errors, lost, elapsed = serve_and_measure(args, up_port, args.gates, capture,
                                                                          upstream.pid)
                    stored = sum(1 for f in os.listdir(root) for _ in open(os.path.join(root, f)))
            finally:
                upstream.terminate()
                upstream.join(timeout=10)
            added = [r["wall_ms"] - r["upstream_ms"] for r in results]
            got[setting].append((float(np.percentile(added, 50)), len(results) / elapsed))
            print(report(f"toolwise gates={args.gates} capture={setting}", args, results, errors, lost, elapsed,
                         statistics.median([r["upstream_ms"] for r in results]))
                  + (f" records_stored={stored}" if setting == "on" else ""), flush=True)
    p50 = {k: statistics.median(a for a, _ in v) for k, v in got.items()}
    rps = {k: statistics.median(r for _, r in v) for k, v in got.items()}
    print(f"capture: p50_added_ms off={p50['off']:.2f} on={p50['on']:.2f} ({p50['on'] - p50['off']:+.2f} ms); "
          f"rps off={rps['off']:.1f} on={rps['on']:.1f} ({100 * (rps['on'] / rps['off'] - 1):+.1f} %)")


def under_reloads(args) -> None:
    """``--reload-every S``: the endpoint with ``--gates`` under the load, its gates reloaded (``POST
    /admin/reload``: loaded again from their checkpoints and swapped in) every S seconds while it runs."""
    import threading

    up_port, port, key = free_port(), free_port(), secrets.token_hex(8)
    ctx = mp.get_context("spawn")
    upstream = ctx.Process(target=run_upstream, args=(up_port, args.upstream_delay_ms / 1000), daemon=True)
    upstream.start()
    endpoint = ctx.Process(target=run_endpoint, args=(port, up_port, args.gates, None, key), daemon=True)
    reloads: list[int] = []
    try:
        asyncio.run(wait_up(f"http://127.0.0.1:{up_port}/v1/models"))
        endpoint.start()
        base = f"http://127.0.0.1:{port}"
        asyncio.run(wait_up(f"{base}/health"))
        stop = threading.Event()

        def reloader() -> None:
            while not stop.wait(args.reload_every):
                r = httpx.post(f"{base}/admin/reload", headers={"Authorization": f"Bearer {key}"}, timeout=120)
                reloads.append(r.status_code)

        thread = threading.Thread(target=reloader, daemon=True)
        thread.start()
        results, errors, lost, elapsed = measure(base, args, pids={"endpoint": endpoint.pid, "upstream": upstream.pid})
        stop.set()
        thread.join(timeout=120)
    finally:
        endpoint.terminate()
        upstream.terminate()
    upstream_ms = statistics.median([r["upstream_ms"] for r in results]) if results else float("nan")
    print(report(f"toolwise gates={args.gates} reloading", args, results, errors, lost, elapsed, upstream_ms)
          + f" reloads={len(reloads)} reloads_ok={sum(c == 200 for c in reloads)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--upstream-delay-ms", type=float, default=20.0)
    ap.add_argument("--gates", choices=["forced", "reference"], default="forced")
    ap.add_argument("--serve-set", action="append", default=[], metavar="KEY=VALUE",
                    help="also run the gated endpoint with this serve override (e.g. gates.concurrency=1), "
                         "side by side in the same run; repeatable (all apply to that one extra run)")
    ap.add_argument("--null", action="store_true",
                    help="with --capture: capture off in both settings (an A/A run: the benchmark's own noise)")
    ap.add_argument("--capture", action="store_true",
                    help="instead of the three servers: the endpoint with --gates, traffic capture off and on "
                         "(capture.dir), alternating, --rounds times each")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reload-every", type=float, default=None, metavar="S",
                    help="instead of the three servers: the endpoint with --gates, its gates reloaded every S seconds "
                         "under the load (POST /admin/reload)")
    args = ap.parse_args()
    if args.capture:
        return compare_capture(args)
    if args.reload_every:
        return under_reloads(args)

    up_port = free_port()
    ctx = mp.get_context("spawn")
    upstream = ctx.Process(target=run_upstream, args=(up_port, args.upstream_delay_ms / 1000), daemon=True)
    upstream.start()
    lines = []
    try:
        asyncio.run(wait_up(f"http://127.0.0.1:{up_port}/v1/models"))
        # one server at a time, each with the machine to itself; --serve-set: the gated endpoint once more with
        # other settings (a previous code path), in the same run
        runs = [(args.gates, ()), *(((args.gates, tuple(args.serve_set)),) if args.serve_set else ()), ("none", ())]
        for gates, overrides in runs:
            port = free_port()
            endpoint = ctx.Process(target=run_endpoint, args=(port, up_port, gates, None, None, overrides),
                                   daemon=True)
            endpoint.start()
            try:
                base = f"http://127.0.0.1:{port}"
                asyncio.run(wait_up(f"{base}/health"))
                results, errors, lost, elapsed = measure(base, args,
                                                         pids={"endpoint": endpoint.pid, "upstream": upstream.pid})
            finally:
                endpoint.terminate()
                endpoint.join(timeout=10)
            upstream_ms = statistics.median([r["upstream_ms"] for r in results]) if results else float("nan")
            name = f"toolwise gates={gates}" + "".join(f" {o}" for o in overrides)
            lines.append(report(name, args, results, errors, lost, elapsed, upstream_ms))
            print(lines[-1], flush=True)
        with tempfile.TemporaryDirectory() as root:
            port = free_port()
            started = start_litellm(port, up_port, root)
            if started is None:
                lines.append("server=litellm skipped: litellm[proxy] is not installed (pip install -e '.[litellm]')")
            else:
                proc, key = started
                try:
                    base = f"http://127.0.0.1:{port}"
                    asyncio.run(wait_up(f"{base}/health/liveliness"))
                    results, errors, lost, elapsed = measure(base, args, {"Authorization": f"Bearer {key}"},
                                                             pids={"litellm": proc.pid, "upstream": upstream.pid})
                finally:
                    proc.terminate()
                    proc.wait(timeout=20)
                lines.append(report("litellm", args, results, errors, lost, elapsed))
            print(lines[-1], flush=True)
    finally:
        upstream.terminate()
        upstream.join(timeout=10)
    print(f"gates={args.gates} concurrency={args.concurrency} upstream_delay_ms={args.upstream_delay_ms}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
