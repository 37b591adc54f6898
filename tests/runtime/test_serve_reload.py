"""Gate reloads: ``POST /admin/reload`` (the admin key alone admits it) and SIGHUP swap the serving gates for ones
loaded from their checkpoints, while requests in flight finish and none is refused; a failed load keeps the
serving gates."""
from __future__ import annotations

import json
import shutil
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
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.testing import (ForcedGates, ScriptedUpstream, free_port, serve_in_thread,  # noqa: E402
                                   wait_healthy)

REPO = recipes.CONFIG_DIR.rsplit("/", 1)[0]
TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]
ASK = {"model": "scripted", "messages": [{"role": "user", "content": "What is 6*7?"}], "tools": TOOLS}
ADMIN = {"Authorization": "Bearer admin-secret"}


class Loader:
    """A reload's gate loader: the gates for the paths asked (recorded), or a failure."""

    def __init__(self, gates=None, fail=False, block: threading.Event | None = None):
        self.gates, self.fail, self.block, self.asked = gates, fail, block, []

    def __call__(self, paths):
        self.asked.append(paths)
        if self.block is not None:
            self.block.wait(10)
        if self.fail:
            raise FileNotFoundError("checkpoints/toolgate/missing: no such checkpoint")
        return self.gates


@pytest.fixture
def upstream():
    fake = ScriptedUpstream(delay_s=0.05)
    with serve_in_thread(fake.app) as url:
        yield url


def app_with(upstream, loader, monkeypatch, key="admin-secret"):
    if key:
        monkeypatch.setenv("TOOLWISE_ADMIN_KEY", key)
    else:
        monkeypatch.delenv("TOOLWISE_ADMIN_KEY", raising=False)
    cfg = recipes.compose("serve", [f"upstream.base_url={upstream}/v1"])
    return create_app(cfg, ForcedGates(default_tool="execute", default_answer="commit"),
                      Upstream.from_config(cfg.upstream), reload_gates=loader)


def test_reload_swaps_the_gates_and_a_failed_one_keeps_them(upstream, monkeypatch):
    from fastapi.testclient import TestClient

    loader = Loader(ForcedGates(default_tool="skip", default_answer="commit"))
    app = app_with(upstream, loader, monkeypatch)
    with TestClient(app) as client:
        first = client.post("/v1/chat/completions", json=ASK).json()
        assert first["choices"][0]["message"]["tool_calls"]          # executed: goes back to the client
        assert client.post("/admin/reload").status_code == 401
        assert client.post("/admin/reload", headers={"Authorization": "Bearer nope"}).status_code == 401
        bad = client.post("/admin/reload", headers=ADMIN, json={"gates": {"no_such_gate": "x"}})
        assert bad.status_code == 400 and "unknown gates ['no_such_gate']" in bad.text
        done = client.post("/admin/reload", headers=ADMIN, json={"gates": {"toolgate": "checkpoints/toolgate/new"}})
        assert done.status_code == 200, done.text
        assert loader.asked == [{"toolgate": "checkpoints/toolgate/new"}]
        second = client.post("/v1/chat/completions", json=ASK).json()
        assert [d["action"] for d in second["toolwise"]["decisions"]][0] == "skip"    # the new gates decide
        # a shadowed gate's decision is not acted on; a reload's modes put it in enforce mode
        shadowed = client.post("/admin/reload", headers=ADMIN, json={"modes": {"toolgate": "shadow"}})
        assert shadowed.json()["modes"]["toolgate"] == "shadow"
        assert client.post("/v1/chat/completions", json=ASK).json()["choices"][0]["message"]["tool_calls"]
        assert client.post("/admin/reload", headers=ADMIN, json={"modes": {"toolgate": "loud"}}).status_code == 400
        assert client.post("/admin/reload", headers=ADMIN, json={"modes": {"toolgate": "enforce"}}).status_code == 200
        # a reload without a body rereads the paths the last one named
        assert client.post("/admin/reload", headers=ADMIN).status_code == 200
        assert loader.asked[-1] == {"toolgate": "checkpoints/toolgate/new"}
        loader.fail = True
        failed = client.post("/admin/reload", headers=ADMIN)
        assert failed.status_code == 500 and failed.json()["error"]["code"] == "reload_failed"
        assert "checkpoints/toolgate/missing" in failed.json()["error"]["message"]
        third = client.post("/v1/chat/completions", json=ASK).json()
        assert third["toolwise"]["decisions"][0]["action"] == "skip"       # still the gates that loaded
        metrics = client.get("/metrics").text
    assert 'toolwise_gate_reloads_total{result="ok"} 4.0' in metrics
    assert 'toolwise_gate_reloads_total{result="failed"} 1.0' in metrics


