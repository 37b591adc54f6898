"""Traffic capture (``capture.dir=...``, opt-in): every chat completion the endpoint (or the LiteLLM guardrail)
answers, with each decision moment, appended to JSON-lines files off the request path.

A record (one per request, one line): ``request_id`` (the completion's id), ``time`` (unix seconds), ``model``,
``messages`` and ``tools`` as the client sent them, ``tool_choice``, every upstream ``turns`` entry the gating saw
(the assistant message as proposed, its token log-probs, finish reason and usage: a proposed call or an answer
before any gate acted on it), ``decisions`` (each gate's action, applied action, mode, probability, τ, support,
latency, round, call id), ``injected`` (what the server added), the ``response`` message the client received, the
request's ``usage`` and ``upstream_calls``, and ``results``: the tool results this request carries
(``tool_call_id`` → content). A call a captured response returned is answered by the conversation's next request;
``data_builders.capture.records.read_capture`` links the two (``call_results``), so a captured call knows its result.

Off the request path: the request only appends its record to a bounded queue (``capture.queue_size``); a full queue
drops the record (``toolwise_capture_dropped_total``), never slows the request. A writer thread wakes every
``capture.flush_s`` (10 ms) — on a timer, not per record: a thread woken by each record asked the event loop's
thread for the GIL hundreds of times a second, and on a loaded machine each forced hand-over waited for the
scheduler (measured: +1.2 ms p50, −3.6 % requests/s at 500 requests/s; on a timer: +0.6 ms, −2.1 %;
``benchmarks/serve_load.py --capture``) — takes everything queued, redacts
(``capture.redact``: regexes whose matches in any string become ``[REDACTED]``; ``capture.redactor``: a
``module:function`` that gets each record and returns it, or None to drop it) — before anything reaches disk —
serializes, appends each batch with one write (unbuffered: it is in the OS at once) and ``fsync``\\ s every
``capture.fsync_s`` seconds.
Files rotate past ``capture.max_file_bytes`` (``capture-<start>-<n>.jsonl``). Crash safety: a record is one line
written whole within its batch's one ``write``; a process killed mid-write leaves at most one incomplete last line, which
:func:`read_capture` skips (and counts), so a SIGKILL loses the records still queued (at most ``flush_s``
worth) and the batch being written, and every stored record reads back."""
from __future__ import annotations

import collections
import importlib
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic_core import to_json

REDACTED = "[REDACTED]"


def load_callable(path: str) -> Callable:
    """``module:attribute`` (``runtime.api:Gates.load``) -> the callable (the redactor here, the LiteLLM
    guardrail's ``gates_factory``)."""
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"{path!r}: expected module:function")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def redact_strings(value: Any, patterns: list[re.Pattern]) -> Any:
    """``value`` with every match of ``patterns`` in its strings (keys kept) replaced by :data:`REDACTED`."""
    if isinstance(value, str):
        for p in patterns:
            value = p.sub(REDACTED, value)
        return value
    if isinstance(value, dict):
        return {k: redact_strings(v, patterns) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_strings(v, patterns) for v in value]
    return value


@dataclass
class CaptureStats:
    records: int = 0        # written
    dropped: int = 0        # the queue was full
    redacted_out: int = 0   # dropped by the redactor
    failed: int = 0         # could not be serialized or written (the error is logged once per kind)


