"""Acceptance: a fourth gate from a module outside the package (``tests/plugin_gate/call_budget.py``, one file,
registered by ``TOOLWISE_GATES=call_budget`` with the module's directory on ``PYTHONPATH``, nothing in the package
edited) goes through every command a built-in gate does, each the real CLI in its own process:

    python -m data_builders.build kind=call_budget ...      its decision points, by its own labeler
    python -m trainers.fit recipe=call_budget ...           its own controller class, fit and exported
    python -m trainers.evaluate checkpoints.call_budget=... an arm of the evaluator (arms.call_budget)
    python -m runtime.serve gates.call_budget=...           the gated endpoint, asked by the official openai client

on the team's-own-tools pipeline's policy and MCP server (``tests/test_own_tools_pipeline.py``). The gate's decision
on a task's first call depends only on the question (its features: round, calls so far, the call's argument
length, the question's digits), so the loop's decision in the evaluator and the endpoint's on the same question
and call must agree.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.test_own_tools_pipeline import (CALL, CALL_FORMAT, CLI_TIMEOUT_S, MAX_NEW_TOKENS, SERVER, TASKS,
                                           policy, write_tasks)  # noqa: F401

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin_gate"
# The user's environment: the gate's module importable and named. Only the commands get it: this process's registry
# stays the package's (other tests compare against it).
ENV = {**os.environ, "TOOLWISE_GATES": "call_budget",
       "PYTHONPATH": os.pathsep.join(p for p in (str(PLUGIN_DIR), os.environ.get("PYTHONPATH")) if p)}


def cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, f"{' '.join(args[:2])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


def first_decisions(cache: Path, arm_prefix: str) -> dict[str, tuple[str, str]]:
    """task id -> (its first pre_call decision, that call's status) in the evaluator's cached trajectories."""
    from data_builders.agent.trajectory import read_trajectories

    out = {}
    for f in sorted(cache.glob(f"*/{arm_prefix}*/*.jsonl")):
        for t in read_trajectories(f):
            d = next(d for d in t.decisions if d.hook == "pre_call")
            out[str(t.task_id)] = (d.decision, t.calls[0].status)
    return out


def start_server(args: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "runtime.serve", *args, f"port={port}"], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"runtime.serve exited:\n{proc.stdout.read()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"runtime.serve did not start:\n{proc.stdout.read()[-4000:]}")


@pytest.mark.slow
def test_a_gate_from_outside_the_package_builds_fits_evaluates_and_serves(policy, tmp_path):  # noqa: F811
    openai = pytest.importorskip("openai")
    from runtime.serve.testing import ScriptedUpstream, free_port, serve_in_thread

    task_file = write_tasks(tmp_path / "tasks.jsonl", {"kind": "mcp", "command": [sys.executable, str(SERVER)]})
    policy_args = ["model=hf", f"model.name={policy}", "tasks=custom", f"tasks.path={task_file}"]

    # its points: one per proposed call (every task proposes one), labelled by its own rule
    points = tmp_path / "points"
    out = cli("data_builders.build", "kind=call_budget", *policy_args, f"agent.call_format={CALL_FORMAT}",
              "agent.max_rounds=2", f"agent.max_new_tokens={MAX_NEW_TOKENS}", "val_fraction=0", f"out_dir={points}",
              f"hydra.run.dir={tmp_path / 'hydra' / 'build'}")
    assert "points=8 positives=3 kind=call_budget" in out, out
    manifest = json.loads((points / "manifest.json").read_text())
    assert manifest["kind"] == "call_budget" and manifest["featurizer"] == {"name": "call_budget", "version": 1}
    assert manifest["label_rule"].startswith("label=1 (execute) iff the default-mode episode")

    # its recipe (no recipe file: the schema's defaults), its controller class, its card
    ckpt = tmp_path / "ckpt"
    out = cli("trainers.fit", "recipe=call_budget", *policy_args, "logger=none", f"recipe.points.dir={points}",
              f"recipe.export_dir={ckpt}", f"hydra.run.dir={tmp_path / 'hydra' / 'fit'}")
    assert "call_budget: test_auroc=" in out, out
    config = json.loads((ckpt / "config.json").read_text())
    assert config["controller"] == "call_budget_logistic" and config["contract"]["kind"] == "call_budget"
    assert config["contract"]["feature_names"] == ["round", "calls_before", "args_chars", "question_digits"]
    assert "execute the pending tool call (else it is skipped)" in (ckpt / "README.md").read_text()

    # an arm of the evaluator, beside the default mode, on the test split
    cache = tmp_path / "eval-cache"
    out = cli("trainers.evaluate", *policy_args, "logger=none", f"agent.call_format={CALL_FORMAT}",
              "agent.max_rounds=3", f"agent.max_new_tokens={MAX_NEW_TOKENS}", "arms.modes=[default]",
              "arms.probe_prefill=null", "arms.toolgate=null", "arms.g_step=null", f"checkpoints.call_budget={ckpt}",
              "bootstrap.replicates=200", f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'eval'}")
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    tau = config["tau"]
    assert set(results["arms"]) == {"default", f"call_budget@{tau:.2f}"}, results["arms"]
    assert set(results["controllers"]) == {"call_budget"} and f"call_budget@{tau:.2f}" in out
    looped = first_decisions(cache, "call_budget")
    assert set(looped) == {"j3", "x4", "x5"}
    for decision, status in looped.values():     # the hook's decision is what happened to the call
        assert (decision, status) in {("execute", "executed"), ("skip", "skipped")}

    # the endpoint: the upstream proposes the same call for each test question; the gate decides as in the loop
    fake = ScriptedUpstream(reply=lambda body: {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": CALL[0], "arguments": json.dumps(CALL[1])}}]})
    port = free_port()
    with serve_in_thread(fake.app) as upstream_url:
        server = start_server([f"upstream.base_url={upstream_url}/v1", f"gates.call_budget={ckpt}",
                               f"gates.policy={manifest['backend']}", "gates.max_reasks=0",
                               f"hydra.run.dir={tmp_path / 'hydra' / 'serve'}"], port)
        try:
            health = httpx.get(f"http://127.0.0.1:{port}/health").json()
            assert health["gates"] == {"probe_prefill": False, "toolgate": False, "call_budget": True,
                                       "g_step": False}
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="loopback", max_retries=0)
            tools = [{"type": "function", "function": {"name": CALL[0], "parameters": {"type": "object"}}}]
            for tid, _split, question, *_ in [t for t in TASKS if t[0] in looped]:
                reply = client.chat.completions.create(model="scripted", tools=tools,
                                                       messages=[{"role": "user", "content": question}])
                d = reply.model_extra["toolwise"]["decisions"][0]
                assert d["gate"] == "call_budget" and d["action"] == looped[tid][0], (tid, d)
                assert (d["probability"] >= d["tau"]) == (d["action"] == "execute") and d["tau"] == tau
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            assert 'gate="call_budget"' in metrics
        finally:
            server.terminate()
            server.wait(timeout=30)