def test_the_route_is_off_without_an_admin_key_and_one_reload_runs_at_a_time(upstream, monkeypatch):
    from fastapi.testclient import TestClient

    with TestClient(app_with(upstream, Loader(), monkeypatch, key=None)) as client:
        off = client.post("/admin/reload", headers=ADMIN)
        assert off.status_code == 404 and "no admin key" in off.text
    gate = threading.Event()
    loader = Loader(ForcedGates(), block=gate)
    with TestClient(app_with(upstream, loader, monkeypatch)) as client:
        results = []
        first = threading.Thread(target=lambda: results.append(client.post("/admin/reload", headers=ADMIN)))
        first.start()
        while not loader.asked:
            time.sleep(0.01)
        busy = client.post("/admin/reload", headers=ADMIN)
        gate.set()
        first.join()
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "reload_in_progress"
    assert results[0].status_code == 200


def test_reloads_under_load_lose_no_request(upstream, monkeypatch):
    """16 clients send tool episodes while the gates are reloaded ten times: every request gets its answer."""
    loads = iter([ForcedGates(default_tool=a, default_answer="commit") for a in ["skip", "execute"] * 10])
    app = app_with(upstream, Loader(), monkeypatch)
    app.state.reloader.load = lambda paths: (time.sleep(0.05), next(loads))[1]
    statuses, errors = [], []
    with serve_in_thread(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
        stop = threading.Event()

        def user():
            while not stop.is_set():
                try:
                    r = client.chat.completions.with_raw_response.create(**ASK)
                    statuses.append(r.http_response.status_code)
                except Exception as e:  # noqa: BLE001 - every failure is the test's finding
                    errors.append(repr(e))

        users = [threading.Thread(target=user) for _ in range(16)]
        for u in users:
            u.start()
        reloads = []
        for _ in range(10):
            time.sleep(0.15)
            reloads.append(httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10).status_code)
        stop.set()
        for u in users:
            u.join(timeout=30)
    assert reloads == [200] * 10
    assert errors == [] and len(statuses) > 50 and set(statuses) == {200}


@pytest.mark.slow
def test_sighup_reloads_a_real_server_from_its_checkpoint(tmp_path):
    """``python -m runtime.serve`` with the reference ToolGate behind a path; the path is pointed at another
    checkpoint (what a promote does) and SIGHUP reloads it: the next decisions come from the new τ."""
    serving = tmp_path / "serving"
    shutil.copytree(f"{REPO}/checkpoints/toolgate/reference", serving)
    fake = ScriptedUpstream()
    with serve_in_thread(fake.app) as up:
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "runtime.serve", f"upstream.base_url={up}/v1",
                                   f"gates.toolgate={serving}", f"port={port}", f"hydra.run.dir={tmp_path / 'h'}"],
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(server, url)
            before = httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=30).json()
            config = json.loads((serving / "config.json").read_text())
            config["tau"] = 0.0          # the promoted gate: executes every call
            (serving / "config.json").write_text(json.dumps(config))
            server.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 60
            while 'toolwise_gate_reloads_total{result="ok"} 1.0' not in httpx.get(f"{url}/metrics").text:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
            after = httpx.post(f"{url}/v1/chat/completions", json=ASK, timeout=30).json()
        finally:
            server.terminate()
            log = server.communicate(timeout=30)[0]
    assert before["toolwise"]["decisions"][0]["tau"] != 0.0
    assert after["toolwise"]["decisions"][0]["tau"] == 0.0, log[-2000:]
    assert "gates reloaded" in log
