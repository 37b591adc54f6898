"""Does PTE track real generation latency better than a token count? (PTE: "Beyond Accuracy: Unveiling
Inefficiency Patterns in Tool-Integrated Reasoning", arXiv 2604.05404)

    OMP_NUM_THREADS=2 python benchmarks/pte_latency.py [--tasks 24] [--source builtin|when2tool] \
        [--path $WHEN2TOOL] [--max-rounds 4] [--max-new-tokens 192] [--hardware h100_pcie_paper] \
        [--reuse-kv] [--save outputs/pte_latency.jsonl]

The paper (Su et al., arXiv 2604.05404) reports Pearson r = 0.925 between a trajectory's PTE and its latency,
and r = -0.375 for its raw token count. This script measures the same relation on the embedded policy
(``compose("rollout", ["model=<--model>", "backend=hf"])``: SmolLM2-135M + the committed tool_sft adapter,
HF backend), default prompt mode, greedy decoding, on test-split tasks interleaved over environment x
difficulty (``load_tasks``).

What is timed. Every task runs as its own episode: ``max_in_flight=1``, so ``Agent.run`` keeps exactly one
episode active and every ``backend.generate`` call holds that one episode's prompt (batch size 1). A turn's
``wall_s`` (the loop's timer around ``generate``) is therefore that trajectory's own time, and the latency of
a trajectory is the sum of its turns' ``wall_s``: prompt tokenization + prefill + decode. Tool execution is
*excluded* — the loop stops the timer when ``generate`` returns and runs the tool afterwards — because PTE
prices only LLM compute (the paper's latency is the model's serving time; tool latency depends on the tool,
not on tokens). For reference the script also records the whole episode's time (between consecutive
episode completions: generation + tools + prompt rendering) and reports the correlations against it too.

KV cache. By default the engine re-prefills the whole context every turn (``reuse_kv=False``), which is the
paper's full-eviction assumption behind PTE's ``D_prefill_i = prefill_tokens``. ``--reuse-kv`` keeps each
episode's cache between turns (the rollout default); then the cache-reuse PTE (``new_tokens``) is the
matching definition. Both PTE variants are always reported.

Per trajectory: PTE with γ for the policy on ``--hardware`` (a profile of ``data_builders/metrics/hardware.py``, default
the paper's H100 PCIe), raw tokens = Σ prefill_tokens + Σ decode_tokens, decode tokens alone, prefill tokens
alone; then a table of n and means and the Pearson r (and Spearman ρ) of each against latency.

γ for *this* machine (CPU only; skipped on a GPU). PTE's γ = 2·n_layers·d_model·HOI / N_params assumes a
KV cache of 2-byte values; HOI is the roofline ridge point, peak FLOP/s ÷ memory bandwidth. For the CPU we
measure both with torch at the threads this process has: peak FLOP/s = best of 10 float32 1024x1024
matmuls (2·n³ FLOPs each, the kernel a prefill's linear layers run), bandwidth = best of 5 reductions over a
256 MiB tensor (bytes read / s: a decode step *reads* its KV cache). The model runs in float32, so its KV
values are 4 bytes, not 2: the HOI passed to γ is scaled by element size / 2. The result is an estimate
on a CPU shared with other jobs (both peaks are noisy, the matmul kernel is not the model's exact shapes).

What to expect on this machine. On 2 CPU cores the prefill is compute-bound at only ≈ 400 prompt tokens/s
for this 135M model, and at batch size 1 every decoded token re-reads all the weights (≈ 0.5 GB in float32)
— a cost PTE does not model (it prices a decode token by its KV reads alone, which the paper's batched GPU
serving amortises the weights against). So the relation between tokens, PTE and latency differs from the
paper's GPU setting; the script reports what it measures. It also prints a least-squares fit
latency ≈ a·prefill_tokens + b·decode_tokens, whose b/a is what one decoded token costs in prefill tokens
here, to compare with PTE's γ·context_len.

Run it on a quiet CPU: another job on the same cores deschedules the OpenMP threads and inflates some
trajectories' wall time many-fold (seen: 118-143 s instead of ≈ 4 s while a test suite ran), which swamps any
cost model. The script prints the 1-minute load average before and after the timed run and warns when it
exceeded the core count; Spearman ρ, printed beside Pearson r, is less sensitive to such outliers.

Ends with one key=value line.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.loading import backend_from_config
from data_builders.tasks import load_tasks
from recipes import compose
from data_builders.metrics.hardware import DEFAULT_HARDWARE, PROFILES
from data_builders.metrics.pte import PTEConfig, config_of, gamma_from_config, trajectory_pte


# ---------------------------------------------------------------------------------------------------- HOI
def measure_cpu_hoi(dtype: torch.dtype = torch.float32) -> dict:
    """Peak matmul FLOP/s and memory read bandwidth of this CPU, measured with torch (see the docstring)."""
    n = 1024
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b                                                     # warm-up (thread pool, kernel selection)
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t0)
    flops = 2 * n ** 3 / best
    x = torch.ones(256 * 2 ** 20 // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    x.sum()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter(); x.sum(); best = min(best, time.perf_counter() - t0)
    bandwidth = x.numel() * x.element_size() / best
    return {"peak_flops": flops, "mem_bandwidth": bandwidth, "hoi": flops / bandwidth}


# ---------------------------------------------------------------------------------------------------- stats
def correlation(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """(Pearson r, its two-sided p, Spearman ρ); NaN where undefined (n < 3 or a constant column)."""
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan, math.nan, math.nan
    r, p = stats.pearsonr(x, y)
    rho = stats.spearmanr(x, y).statistic
    return float(r), float(p), float(rho)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2_tool_sft", help="a recipes/model config (default: embedded + tool_sft)")
    ap.add_argument("--tasks", type=int, default=24)
    ap.add_argument("--source", default="builtin", choices=["builtin", "when2tool"])
    ap.add_argument("--path", default=None, help="When2Tool task directory (--source when2tool)")
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--hardware", default=DEFAULT_HARDWARE, choices=sorted(PROFILES),
                    help="hardware profile for PTE's γ (data_builders/metrics/hardware.py)")
    ap.add_argument("--reuse-kv", action="store_true",
                    help="keep each episode's KV cache between turns (default: re-prefill, as PTE assumes)")
    ap.add_argument("--no-machine-gamma", action="store_true", help="skip the CPU HOI measurement")
    ap.add_argument("--save", default=None, help="write one JSON line per trajectory (figures, not messages)")
    args = ap.parse_args()

    cfg = compose("rollout", [f"model={args.model}", "backend=hf"])
    backend = backend_from_config(cfg.model, cfg.backend)
    tasks = load_tasks(args.source, split="test", path=args.path, limit=args.tasks)
    agent_cfg = AgentConfig(mode="default", max_rounds=args.max_rounds, max_new_tokens=args.max_new_tokens,
                            temperature=0.0, max_in_flight=1, reuse_kv=args.reuse_kv)
    agent = Agent(backend, agent_cfg)

    full, reuse = PTEConfig(hardware=args.hardware), PTEConfig(hardware=args.hardware, cache_reuse=True)
    g = full.gamma_for(backend)
    on_cpu = backend.device.type == "cpu"
    machine = None
    if on_cpu and not args.no_machine_gamma:
        dtype = backend.model.dtype
        machine = measure_cpu_hoi(dtype)
        machine["kv_bytes"] = torch.tensor([], dtype=dtype).element_size()
        machine["gamma"] = gamma_from_config(config_of(backend), machine["hoi"] * machine["kv_bytes"] / 2)

    # Warm-up outside the timed episodes: first-call costs (allocator, kernels, stop-string tables).
    Agent(backend, AgentConfig(mode="default", max_rounds=1, max_new_tokens=8, max_in_flight=1,
                               reuse_kv=args.reuse_kv)).run(tasks[:1])

    # Whole-episode times: with max_in_flight=1 episodes run back to back, so consecutive completions delimit them.
    done_at: dict[str, float] = {}
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()
    trajs = agent.run(tasks, on_done=lambda rec: done_at.__setitem__(str(rec.task_id), time.perf_counter()))
    t_total = time.perf_counter() - t_start
    load_after = os.getloadavg()[0]

    rows, skipped, prev = [], 0, t_start
    for tr in trajs:
        end = done_at[str(tr.task_id)]
        episode_s, prev = end - prev, end
        turns = tr.turns
        if not turns:
            skipped += 1
            continue
        prefill = sum(t.prefill_tokens for t in turns)
        decode = sum(t.decode_tokens for t in turns)
        row = {"task_id": tr.task_id, "env": tr.env, "difficulty": tr.difficulty, "turns": len(turns),
               "latency_s": sum(t.wall_s for t in turns), "episode_s": episode_s,
               "prefill_tokens": prefill, "new_tokens": sum(t.new_tokens for t in turns),
               "decode_tokens": decode, "raw_tokens": prefill + decode,
               "pte": full.trajectory_pte(tr, g), "pte_reuse": reuse.trajectory_pte(tr, g),
               "correct": tr.correct}
        if machine:
            row["pte_machine"] = trajectory_pte(tr, machine["gamma"], cache_reuse=args.reuse_kv)
        rows.append(row)

    print(f"\n{len(tasks)} tasks ({args.source} test, interleaved), model {backend.fingerprint}, device "
          f"{backend.device}, torch threads {torch.get_num_threads()}, default mode, greedy, max_in_flight=1, "
          f"max_rounds {args.max_rounds}, max_new_tokens {args.max_new_tokens}, KV "
          f"{'reused between turns' if args.reuse_kv else 're-prefilled every turn (full eviction)'}")
    print(f"gamma={g:.5f} on {args.hardware} (HOI {full.profile.hoi})")
    if machine:
        print(f"this machine: peak {machine['peak_flops'] / 1e9:.1f} GFLOP/s (float matmul), read bandwidth "
              f"{machine['mem_bandwidth'] / 1e9:.1f} GB/s, HOI {machine['hoi']:.2f} FLOP/byte, "
              f"KV {machine['kv_bytes']} bytes/value -> gamma={machine['gamma']:.6f}")
    # Our own process keeps ~torch threads busy; a 1-min load average well above the cores means other jobs
    # competed for them, and OpenMP threads that get descheduled stall each other (latency outliers).
    cores = os.cpu_count() or 1
    print(f"1-min load average {load_before:.2f} before / {load_after:.2f} after the timed run, {cores} cores"
          + (" -- WARNING: the CPU was shared during the run; wall times include waiting for it"
             if max(load_before, load_after) > cores + 0.5 else ""))
    if skipped:
        print(f"skipped {skipped} trajectories with no turns (prompt over the context before any generation)")
    if not rows:
        raise SystemExit("no trajectory with turns: nothing to correlate")

    print(f"\n{'task':>26} {'diff':>6} {'turns':>5} {'gen s':>7} {'ep s':>7} {'prefill':>7} {'decode':>6} "
          f"{'PTE':>9}")
    for r in rows:
        print(f"{str(r['task_id'])[:26]:>26} {r['difficulty']:>6} {r['turns']:>5} {r['latency_s']:7.2f} "
              f"{r['episode_s']:7.2f} {r['prefill_tokens']:7d} {r['decode_tokens']:6d} {r['pte']:9.0f}")

    n = len(rows)
    mean = {k: sum(r[k] for r in rows) / n for k in rows[0] if isinstance(rows[0][k], (int, float))}
    print(f"\nn={n}  mean generation latency {mean['latency_s']:.2f} s  (episode {mean['episode_s']:.2f} s)  "
          f"mean PTE {mean['pte']:.0f}  mean raw tokens {mean['raw_tokens']:.0f}  "
          f"(prefill {mean['prefill_tokens']:.0f}, decode {mean['decode_tokens']:.1f})  "
          f"mean turns {mean['turns']:.2f}  accuracy {mean['correct']:.3f}")

    metrics = [("pte", f"PTE ({args.hardware}, full eviction)"),
               ("pte_reuse", f"PTE ({args.hardware}, cache reuse)")]
    if machine:
        metrics.append(("pte_machine", "PTE (this machine's gamma)"))
    metrics += [("raw_tokens", "raw tokens (prefill + decode)"), ("decode_tokens", "decode tokens"),
                ("prefill_tokens", "prefill tokens")]
    lat, ep = [r["latency_s"] for r in rows], [r["episode_s"] for r in rows]
    result = {}
    print(f"\n{'metric':<38} {'r vs gen latency':>16} {'p':>9} {'Spearman':>9} {'r vs episode':>12}")
    for key, label in metrics:
        xs = [float(r[key]) for r in rows]
        r, p, rho = correlation(xs, lat)
        result[key] = r
        print(f"{label:<38} {r:16.3f} {p:9.2g} {rho:9.3f} {correlation(xs, ep)[0]:12.3f}")
    print("paper (GPU): PTE r = 0.925, raw tokens r = -0.375")

    # What one decoded token costs in prefill tokens on this machine: latency ≈ a·prefill + b·decode.
    X = np.array([[r["prefill_tokens"], r["decode_tokens"]] for r in rows], dtype=float)
    (a, b), *_ = np.linalg.lstsq(X, np.array(lat), rcond=None)
    ctx = sum(t.context_len * t.decode_tokens for tr in trajs for t in tr.turns) / max(
        sum(t.decode_tokens for tr in trajs for t in tr.turns), 1)
    if a > 0 and b > 0:
        print(f"fit latency ≈ {a * 1e3:.3f} ms/prefill token + {b * 1e3:.2f} ms/decode token "
              f"({1 / a:.0f} prompt tok/s): one decode token ≈ {b / a:.1f} prefill tokens here; "
              f"PTE prices it at gamma x context = {g:.4f} x {ctx:.0f} = {g * ctx:.1f}"
              + (f" ({args.hardware}), {machine['gamma'] * ctx:.2f} (this machine)" if machine else ""))
    else:
        print(f"fit latency ≈ {a * 1e3:.3f} ms/prefill token + {b * 1e3:.2f} ms/decode token (a negative "
              f"coefficient: the fit is not meaningful, e.g. latency dominated by contention outliers)")

    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        with open(args.save, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    print(f"pte_latency_r={result['pte']:.3f} raw_tokens_latency_r={result['raw_tokens']:.3f} "
          f"decode_tokens_latency_r={result['decode_tokens']:.3f} pte_reuse_latency_r={result['pte_reuse']:.3f}"
          + (f" pte_machine_latency_r={result['pte_machine']:.3f}" if machine else "")
          + f" n={n} skipped={skipped} gamma={g:.5f} hardware={args.hardware} total_s={t_total:.1f}"
          f" load_avg={max(load_before, load_after):.2f}")


if __name__ == "__main__":
    main()
