"""The OS boundary's probe, its one-line report and ``sandbox.require_isolation``.

A machine without user namespaces is simulated for real: a user namespace whose ``user.max_user_namespaces`` is 0
(a per-namespace limit its own root may lower), so bwrap fails there exactly as on a host with the sysctl off.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data_builders.environments import isolation, sandbox

REPO = Path(__file__).resolve().parents[3]


def _without_user_namespaces(*command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to simulate a machine without user namespaces")
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    env = {k: v for k, v in os.environ.items() if k != isolation.REQUIRE_ENV}
    return subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", script, "sh", *command],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_require_isolation_refuses_without_user_namespaces_and_says_how_to_enable_them():
    code = ("from data_builders.environments import isolation, sandbox\n"
            "print(isolation.layers())\n"
            "print(sandbox.run_python('print(6 * 7)').stdout.strip())\n"
            "try:\n    sandbox.run_python('print(1)', require_isolation=True)\n"
            "except isolation.IsolationUnavailable as e:\n    print('REFUSED', e)\n")
    done = _without_user_namespaces(sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    line, answer, refused = done.stdout.split("\n", 2)
    assert line.startswith("sandbox layers: seccomp") and "missing: no namespaces" in line, line
    assert answer == "42"        # without the requirement, the inner layers still run the code
    assert refused.startswith("REFUSED sandbox.require_isolation is set"), refused
    assert "max_user_namespaces" in refused and "sysctl -w user.max_user_namespaces=" in refused, refused


@pytest.mark.slow
def test_the_cli_refuses_before_loading_the_policy(tmp_path):
    # Hydra's run directory in tmp_path: a user may not write to the checkout (and the test leaves nothing there)
    done = _without_user_namespaces(sys.executable, "-m", "data_builders.build", "sandbox.require_isolation=true",
                                    "limit=1", "out_dir=/nonexistent/never-written", f"hydra.run.dir={tmp_path}")
    assert done.returncode != 0
    assert "IsolationUnavailable" in done.stderr and "max_user_namespaces" in done.stderr, done.stderr[-3000:]
    assert "Loading" not in done.stderr and not Path("/nonexistent/never-written").exists()


def test_announce_prints_the_layers_and_exports_the_requirement(monkeypatch, capsys):
    monkeypatch.setenv(isolation.REQUIRE_ENV, "0")    # recorded, so the "1" announce exports is undone after
    line = isolation.announce({"sandbox": {"require_isolation": True}})
    assert capsys.readouterr().out == line + "\n"
    assert line.startswith("sandbox layers: namespaces user/mount/pid/net/ipc/uts (bwrap ")
    assert "seccomp" in line and "missing" not in line
    assert os.environ[isolation.REQUIRE_ENV] == "1"      # executor shards and Ray workers inherit it


def test_a_missing_seccomp_filter_is_named(monkeypatch):
    walls = isolation.boundary()
    monkeypatch.setattr(isolation, "_cached", dataclasses.replace(
        walls, seccomp=None, missing=("no seccomp filter (simulated): `pip install pyseccomp`",)))
    assert "missing: no seccomp filter (simulated)" in isolation.layers()
    with pytest.raises(isolation.IsolationUnavailable, match="no seccomp filter"):
        sandbox.run_python("print(1)", require_isolation=True)


def test_turning_the_boundary_off_is_refused_when_it_is_required():
    with pytest.raises(isolation.IsolationUnavailable, match="turned off by the caller"):
        sandbox.run_python("print(1)", isolation=False, require_isolation=True)


def test_the_environment_variable_requires_it_too(monkeypatch):
    monkeypatch.setenv(isolation.REQUIRE_ENV, "1")
    with pytest.raises(isolation.IsolationUnavailable):
        sandbox.run_python("print(1)", isolation=False)
    assert sandbox.run_python("print(1)").stdout == "1\n"     # the boundary is complete here
