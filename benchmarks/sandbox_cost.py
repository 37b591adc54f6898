"""What the sandbox's OS boundary costs: start-up and typical tool calls, before and after, side by side in one run.

    python benchmarks/sandbox_cost.py [--repeats 30] [--before 44f7011]

Why: every code-executor and regex call starts a fresh sandboxed interpreter, so the boundary's price is paid per
tool call. Four arms run interleaved (round-robin, so load on the machine hits them alike):

* ``before``: the sandbox as it was at ``--before`` (git revision; its files are loaded from git into a temporary
  module, unchanged): as root it wrapped the child in ``unshare``, as a normal user it had no namespaces;
* ``after``: today's default, bubblewrap namespaces + seccomp + the inner layers;
* ``after, no namespaces``: ``isolation=False`` (seccomp + inner layers: what a machine without user namespaces gets);

and the calls are: ``start-up`` (``pass``), ``code`` (a typical code-executor snippet), ``numpy`` (the same with
numpy preloaded, as the code executor does when the code imports it) and ``regex`` (the regex tool's worker on a
short text). Prints median and 90th-percentile milliseconds per arm and call and each median's ratio to
``before``; ends with ``startup_ratio=… code_ratio=…`` (after / before).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_builders.environments import regex_match, sandbox
from data_builders.environments.sandbox import SandboxLimits

REPO = Path(__file__).resolve().parents[1]
LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5.0, memory_mb=512)

REGEX_CALL = ("findall", r"(\w+)@(\w+)\.com", "a@b.com c@d.com", None)
CALLS = {
    "start-up": ("pass", ()),
    "code": ("import math, statistics\nxs = [math.sqrt(i) for i in range(20000)]\n"
             "print(round(statistics.fmean(xs), 6), sorted(xs)[len(xs) // 2])", ()),
    "numpy": ("import numpy as np\nprint(np.linalg.det(np.arange(16.0).reshape(4, 4) + np.eye(4)))", ("numpy",)),
    "regex": (f"{regex_match._WORKER_SOURCE}\nmain({REGEX_CALL!r})\n", ()),
}


def load_before(rev: str):
    """The sandbox module as it was at ``rev``, imported from a temporary directory (None where git can't)."""
    tmp = Path(tempfile.mkdtemp(prefix="sandbox-before-"))
    try:
        for name in ("sandbox.py", "sandbox_child.py"):
            text = subprocess.run(["git", "show", f"{rev}:data_builders/environments/{name}"], cwd=REPO,
                                  capture_output=True, text=True, check=True).stdout
            (tmp / name).write_text(text)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"before: unavailable ({exc}); only today's arms run")
        return None
    spec = importlib.util.spec_from_file_location("sandbox_before", tmp / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--before", default="44f7011", help="git revision of the sandbox to compare against")
    args = ap.parse_args()
    print(sandbox.layers())
    before = load_before(args.before)
    arms = {"after": lambda code, pre: sandbox.run_python(code, LIMITS, preload=pre),
            "after, no namespaces": lambda code, pre: sandbox.run_python(code, LIMITS, isolation=False, preload=pre)}
    if before is not None:
        arms = {"before": lambda code, pre: before.run_python(code, LIMITS, preload=pre), **arms}
    times: dict[tuple[str, str], list[float]] = {(a, c): [] for a in arms for c in CALLS}
    outputs: dict[tuple[str, str], str] = {}
    for arm, run in arms.items():          # warm-up: the boundary's probe, page cache
        for call, (code, pre) in CALLS.items():
            outputs[arm, call] = run(code, pre).stdout
    for _ in range(args.repeats):
        for call, (code, pre) in CALLS.items():
            for arm, run in arms.items():
                start = time.perf_counter()
                result = run(code, pre)
                times[arm, call].append((time.perf_counter() - start) * 1000)
                if result.error_kind is not None or result.stdout != outputs[arm, call]:
                    sys.exit(f"{arm} / {call}: {result}")
    for call in CALLS:
        same = {outputs[arm, call] for arm in arms}
        assert len(same) == 1, f"{call}: the arms disagree: {same}"
    print(f"\n{'call':<10} {'arm':<22} {'median ms':>10} {'p90 ms':>8} {'÷ before':>9}")
    ratios = {}
    for call in CALLS:
        base = statistics.median(times["before", call]) if before is not None else None
        for arm in arms:
            xs = sorted(times[arm, call])
            med = statistics.median(xs)
            ratio = med / base if base else float("nan")
            if arm == "after":
                ratios[call] = ratio
            print(f"{call:<10} {arm:<22} {med:>10.1f} {xs[int(0.9 * (len(xs) - 1))]:>8.1f} {ratio:>9.2f}")
    print(f"\nstartup_ratio={ratios['start-up']:.2f} code_ratio={ratios['code']:.2f} "
          f"numpy_ratio={ratios['numpy']:.2f} regex_ratio={ratios['regex']:.2f}")


if __name__ == "__main__":
    main()
