"""A decode step's attention on CPU: the HF backend's two paths over the same left-padded batch, side by side.

    python benchmarks/decode_attention.py [--rows 15] [--columns 800,1500,2500] [--isa avx2] [--threads 2]

``ragged_sdpa_forward`` (each run of rows through transformers' SDPA, the previous path) against
``ragged_matmul_forward`` (each run as two batched matmuls and a softmax, ``HFBackend.matmul_decode``) with the
embedded model's attention shapes (9 query heads, 3 key/value heads, head dim 64, fp32), timed for 30 layers'
worth of calls, the two alternating; prints each path's milliseconds per step, their ratio and the largest
difference between their outputs. Torch is kept to ``--isa`` (ATen, oneDNN and MKL, as benchmarks/main_job.py
does: the process re-executes itself with the three variables set).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--rows", type=int, default=15, help="rows of the decode batch (the main job's mean: ~13)")
ap.add_argument("--columns", default="800,1500,2500", help="KV columns per row, comma-separated")
ap.add_argument("--isa", default="avx2", choices=("avx2", "avx512"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeats", type=int, default=5, help="alternating repeats of 30 layers' calls per path")
args = ap.parse_args()

ISA = {"ATEN_CPU_CAPABILITY": args.isa, "ONEDNN_MAX_CPU_ISA": args.isa.upper(),
       "MKL_ENABLE_INSTRUCTIONS": args.isa.upper()}
if any(os.environ.get(k) != v for k, v in ISA.items()):     # before torch loads: its kernels are chosen at import
    os.execve(sys.executable, [sys.executable, *sys.argv], dict(os.environ, **ISA))

import torch  # noqa: E402

from data_builders.backends import ragged_attention  # noqa: E402

torch.set_num_threads(args.threads)
HEADS, KV_HEADS, DIM, LAYERS = 9, 3, 64, 30


class Attention(torch.nn.Module):
    is_causal = True
    num_key_value_groups = HEADS // KV_HEADS


def batch(columns: int, seed: int = 0):
    """Rows left-padded to ``columns``: the first real column spread over a quarter of them (a round's rows)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(args.rows, HEADS, 1, DIM, generator=g)
    k, v = (torch.randn(args.rows, KV_HEADS, columns, DIM, generator=g) for _ in range(2))
    mask = torch.zeros(args.rows, 1, 1, columns, dtype=torch.bool)
    for r in range(args.rows):
        mask[r, ..., r * columns // (4 * args.rows):] = True
    return q, k, v, mask


def per_step(forward, inputs) -> float:
    t = time.perf_counter()
    for _ in range(LAYERS):
        forward(module, *inputs, scaling=DIM ** -0.5)
    return time.perf_counter() - t


module = Attention().eval()
paths = {"sdpa": ragged_attention.ragged_sdpa_forward, "matmul": ragged_attention.ragged_matmul_forward}
print(f"{args.rows} rows, {HEADS} heads ({KV_HEADS} kv), head dim {DIM}, fp32, {LAYERS} layers a step; "
      f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {args.threads} threads")
for columns in (int(c) for c in args.columns.split(",")):
    inputs = batch(columns)
    diff = (paths["sdpa"](module, *inputs)[0] - paths["matmul"](module, *inputs)[0]).abs().max().item()
    times = {name: [] for name in paths}
    for _ in range(args.repeats):
        for name, forward in paths.items():
            per_step(forward, inputs)                     # warm
            times[name].append(per_step(forward, inputs))
    best = {name: min(t) * 1e3 for name, t in times.items()}
    print(f"columns={columns}: sdpa {best['sdpa']:.1f} ms/step  matmul {best['matmul']:.1f} ms/step  "
          f"ratio {best['sdpa'] / best['matmul']:.2f}x  max |diff| {diff:.1e}")
