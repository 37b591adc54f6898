"""Is the endpoint's memory bounded? The local policy's resident memory over many requests that each differ in what
the server caches per request shape, with the caches bounded (today) and unbounded (the previous code), each in its
own process, in one run.

    python benchmarks/serve_memory.py [--requests 300] [--every 50]

The embedded SmolLM2-135M-Instruct (``upstream=local``, HF backend) behind the endpoint, driven in process (httpx's
ASGI transport). Every request sends a ``stop`` string never sent before (the HF backend builds a stop-string
criterion per distinct ``stop``, ≈ 2 MiB for this vocabulary) and every fifth a tool set never sent before with
``tool_choice: required`` (a compiled xgrammar grammar, when xgrammar is installed), ``max_tokens=4``: what a
fuzzer, or a fleet of different agents, sends. Prints the RSS every ``--every`` requests and one line per setting:
``setting=… requests=… rss_start_mib=… rss_end_mib=… growth_mib=… growth_last_half_mib=…``. Bounded, the growth
levels off once the caches are full; unbounded, it keeps climbing."""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys

SETTINGS = {"bounded": {}, "unbounded": {"max_stop_criteria": 10**9, "max_grammars": 10**9}}


def child(setting: str, requests: int, every: int) -> None:
    import httpx
    import psutil

    import recipes
    from data_builders.backends import grammar
    from data_builders.backends.hf import HFBackend
    from data_builders.backends.loading import backend_from_config
    from data_builders.agent.openai_messages import call_format_of
    from runtime.serve import create_app
    from runtime.serve.local import LocalUpstream

    limits = SETTINGS[setting]
    if "max_stop_criteria" in limits:
        HFBackend.max_stop_criteria = limits["max_stop_criteria"]
        grammar.GrammarCache.max_grammars = limits["max_grammars"]
    backend = backend_from_config({"name": "smollm2"}, {"name": "hf"})
    app = create_app(recipes.compose("serve", ["upstream=local"]), None,
                     LocalUpstream(backend, call_format=call_format_of(backend.fingerprint)))
    proc = psutil.Process()
    rss = []

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench",
                                     timeout=600) as client:
            for i in range(requests):
                body = {"model": backend.model_id, "max_tokens": 4, "stop": [f"~{i}~"],
                        "messages": [{"role": "user", "content": f"Say a number. Request {i}."}]}
                if i % 5 == 0:
                    body["tools"] = [{"type": "function", "function": {
                        "name": f"tool_{i}", "description": "a tool",
                        "parameters": {"type": "object", "properties": {f"field_{i}": {"type": "integer"}}}}}]
                    body["tool_choice"] = "required"
                r = await client.post("/v1/chat/completions", json=body)
                if r.status_code >= 500 and r.json()["error"]["code"] != "tool_choice_not_followed":
                    raise SystemExit(f"request {i}: {r.status_code} {r.text[:300]}")
                if i == 0 or (i + 1) % every == 0:
                    rss.append(proc.memory_info().rss / 2**20)
                    print(f"  {setting}: {i + 1} requests, rss {rss[-1]:.0f} MiB", flush=True)

    asyncio.run(run())
    half = len(rss) // 2
    print(json.dumps({"setting": setting, "requests": requests, "rss_start_mib": round(rss[0]),
                      "rss_end_mib": round(rss[-1]), "growth_mib": round(rss[-1] - rss[0]),
                      "growth_last_half_mib": round(rss[-1] - rss[half])}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--child", choices=sorted(SETTINGS))
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.requests, args.every)
    for setting in SETTINGS:        # one process each: RSS is per process
        out = subprocess.run([sys.executable, __file__, "--child", setting, "--requests", str(args.requests),
                              "--every", str(args.every)], capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                print(" ".join(f"{k}={v}" for k, v in json.loads(line).items()), flush=True)
            else:
                print(line, flush=True)


if __name__ == "__main__":
    main()
