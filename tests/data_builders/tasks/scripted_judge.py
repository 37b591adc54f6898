"""A scripted OpenAI-compatible judge for tests: a real HTTP server on a free local port (http.server in a thread),
so the official client, its retries and its timeouts run as they would against vLLM or a hosted API. Offline.
Used by test_judge.py and test_scorers.py (a module, not a conftest, so that it reaches no other test)."""
from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

# A rubric whose fields the server can find again: the scripted judge's rule needs the answer and the gold.
RUBRIC = "INSTR<<{instruction}>> ANSWER<<{answer}>> GOLD<<{gold}>> Reply with a JSON object."
FIELD = re.compile(r"(INSTR|ANSWER|GOLD)<<(.*?)>>", re.DOTALL)


class ScriptedJudge:
    """POST /v1/chat/completions. Each request takes the next step of ``script`` if any, else the rule: correct iff
    the answer contains the gold (case-insensitive). Steps: an int (that HTTP status with an error body), a str
    (that reply text), or a callable(body) -> (status, reply text)."""

    def __init__(self):
        self.script: list = []
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.reject_json_mode = False
        self.retry_after_ms: str | None = None
        self.lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.bodies)

    def reply(self, body: dict) -> tuple[int, str]:
        with self.lock:
            step = self.script.pop(0) if self.script else None
        if callable(step):
            return step(body)
        if isinstance(step, int):
            return step, ""
        if isinstance(step, str):
            return 200, step
        if self.reject_json_mode and "response_format" in body:
            return 400, ""
        fields = dict(FIELD.findall(body["messages"][-1]["content"]))
        if "GOLD" in fields:
            correct = fields["GOLD"].lower() in fields["ANSWER"].lower()
        else:   # a rubric without {gold}: the rule is that the answer says "ok"
            correct = "ok" in fields.get("ANSWER", "").lower()
        return 200, json.dumps({"correct": correct, "reason": "contains the gold" if correct else "does not"})


@pytest.fixture
def server():
    script = ScriptedJudge()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with script.lock:
                script.bodies.append(body)
                script.headers.append(dict(self.headers))
            if self.path != "/v1/chat/completions":
                status, text = 404, ""
            else:
                status, text = script.reply(body)
            if status == 200:
                payload = {"id": f"c{script.count}", "object": "chat.completion", "created": 0,
                           "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            else:
                payload = {"error": {"message": f"scripted {status}", "type": "scripted", "code": status}}
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if script.retry_after_ms is not None:
                self.send_header("retry-after-ms", script.retry_after_ms)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):   # keep the test output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    script.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield script
    httpd.shutdown()
    httpd.server_close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
