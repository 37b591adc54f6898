"""Test doubles for the endpoint: a scripted OpenAI-compatible upstream and gates with forced decisions.

Used by the tests, by ``benchmarks/serve_load.py`` and to try the endpoint without a model. The upstream is an
ASGI app: in process through ``httpx.ASGITransport`` (no socket), or on a loopback port with :func:`serve_in_thread`.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from data_builders.gates import gates_at
from runtime.controller_hooks import GateDecision

from .server import uvicorn_config


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def agent_reply(body: dict) -> dict:
    """A scripted policy: call the first tool until a tool result is in, then answer with it in ``\\boxed{}``;
    without tools, answer at once. Enough for a multi-turn tool episode."""
    messages, tools = body["messages"], body.get("tools") or []
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"The tool says {last['content']}. \\boxed{{42}}"}
    if tools:
        n = sum(m["role"] == "assistant" for m in messages)
        name = tools[0]["function"]["name"]
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps({"x": n})}}]}
    return {"role": "assistant", "content": "\\boxed{42}"}


@dataclass
class ScriptedUpstream:
    """An OpenAI-compatible chat server whose turns come from ``reply(request_body) -> assistant message`` (or a
    whole raw ``fastapi.Response`` to send garbage). Records every request body it received."""
    reply: Callable[[dict], object] = agent_reply
    model: str = "scripted"
    delay_s: float = 0.0
    requests: list = field(default_factory=list)
    # ``stream: true``: SSE chunks, one per word of the content (then the calls), ``token_delay_s`` apart;
    # ``break_after``: the stream breaks after that many chunks, with an error event (``break_with="error"``) or
    # by ending without ``[DONE]`` (``"close"``), as an upstream that fails mid-generation does
    token_delay_s: float = 0.0
    break_after: int | None = None
    break_with: str = "error"
    cancelled: list = field(default_factory=list)   # streams whose client went away before the end

    def __post_init__(self):
        self.app = FastAPI()
        ids = itertools.count()

        @self.app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @self.app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.requests.append(body)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            message = self.reply(body)
            if not isinstance(message, dict):
                return message          # a raw Response: what a broken upstream sends
            tokens = len(str(message.get("content") or "").split()) or 1
            logprobs = ({"content": [{"token": f"t{i}", "logprob": -0.1 * (i + 1), "top_logprobs": []}
                                     for i in range(tokens)]} if body.get("logprobs") else None)
            completion = {"id": f"chatcmpl-{next(ids)}", "object": "chat.completion", "created": int(time.time()),
                          "model": body["model"],
                          "choices": [{"index": 0, "message": message, "logprobs": logprobs,
                                       "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                          "usage": {"prompt_tokens": 10 * len(body["messages"]), "completion_tokens": tokens,
                                    "total_tokens": 10 * len(body["messages"]) + tokens}}
            if body.get("stream"):
                return StreamingResponse(self._sse(completion, body), media_type="text/event-stream")
            return completion

    async def _sse(self, completion: dict, body: dict):
        """``completion`` as OpenAI streams it: a role chunk, a chunk per content word (with its log-prob), each
        call's id and name then its arguments in two pieces, the finish chunk, the usage chunk when
        ``stream_options.include_usage``, ``[DONE]``."""
        choice, base = completion["choices"][0], {k: completion[k] for k in ("id", "created", "model")}
        message = choice["message"]
        words = re.findall(r"\S+\s*", message.get("content") or "")
        lps = (choice["logprobs"] or {}).get("content") or []
        deltas: list[tuple[dict, dict | None]] = [({"role": "assistant", "content": ""}, None)]
        deltas += [({"content": w}, {"content": lps[i:i + 1]} if lps else None) for i, w in enumerate(words)]
        for i, call in enumerate(message.get("tool_calls") or []):
            args = call["function"]["arguments"]
            deltas += [({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                         "function": {"name": call["function"]["name"], "arguments": ""}}]}, None),
                       *(({"tool_calls": [{"index": i, "function": {"arguments": part}}]}, None)
                         for part in (args[:len(args) // 2], args[len(args) // 2:]))]
        chunks = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": d, "logprobs": lp, "finish_reason": None}]} for d, lp in deltas]
        chunks.append({**base, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                    "finish_reason": choice["finish_reason"]}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": completion["usage"]})
        try:
            for n, chunk in enumerate(chunks):
                if self.break_after is not None and n == self.break_after:
                    if self.break_with == "error":
                        error = {"message": "scripted failure mid-stream", "type": "server_error", "code": "scripted"}
                        yield f"data: {json.dumps({'error': error})}\n\n"
                    return
                if n and self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:      # the client (the endpoint) went away mid-stream
            self.cancelled.append(completion["id"])
            raise


@dataclass
class ForcedGates:
    """Gates with the interface of :class:`runtime.api.Gates` whose decisions are forced: the next
    entry of ``tool_actions`` / ``answer_actions`` (then ``default_*``; None: that gate is not loaded). An action
    ``"raise"`` makes the call fail, to test ``on_error``. Records what each call saw in ``seen``."""
    tool_actions: list = field(default_factory=list)
    answer_actions: list = field(default_factory=list)
    default_tool: str | None = "execute"
    default_answer: str | None = "commit"
    seen: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # As runtime.api.Gates.at lists the gates it loaded at a moment: a gate with no decision to give is not loaded
    # (the gating layer does not ask it, and a streamed request does not hold the text it would have judged). The
    # forced decisions are those of the registry's first gate at pre_call and at on_answer.
    def at(self, moment: str) -> list[str]:
        loaded = {"pre_call": bool(self.tool_actions) or self.default_tool is not None,
                  "on_answer": bool(self.answer_actions) or self.default_answer is not None}
        return [gates_at(moment)[0].name] if loaded.get(moment) else []

    def _next(self, gate: str, queue: list, default: str | None, record: dict) -> GateDecision | None:
        start = time.perf_counter()
        with self.lock:
            self.seen.append({"gate": gate, **record})
            action = queue.pop(0) if queue else default
        if action is None:
            return None
        if action == "raise":
            raise RuntimeError(f"forced {gate} failure")
        positive = action in ("skip", "continue")
        return GateDecision(gate, action, 0.9 if positive else 0.1, 0.5, (time.perf_counter() - start) * 1000)

    def tool_call(self, messages: list[dict], tools: list[dict], call: dict) -> GateDecision | None:
        return self._next(gates_at("pre_call")[0].name, self.tool_actions, self.default_tool,
                          {"messages": list(messages), "tools": tools, "call": call})

    def answer(self, messages: list[dict], tools: list[dict], answer: str, logprobs: list[float] | None,
               *, usage: dict | None = None, finish_reason: str | None = None) -> GateDecision | None:
        return self._next(gates_at("on_answer")[0].name, self.answer_actions, self.default_answer,
                          {"messages": list(messages), "answer": answer, "logprobs": logprobs, "usage": usage,
                           "finish_reason": finish_reason})


class serve_in_thread:
    """``with serve_in_thread(app) as base_url:`` — uvicorn serving ``app`` on a free loopback port in a daemon
    thread, stopped on exit. ``limits``: the endpoint's ``limits`` config, to serve under its settings as
    ``python -m runtime.serve`` does (:func:`~.server.uvicorn_config`, which also takes ``options``, e.g.
    ``max_connections``)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int | None = None, limits=None, **options):
        port = port or free_port(host)
        config = (uvicorn_config(app, limits, host=host, port=port, log_level="error", **options)
                  if limits is not None else
                  uvicorn.Config(app, host=host, port=port, log_level="error", lifespan="on"))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        cfg = self.server.config
        return f"http://{cfg.host}:{cfg.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def wait_healthy(process, url: str, timeout_s: float = 120) -> None:
    """Wait until a ``python -m runtime.serve`` ``process`` (a ``subprocess.Popen``) answers ``url``/health; fail
    with its output if it exits or does not answer within ``timeout_s``."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            out = process.stdout.read() if process.stdout is not None else ""
            raise RuntimeError(f"the server at {url} did not come up: {out[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
