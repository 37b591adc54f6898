"""Traffic capture (runtime/serve/capture.py): what a record holds, a call linked to its result, redaction before
disk, a full queue dropping (counted) instead of slowing a request, rotation, and a SIGKILLed server losing at most
the records in flight while every stored one reads back."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import recipes  # noqa: E402
from data_builders.agent import prompts as P  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from data_builders.capture.records import read_capture  # noqa: E402
from runtime.serve.capture import REDACTED, Capture  # noqa: E402
from runtime.serve.metrics import Metrics  # noqa: E402
from runtime.serve.testing import ForcedGates, ScriptedUpstream, free_port, serve_in_thread  # noqa: E402

REPO = recipes.CONFIG_DIR.rsplit("/", 1)[0]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
QUESTION = [{"role": "user", "content": "What is 6*7? My key is sk-live-abc123."}]


def endpoint(tmp_path, gates, *overrides):
    fake = ScriptedUpstream()
    up = serve_in_thread(fake.app)
    url = up.__enter__()
    cfg = recipes.compose("serve", [f"upstream.base_url={url}/v1", f"capture.dir={tmp_path / 'cap'}", *overrides])
    app = create_app(cfg, gates, Upstream.from_config(cfg.upstream))
    return app, up


def wait_for(capture: Capture, n: int) -> None:
    deadline = time.monotonic() + 10
    while capture.stats.records < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_tool_episode_is_captured_with_every_decision_moment_and_the_call_linked_to_its_result(tmp_path):
    from fastapi.testclient import TestClient

    app, up = endpoint(tmp_path, ForcedGates(tool_actions=["skip"]), "capture.redact=['sk-live-[a-z0-9]+']")
    try:
        with TestClient(app) as client:
            ask = lambda messages: client.post("/v1/chat/completions", json={  # noqa: E731
                "model": "scripted", "messages": messages, "tools": TOOLS}).json()
            skipped = ask(QUESTION)                 # the call skipped, the model re-asked: an answer
            called = ask(QUESTION)                  # the call executes: it goes back to the client
            call = called["choices"][0]["message"]["tool_calls"][0]
            answered = ask([*QUESTION, called["choices"][0]["message"],
                            {"role": "tool", "tool_call_id": call["id"], "content": '{"result": 42}'}])
            wait_for(app.state.capture, 3)
            metrics = client.get("/metrics").text
    finally:
        up.__exit__(None, None, None)
    read = read_capture(tmp_path / "cap")
    assert read.incomplete_lines == 0
    assert [r["request_id"] for r in read.records] == [skipped["id"], called["id"], answered["id"]]
    one, two, three = read.records
    # the skipped call as the model proposed it, then the re-asked turn: both upstream turns, before any gate acted
    assert one["turns"][0]["message"]["tool_calls"][0]["function"]["name"] == "calculator"
    assert one["turns"][1]["message"]["content"].endswith("\\boxed{42}") and one["upstream_calls"] == 2
    assert [(d["gate"], d["action"], d["applied"]) for d in one["decisions"]] == [("toolgate", "skip", "skip"),
                                                                                  ("g_step", "commit", "commit")]
    assert all(isinstance(d["probability"], float) and "latency_ms" in d for d in one["decisions"])
    assert one["injected"][1]["role"] == "tool" and P.SKIPPED_CALL_RESULT["message"] in one["injected"][1]["content"]
    assert one["call_results"] == {}
    assert two["call_results"] == {call["id"]: '{"result": 42}'}       # linked to the next request's result
    assert three["results"] == {call["id"]: '{"result": 42}'} and three["response"]["content"].endswith("\\boxed{42}")
    assert one["tools"] == TOOLS and one["usage"]["total_tokens"] > 0 and isinstance(one["time"], float)
    # redacted before it reached disk
    raw = b"".join(p.read_bytes() for p in (tmp_path / "cap").iterdir())
    assert b"sk-live-abc123" not in raw and one["messages"][0]["content"] == f"What is 6*7? My key is {REDACTED}."
    assert "toolwise_capture_records_total 3.0" in metrics and "toolwise_capture_dropped_total 0.0" in metrics


def drop_secret_requests(record: dict) -> dict | None:
    return None if "secret" in json.dumps(record["messages"]) else record


def test_a_redactor_function_sees_each_record_and_may_drop_it(tmp_path):
    capture = Capture(tmp_path, redactor="tests.runtime.test_serve_capture:drop_secret_requests")
    for text in ("public", "a secret", "public again"):
        capture.record({"model": "m", "messages": [{"role": "user", "content": text}]},
                       {"id": text, "choices": [{"message": {"role": "assistant", "content": "ok"}}]}, [])
    capture.close()
    assert [r["request_id"] for r in read_capture(tmp_path).records] == ["public", "public again"]
    assert capture.stats.redacted_out == 1
    with pytest.raises(ValueError, match="module:function"):
        Capture(tmp_path / "x", redactor="no_colon")


def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path, monkeypatch):
    metrics = Metrics()
    gate = threading.Event()
    capture = Capture(tmp_path, queue_size=2, metrics=metrics)
    monkeypatch.setattr(capture, "_line", lambda record: (gate.wait(10), b"{}\n")[1])   # a stalled disk
    start = time.perf_counter()
    for i in range(50):
        capture.record({"messages": []}, {"id": str(i)}, [])
    assert time.perf_counter() - start < 0.5            # the request path never waited for the writer
    assert capture.stats.dropped >= 45 and metrics.capture_dropped._value.get() == capture.stats.dropped
    gate.set()
    capture.close()


def test_the_writer_wakes_on_its_timer_not_per_record(tmp_path, monkeypatch):
    """Records arriving 2 ms apart within one flush period reach disk in one write: no record wakes the writer
    (a wake-up per record cost the event loop ~1 ms p50 under load, benchmarks/serve_load.py --capture)."""
    capture = Capture(tmp_path, flush_s=0.5)
    writes: list[int] = []
    real_write = capture._write
    monkeypatch.setattr(capture, "_write", lambda lines: (writes.append(len(lines)), real_write(lines))[1])
    time.sleep(0.05)        # the writer is waiting on its timer
    for i in range(20):
        capture.record({"messages": []}, {"id": f"r{i}"}, [])
        time.sleep(0.002)
    capture.close()         # wakes the writer at once: what is queued is written, then it stops
    assert writes == [20]
    assert [r["request_id"] for r in read_capture(tmp_path).records] == [f"r{i}" for i in range(20)]


def test_files_rotate_by_size_and_read_back_in_order(tmp_path):
    capture = Capture(tmp_path, max_file_bytes=1024)
    for i in range(40):
        capture.record({"messages": [{"role": "user", "content": "x" * 100}]}, {"id": f"r{i}"}, [])
    capture.close()
    files = sorted(tmp_path.glob("capture-*.jsonl"))
    assert len(files) > 3 and all(f.stat().st_size <= 1024 for f in files)
    assert [r["request_id"] for r in read_capture(tmp_path).records] == [f"r{i}" for i in range(40)]


def test_a_line_cut_by_a_crash_is_skipped_and_any_other_bad_line_is_named(tmp_path):
    good = json.dumps({"request_id": "a", "response": None})
    (tmp_path / "capture-1-00001.jsonl").write_text(good + "\n" + '{"request_id": "b", "mess')
    read = read_capture(tmp_path)
    assert [r["request_id"] for r in read.records] == ["a"] and read.incomplete_lines == 1
    (tmp_path / "capture-1-00002.jsonl").write_text("not json\n" + good + "\n")
    with pytest.raises(ValueError, match=r"capture-1-00002.jsonl:1: not a capture record"):
        read_capture(tmp_path)


@pytest.mark.slow
def test_a_sigkilled_server_loses_at_most_the_records_in_flight(tmp_path):
    """A real server process with capture on, 16 clients at a time, SIGKILLed while they are still sending: every
    stored record reads back, and every request answered before the kill is on disk but those still queued
    (the writer takes the queue every capture.flush_s, 10 ms: at most a handful)."""
    fake = ScriptedUpstream(delay_s=0.005)
    answered: list[str] = []
    stop = threading.Event()
    with serve_in_thread(fake.app) as upstream_url:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "runtime.serve", f"port={port}",
                                   f"upstream.base_url={upstream_url}/v1", f"capture.dir={tmp_path / 'cap'}",
                                   f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": REPO})
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None and time.monotonic() < deadline
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)

            def client() -> None:
                with httpx.Client(timeout=10) as http:
                    while not stop.is_set():
                        try:
                            r = http.post(f"{url}/v1/chat/completions", json={"model": "scripted", "tools": TOOLS,
                                                                              "messages": QUESTION})
                        except httpx.HTTPError:
                            return
                        if r.status_code == 200:
                            answered.append(r.json()["id"])

            threads = [threading.Thread(target=client, daemon=True) for _ in range(16)]
            for t in threads:
                t.start()
            while len(answered) < 200 and time.monotonic() < deadline + 60:
                time.sleep(0.05)
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
            stop.set()
            for t in threads:
                t.join(timeout=10)
        finally:
            if server.poll() is None:
                server.kill()
    read = read_capture(tmp_path / "cap")      # raises on any unreadable line but a cut last one
    stored = {r["request_id"] for r in read.records}
    lost = [i for i in answered if i not in stored]
    assert len(answered) >= 200 and read.incomplete_lines <= 1
    assert len(lost) <= 16, f"{len(lost)} of {len(answered)} answered requests never reached disk"
