"""The main job (``python -m trainers.fit recipe=g_step``) timed per phase on an emulated AVX2-only CPU.

    python benchmarks/main_job.py [--runs cold,warm] [--threads 2] [--isa avx2] [--set NAME=VALUE] [override ...]
    python benchmarks/main_job.py --compare kv_cache=dynamic [--pairs N]   # a previous code path vs today's
    python benchmarks/main_job.py --against 5c53438 [--pairs N]             # a previous revision vs today's code
    python benchmarks/main_job.py --gemm          # check the emulation: one GEMM's speed under each setting

Each run is the README's command in a child process on ``--threads`` threads with torch kept to one instruction
set: ATen's kernels (``ATEN_CPU_CAPABILITY``), oneDNN's (``ONEDNN_MAX_CPU_ISA``) and MKL's
(``MKL_ENABLE_INSTRUCTIONS``), so that an AVX-512/AMX machine runs the code paths of a laptop or a cheap cloud VM.
``cold`` builds the decision points into a fresh directory (the one-time GGUF->safetensors conversion of the
embedded model is not part of it when its copy under ``~/.cache/toolwise`` is already there: the output says
which), ``warm`` reruns on the points it built. Nothing is written to ``outputs/`` or ``checkpoints/``: the
points, the run directory and the exported gate go to a temporary directory. Extra arguments are Hydra overrides
of the job (e.g. ``recipe.points.build.limit=16``).

Phases come from timers at their boundaries inside the child (wrappers around the functions that start and end
them; forward hooks split each generation into prefill and decode): ``startup`` (interpreter, imports, Hydra),
``load`` (the engine), the rounds per shard (``prefill``: forwards over more than one new column; ``decode``:
one-column forwards; ``rollout_other``: the rest of the rounds — generate's per-step bookkeeping, tokenization,
KV caches kept between turns, the agent's own work), ``features`` (G-STEP's, computed in the loop's answer hook),
``build_other`` (tasks, the point store), ``fit`` (Lightning fit, calibration, metrics, export). Each run ends
with one line ``main_job_s=<wall> phases=<name>:<s>,...`` and the job's own last line (its figures). Targets on
an AVX2-only 2-core CPU: <= 300 s cold, <= 60 s warm.

``--compare NAME=OLD`` runs the job cold with a previous code path of the HF backend (``--set`` names them) and
with today's, ``--pairs`` times alternating, and prints the median ratio, whether the figures are the same and
whether the decision points (labels and features) came out bitwise identical. ``--against REV`` runs git
revision ``REV``'s code (its tree exported into the temporary directory, first on ``PYTHONPATH``) as the old side.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# HFBackend's code-path switches (class attributes) and what their previous path was
PATHS = {"kv_cache": "dynamic: the library's DynamicCache (a copy of the whole cache at every token)",
         "decode_segment": "0: one generate call per batch (rows that stopped keep decoding until the last does)",
         "tune_malloc": "false: glibc's malloc defaults (large temporaries unmapped when freed, faulted in again)",
         "staged_prefill": "false: each batch of prompts (grouped by whole length) prefilled and decoded by one "
                           "generate call",
         "prefix_pool_mib": "0: no KV kept for prompt prefixes that several prompts share",
         "ragged_attention": "false: transformers' SDPA reads every row's keys and values from the batch's left edge",
         "matmul_decode": "false: a decode step's attention per run of rows through torch's SDPA kernel",
         "decode_ratio": "a decode batch's longest prompt over its shortest (a setting, not a previous path)",
         "decode_batch_tokens": "a decode batch's rows x longest length at most (its KV cache; a setting)"}
FIGURES = re.compile(r"^g_step: test_auroc=.*$", re.M)


# ---------------------------------------------------------------------------------------------- child (one job)
class PhaseTimer:
    """Wall time per phase, from wrappers placed at the phases' boundaries before the job starts."""

    def __init__(self):
        self.t: dict[str, float] = defaultdict(float)
        self.rounds: list[dict] = []     # one entry per agent round: shard, step, rows, prefill/decode split
        self.shard = -1
        self._fwd: dict | None = None    # the round whose forwards are being timed
        self.turns: dict[str, list[str]] = {}   # each episode's turn texts: runs of two code paths must agree

    def wrap(self, owner, name: str, phase: str, before=None):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            if before is not None:
                before(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.t[phase] += time.perf_counter() - t0
        setattr(owner, name, timed)

    def hook_model(self, backend) -> None:
        model = getattr(backend, "model", None)
        if model is None:
            return
        state = {}

        def pre(_module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            state["t0"], state["q"], state["rows"] = time.perf_counter(), ids.shape[1], ids.shape[0]

        def post(_module, _args, _kwargs, _out):
            if self._fwd is None:
                return
            dt = time.perf_counter() - state["t0"]
            kind = "decode" if state["q"] == 1 else "prefill"
            self._fwd[kind] += dt
            self._fwd[f"{kind}_forwards"] += 1
            self._fwd[f"{kind}_rows"] += state["rows"]
            if kind == "prefill":
                self._fwd["prefill_columns"] += state["q"] * state["rows"]
        model.register_forward_pre_hook(pre, with_kwargs=True)
        model.register_forward_hook(post, with_kwargs=True)

    def install(self) -> None:
        from data_builders import build
        from data_builders.agent import loop
        from data_builders.backends import loading
        from data_builders.points import labelers
        from trainers.controller import fit

        original_load = loading.backend_from_config

        def load(*args, **kwargs):
            t0 = time.perf_counter()
            backend = original_load(*args, **kwargs)
            self.t["load"] += time.perf_counter() - t0
            self.hook_model(backend)
            return backend
        loading.backend_from_config = load

        def next_shard(*_a, **_k):
            self.shard += 1
        self.wrap(build, "label_shard", "build_shards", before=next_shard)
        self.wrap(labelers, "gstep_features", "features")
        self.wrap(fit, "decision_points", "points")
        self.wrap(fit, "fit", "fit_total")

        original_round = loop.Agent._round

        def round_(agent, active, step):
            self._fwd = defaultdict(float)
            t0 = time.perf_counter()
            features0 = self.t["features"]
            turns0 = [len(ep.turns) for ep in active]
            try:
                return original_round(agent, active, step)
            finally:
                wall = time.perf_counter() - t0
                f = self._fwd
                self._fwd = None
                self.rounds.append({"shard": self.shard, "round": step, "rows": len(active), "wall": wall,
                                    "prefill": f["prefill"], "decode": f["decode"],
                                    "decode_steps": int(f["decode_forwards"]), "generates": int(f["prefill_forwards"]),
                                    "prefill_columns": int(f["prefill_columns"]),
                                    # rows x decode steps computed, against the tokens the turns kept
                                    "decode_rows": int(f["decode_rows"]),
                                    "tokens": sum(ep.turns[-1].decode_tokens for ep, n in zip(active, turns0)
                                                  if len(ep.turns) > n),
                                    "features": self.t["features"] - features0})
        loop.Agent._round = round_

        original_record = loop.Agent._record

        def record(agent, ep):
            rec = original_record(agent, ep)
            self.turns[f"{rec.split}:{rec.task_id}"] = [t.text for t in rec.turns]
            return rec
        loop.Agent._record = record

    def summary(self) -> dict:
        rounds = self.rounds
        rollout = sum(r["wall"] for r in rounds)
        prefill = sum(r["prefill"] for r in rounds)
        decode = sum(r["decode"] for r in rounds)
        return {"load": self.t["load"], "rollout": rollout, "prefill": prefill, "decode": decode,
                "rollout_other": rollout - prefill - decode - self.t["features"], "features": self.t["features"],
                "build_other": self.t["points"] - self.t["load"] - rollout,
                "fit": self.t["fit_total"] - self.t["points"], "job": self.t["fit_total"], "rounds": rounds,
                "turns": self.turns}


def child(args, overrides: list[str]) -> None:
    import torch
    torch.set_num_threads(args.threads)
    timer = PhaseTimer()
    timer.install()
    from data_builders.backends import hf
    for name, value in code_path(args.set):
        setattr(hf.HFBackend, name, value)
    from trainers import fit
    sys.argv = ["trainers.fit", "recipe=g_step", *overrides]
    try:
        fit.main()
    except SystemExit as e:      # Hydra's main exits; a non-zero code is the job's failure
        if e.code:
            raise
    s = timer.summary()
    usage = resource.getrusage(resource.RUSAGE_SELF)     # the whole child: its kernel time is mostly page faults
    s |= {"user_s": usage.ru_utime, "sys_s": usage.ru_stime, "minor_faults": usage.ru_minflt,
          "max_rss_mib": usage.ru_maxrss / 1024}
    s["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    s["threads"] = torch.get_num_threads()
    Path(args.child).write_text(json.dumps(s))


def code_path(settings: list[str]) -> list[tuple[str, object]]:
    """``--set NAME=VALUE`` items as HFBackend class attributes, typed like the attribute they replace."""
    from data_builders.backends.hf import HFBackend
    out = []
    for item in settings:
        name, _, value = item.partition("=")
        if name not in PATHS:
            raise SystemExit(f"--set {item}: choose one of {sorted(PATHS)}")
        kind = type(getattr(HFBackend, name))
        if kind is bool and value.lower() not in ("true", "false"):
            raise SystemExit(f"--set {item}: true or false")
        out.append((name, value.lower() == "true" if kind is bool else kind(value)))
    return out


# ---------------------------------------------------------------------------------------------- parent
def cache_state() -> str:
    root = Path(os.environ.get("TOOLWISE_CACHE", Path.home() / ".cache" / "toolwise"))
    warm = any(root.glob("smollm2*/model.safetensors")) or any(root.glob("smollm2*/*.safetensors"))
    return "warm (GGUF->safetensors copy present: not timed)" if warm else "cold (includes the GGUF conversion)"


GEMM_CHECK = """
import time, torch
torch.set_num_threads({threads})
x, w = torch.randn(32 * 600, 576), torch.randn(1536, 576)    # a prefill's MLP projection on the embedded model
torch.nn.functional.linear(x, w)
t0 = time.perf_counter()
for _ in range(5):
    torch.nn.functional.linear(x, w)
dt = (time.perf_counter() - t0) / 5
print(f"{{torch.backends.cpu.get_cpu_capability()}} {{2 * x.shape[0] * 576 * 1536 / dt / 1e9:.0f}}")
"""


def gemm_check(args) -> None:
    """GFLOPS of one prefill-sized GEMM with the machine's own ISA, ATen + oneDNN limited, and MKL limited too."""
    for label, env in (("native", {}), ("ATEN_CPU_CAPABILITY + ONEDNN_MAX_CPU_ISA", {k: v for k, v in
                                                                                  isa_env(args.isa).items()
                                                                                  if not k.startswith("MKL")}),
                       ("+ MKL_ENABLE_INSTRUCTIONS", isa_env(args.isa))):
        out = subprocess.run([sys.executable, "-c", GEMM_CHECK.format(threads=args.threads)], capture_output=True,
                             text=True, env=dict(os.environ, **env), check=True).stdout.split()
        print(f"{label:<45} aten={out[0]:<8} sgemm {out[1]} GFLOPS")


def isa_env(isa: str) -> dict[str, str]:
    """Environment that keeps torch to one instruction set: ATen's own kernels, oneDNN's and MKL's. The first two
    alone leave the GEMMs (MKL sgemm: most of a forward pass) on AVX-512, which runs them 1.6x faster than on
    AVX2 (python benchmarks/main_job.py --gemm measures it)."""
    return {"ATEN_CPU_CAPABILITY": isa, "ONEDNN_MAX_CPU_ISA": isa.upper(), "MKL_ENABLE_INSTRUCTIONS": isa.upper()}


def export_revision(rev: str, into: Path) -> Path:
    """Revision ``rev``'s tree (``git archive``) under ``into``: the code a run ``--against`` it executes."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_job(work: Path, label: str, args, extra: list[str], settings: list[str], root: Path = ROOT) -> dict:
    phases_file = work / f"phases-{label}.json"
    overrides = [f"recipe.points.root={work / 'points'}", f"recipe.export_dir={work / 'export' / label}",
                 f"hydra.run.dir={work / 'run' / label}", *extra]
    env = dict(os.environ, **isa_env(args.isa), OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               WANDB_MODE="offline")
    if root != ROOT:    # another revision's code: its packages first on the path (before the editable install's)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    cmd = [sys.executable, str(root / "benchmarks" / "main_job.py"), "--child", str(phases_file),
           "--threads", str(args.threads)]
    for item in settings:
        cmd += ["--set", item]
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, "--", *overrides], cwd=root, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"{label}: the job failed (exit {proc.returncode})")
    s = json.loads(phases_file.read_text())
    s["wall"] = wall
    s["startup"] = wall - s["job"]
    found = FIGURES.findall(proc.stdout)
    s["figures"] = found[-1] if found else "(no figures line)"
    s["figures_key"] = re.sub(r" seconds=\S+", "", s["figures"])   # the job's own timing is not a figure
    s["eta"] = eta_check(proc.stderr)
    return s


BAR = re.compile(r"^(?P<desc>[^:\n]+):\s+\d+%\|[^|]*\|\s*\S+/\S+ \[(?P<el>[\d:]+)<(?P<rem>[\d:]+)", re.M)


def eta_check(stderr: str) -> dict[str, list]:
    """How far each progress bar's ETA was from the truth (the bar's own end), from the job's stderr: per bar, the
    worst ratio (said / true time left) once 10 % of its time had passed, and from when on it stayed within 2×.
    The last 5 % of a bar are not judged (a remainder of seconds, printed in whole seconds)."""
    def secs(text: str) -> int:
        return sum(int(v) * 60 ** i for i, v in enumerate(reversed(text.split(":"))))
    bars: dict[str, list[tuple[int, int]]] = {}
    for m in BAR.finditer(stderr.replace("\r", "\n")):
        bars.setdefault(m["desc"].strip(), []).append((secs(m["el"]), secs(m["rem"])))
    out = {}
    for desc, rows in bars.items():
        end = rows[-1][0]
        judged = [(el, rem / (end - el)) for el, rem in rows if end >= 20 and 0.1 * end <= el <= 0.95 * end]
        if judged:
            worst = max(judged, key=lambda r: max(r[1], 1 / r[1]) if r[1] else float("inf"))
            within = next((el for i, (el, _) in enumerate(judged)
                           if all(0.5 <= r <= 2 for _, r in judged[i:])), None)
            out[desc] = [end, round(worst[1], 2), round(100 * worst[0] / end), within and round(100 * within / end)]
    return out


def report(label: str, s: dict) -> None:
    print(f"\n[{label}] cpu_capability={s['cpu_capability']} threads={s['threads']}")
    if s["rounds"]:
        print(f"{'shard':>5} {'round':>5} {'rows':>4} {'wall_s':>8} {'prefill_s':>9} {'cols':>7} {'decode_s':>8} "
              f"{'steps':>5} {'row_steps':>9} {'tokens':>6} {'other_s':>7}")
        for r in s["rounds"]:
            other = r["wall"] - r["prefill"] - r["decode"]
            print(f"{r['shard']:>5} {r['round']:>5} {r['rows']:>4} {r['wall']:>8.2f} {r['prefill']:>9.2f} "
                  f"{r['prefill_columns']:>7} {r['decode']:>8.2f} {r['decode_steps']:>5} {r['decode_rows']:>9} "
                  f"{r['tokens']:>6} {other:>7.2f}")
    names = ("startup", "load", "prefill", "decode", "rollout_other", "features", "build_other", "fit")
    print(f"main_job_s={s['wall']:.1f} phases=" + ",".join(f"{k}:{s[k]:.1f}" for k in names)
          + f" (rollout {s['rollout']:.1f} = prefill + decode + rollout_other + features)")
    print(f"cpu user {s['user_s']:.1f} s, system {s['sys_s']:.1f} s, minor page faults {s['minor_faults']:,}, "
          f"peak RSS {s.get('max_rss_mib', 0):,.0f} MiB")
    for desc, (end, worst, at, within) in s.get("eta", {}).items():
        print(f"eta {desc!r} ({end} s): worst {worst}x of the truth (at {at} % of its time) after the first 10 %; "
              + (f"within 2x from {within} % on" if within is not None else "never within 2x to the end"))
    print(s["figures"])


def same_points(a: Path, b: Path) -> str:
    """How two builds' decision points compare: rows (labels, splits, outcomes) and feature tensors."""
    import torch
    from data_builders.points.store import load_points
    da, db = (next(p.parent for p in d.glob("*/*/manifest.json")) for d in (a, b))
    pa, pb = load_points(da), load_points(db)
    if pa.points.to_list() != pb.points.to_list() or pa.features.keys() != pb.features.keys():
        return "different rows or labels"
    if all(torch.equal(pa.features[k], pb.features[k]) for k in pa.features):
        return "bitwise identical"
    diff = max((pa.features[k] - pb.features[k]).abs().max().item() for k in pa.features)
    return f"same rows and labels, features differ by at most {diff:.2g}"


def same_turns(a: dict, b: dict) -> str:
    differ = [k for k in a if a[k] != b.get(k)]
    return f"{len(a) - len(differ)}/{len(a)} episodes with identical turns" + (f" (differ: {differ[:5]})" if differ
                                                                               else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="cold,warm", help="cold, warm or cold,warm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--isa", default="avx2", choices=("avx2", "avx512"), help="the instruction set torch may use")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a previous code path: " + "; ".join(f"{k}={v}" for k, v in PATHS.items()))
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=OLD",
                    help="the job with these --set paths (old) against today's (new), cold, --pairs times "
                         "alternating; prints the ratio")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="with --compare or alone: the old side runs git revision REV's code (e.g. a commit before a "
                         "change no switch can undo) instead of today's with --compare paths")
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--gemm", action="store_true", help="only check the emulation: a GEMM's speed under each setting")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (printed)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if args.child:
        return child(args, extra)
    if args.gemm:
        return gemm_check(args)

    print(f"command: python -m trainers.fit recipe=g_step {' '.join(extra)} "
          f"({' '.join(f'{k}={v}' for k, v in isa_env(args.isa).items())}, {args.threads} threads); "
          f"model cache {cache_state()}")
    work = Path(tempfile.mkdtemp(prefix="main_job_"))
    try:
        if args.compare or args.against:
            code_path(args.compare)     # a misspelt path fails here, not after the first run
            old_root = export_revision(args.against, work / "revision") if args.against else ROOT
            old_name = f"revision {args.against}" if args.against else " ".join(args.set + args.compare)
            times = {"old": [], "new": []}
            figures, turns = set(), {}
            for k in range(args.pairs):
                for label, settings, root in (("old", [] if args.against else args.set + args.compare, old_root),
                                              ("new", args.set, ROOT)):
                    d = work / f"{label}{k}"
                    s = run_job(d, f"{label}{k}", args, extra, settings, root)
                    report(f"{label} ({old_name if label == 'old' else ' '.join(settings) or 'today'}), pair {k}", s)
                    times[label].append(s["wall"])
                    figures.add(s["figures_key"])
                    turns[label] = s["turns"]
                print(f"pair {k}: generated text: {same_turns(turns['old'], turns['new'])}; decision points: "
                      f"{same_points(work / f'old{k}' / 'points', work / f'new{k}' / 'points')}")
            ratio = statistics.median(o / n for o, n in zip(times["old"], times["new"]))
            print(f"\nold_s={statistics.median(times['old']):.1f} new_s={statistics.median(times['new']):.1f} "
                  f"speedup={ratio:.2f}x (median of {args.pairs} pair(s), old/new) identical_figures={len(figures) == 1}")
            return
        for label in args.runs.split(","):
            if label not in ("cold", "warm"):
                raise SystemExit(f"--runs: cold and/or warm, got {label!r}")
            if label == "cold":
                shutil.rmtree(work / "points", ignore_errors=True)
            s = run_job(work, label, args, extra, args.set)
            report(label, s)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
