"""A real vLLM OpenAI-compatible server on 127.0.0.1 for the tests that run in the vLLM venv (.ci/run)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def vllm_server(tmp: Path, model_dir: str, served_name: str, extra_args: tuple[str, ...] = (),
                start_timeout_s: float = 300):
    """Yields the server's ``/v1`` base URL; the server's log is shown if it dies or does not come up."""
    port = free_port()
    env = {**os.environ, "TMPDIR": str(tmp), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(tmp / "cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
           "VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 2) - 1}"}
    # `vllm serve` fails on the vllm-cpu package name; the module entry point works.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
           "--enforce-eager", "--max-model-len", "4096", "--seed", "0", *extra_args]
    log_path = tmp / "server.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + start_timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail("vLLM server exited:\n" + log_path.read_text()[-3000:])
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    pytest.fail(f"vLLM server did not come up in {start_timeout_s:.0f} s:\n"
                                + log_path.read_text()[-3000:])
                time.sleep(1)
        yield base + "/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