class Capture:
    """The capture store of one server: :meth:`record` from the request path, a writer thread behind it."""

    def __init__(self, directory: str | Path, *, queue_size: int = 1024, max_file_bytes: int = 64 * 2**20,
                 flush_s: float = 0.01, fsync_s: float = 1.0, redact: list[str] | None = None,
                 redactor: str | Callable | None = None, metrics: Any = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_file_bytes, self.flush_s, self.fsync_s = int(max_file_bytes), float(flush_s), float(fsync_s)
        self.patterns = [re.compile(p) for p in (redact or [])]    # a bad pattern fails at start, naming itself
        self.redactor = load_callable(redactor) if isinstance(redactor, str) else redactor
        self.metrics = metrics
        self.stats = CaptureStats()
        # a deque, not a queue.Queue: appending notifies nobody (the writer polls on its timer); append and popleft
        # are atomic, and only the writer pops
        self.queue: collections.deque = collections.deque()
        self.queue_size = int(queue_size)
        self._stop = threading.Event()
        self._started = time.strftime("%Y%m%d-%H%M%S")
        self._n, self._file, self._size = 0, None, 0
        self._errors: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="toolwise-capture", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, cfg: Any, metrics: Any = None) -> "Capture | None":
        if cfg is None or not cfg.get("dir"):
            return None
        return cls(cfg.dir, queue_size=cfg.queue_size, max_file_bytes=cfg.max_file_bytes, flush_s=cfg.flush_s,
                   fsync_s=cfg.fsync_s,
                   redact=list(cfg.redact or []), redactor=cfg.redactor, metrics=metrics)

    # ------------------------------------------------------------------ the request path
    def record(self, request: dict, body: dict, turns: list[dict]) -> None:
        """Queue one request's record (``body``: the response as sent, ``toolwise`` included; ``turns``: the
        upstream turns the gating saw). Never blocks: a full queue drops it and counts the drop."""
        tw = body.get("toolwise") or {}
        choice = (body.get("choices") or [{}])[0]
        record = {"request_id": body.get("id"), "time": time.time(), "model": request.get("model"),
                  "messages": request.get("messages"), "tools": request.get("tools") or [],
                  "tool_choice": request.get("tool_choice"), "turns": turns,
                  "decisions": tw.get("decisions", []), "injected": tw.get("injected", []),
                  "response": choice.get("message"), "finish_reason": choice.get("finish_reason"),
                  "usage": body.get("usage"), "upstream_calls": tw.get("upstream_calls"),
                  "results": {m["tool_call_id"]: m.get("content") for m in request.get("messages") or []
                              if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id")}}
        if len(self.queue) < self.queue_size:
            self.queue.append(record)
        else:
            self.stats.dropped += 1
            if self.metrics is not None:
                self.metrics.capture_dropped.inc()

    # ------------------------------------------------------------------ the writer thread
    def _run(self) -> None:
        last_sync = time.monotonic()
        while True:
            stop = self._stop.wait(self.flush_s)
            batch = [self.queue.popleft() for _ in range(len(self.queue))]     # one write for all of it
            lines = [line for line in map(self._line, batch) if line]
            if lines:
                self._write(lines)
            if self._file is not None and (stop or time.monotonic() - last_sync >= self.fsync_s):
                os.fsync(self._file.fileno())
                last_sync = time.monotonic()
            if stop:
                if self._file is not None:
                    self._file.close()
                return

    def _line(self, record: dict) -> bytes | None:
        try:
            if self.redactor is not None:
                record = self.redactor(record)
                if record is None:
                    self.stats.redacted_out += 1
                    return None
            if self.patterns:
                record = redact_strings(record, self.patterns)
            # pydantic-core's serializer (Rust; FastAPI's own dependency): a few times faster than json.dumps,
            # which matters as the writer shares the GIL with the event loop serving requests
            return to_json(record, fallback=str) + b"\n"
        except Exception as e:  # noqa: BLE001 - a record that cannot be stored never stops the writer
            self._failed(e)
            return None

    def _write(self, lines: list[bytes]) -> None:
        try:
            pending: list[bytes] = []
            for line in lines:
                if self._file is None or (self._size and self._size + len(line) > self.max_file_bytes):
                    if pending:
                        self._file.write(b"".join(pending))
                        pending = []
                    self._rotate()
                pending.append(line)
                self._size += len(line)
            # one write per batch (a syscall per record cost the event loop's thread the GIL): whole lines, so a
            # crash mid-write cuts at most the file's last line, which read_capture skips
            self._file.write(b"".join(pending))
        except OSError as e:
            self._failed(e)
            return
        self.stats.records += len(lines)
        if self.metrics is not None:
            self.metrics.capture_records.inc(len(lines))

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        self._n += 1
        path = self.dir / f"capture-{self._started}-{self._n:05d}.jsonl"
        self._file = open(path, "ab", buffering=0)
        self._size = path.stat().st_size

    def _failed(self, e: Exception) -> None:
        self.stats.failed += 1
        kind = type(e).__name__
        if kind not in self._errors:        # logged once per kind: a full disk must not flood the log
            self._errors.add(kind)
            import logging

            logging.getLogger(__name__).error("capture: a record could not be stored (%s: %s); counted in "
                                              "toolwise_capture_failed_total", kind, e)
        if self.metrics is not None:
            self.metrics.capture_failed.inc()

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, fsync, stop the writer (the server's shutdown)."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout)
