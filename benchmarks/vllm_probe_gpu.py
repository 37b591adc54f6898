"""The probe's all-layer read on a GPU with CUDA graphs: an HF copy beside vLLM vs the tap inside the engine.

    python benchmarks/vllm_probe_gpu.py MODEL [--prompts 32] [--new-tokens 64] [--repeats 5] [--gpu-util 0.5]
    # MODEL: a Hugging Face id or local path of an 8B policy, e.g. meta-llama/Llama-3.1-8B-Instruct (bf16)

Needs a CUDA GPU, vLLM (pip install '.[vllm]') and this package installed (pip install -e .), which registers
the ``vllm.general_plugins`` entry point that taps the decoder layers (data_builders/backends/vllm_probe_op.py).
Both arms run vLLM's default compiled engine (``backend.enforce_eager=false``: torch.compile and CUDA graphs),
each in its own child process on the same prompts (built-in test tasks rendered by the agent):

* ``hf-copy``: ``VLLM_PLUGINS`` leaves the plugin out, so the compiled layers carry no tap and the read runs on
  an HF copy of the weights loaded beside the engine (``backend.probe_device=cuda``);
* ``op``: the plugin is loaded, the read runs in the engine through the tap op, no HF copy.

Each arm times, after a warm-up, from an empty prefix cache: greedy generation alone, then the probe read (all
hidden-state indices) followed by the same generation. Printed per arm: engine start, median probe read,
probe+generate / generate (median of per-repeat ratios), peak GPU memory of the process (torch's allocator peak
and, since vLLM reserves its KV cache up front, ``nvidia-smi``'s used memory at the end), whether an HF copy was
loaded; then max |op - hf-copy| over the features (bf16: expect about 1e-2 relative, the engines' kernels differ)
and whether the generations are identical.

Expected: the HF copy of an 8B policy in bf16 is about 16 GB of weights (8.0e9 parameters x 2 bytes) plus its
activations for the read, all of which the op arm does not hold; with ``--gpu-util`` fixed, the op arm's peak is
lower by that much (the KV cache vLLM reserves is the same in both). The op arm's probe read should be close to
one prefill of the prompts (the tap copies ``max_num_seqs`` rows per layer, about 1 MiB per layer at d=4096), and
probe+generate / generate <= 1.05. Keep ``--gpu-util`` low enough that the hf-copy arm's copy fits beside vLLM.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ARMS = ("hf-copy", "op")


def gpu_used_mib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True)
    return float(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else float("nan")


def arm(name: str, args) -> dict:
    import torch

    from data_builders.backends.base import SamplingParams
    from recipes import compose

    model_over = [f"model.name={args.model}", "model.adapter=null", "model.device=cuda", "model.dtype=bfloat16"]
    cfg = compose("rollout", model_over + [
        "backend=vllm", "backend.enforce_eager=false", f"backend.gpu_memory_utilization={args.gpu_util}",
        "backend.probe_device=cuda", f"backend.max_model_len={args.max_model_len}"])
    # the CPU benchmark's engine start and measuring loop (this script's directory is on the path when it runs)
    from vllm_probe import engine_and_prompts, timed_reads

    backend, start, prompts = engine_and_prompts(cfg, args.prompts)
    params = SamplingParams(max_new_tokens=args.new_tokens, stop=("</tool_call>",))
    backend.prefill(prompts[:2])          # warm-up; the hf-copy arm loads its copy here
    backend.generate(prompts[:2], params)
    gen, probe, both, out, state, _ = timed_reads(backend, prompts, params, args.repeats, torch.cuda.synchronize)
    torch.save({"hidden": state.hidden, "tokens": [g.token_ids for g in out]}, os.path.join(args.out, name + ".pt"))
    return {"arm": name, "prompts": len(prompts), "start_s": start, "probe_path": backend.probe_path,
            "hf_copy_loaded": backend._hf is not None, "generate_s": statistics.median(gen),
            "probe_s": statistics.median(probe), "probe_generate_s": statistics.median(both),
            "pair_ratio": statistics.median(b / g for b, g in zip(both, gen)),
            "torch_peak_mib": torch.cuda.max_memory_allocated() / 2**20, "gpu_used_mib": gpu_used_mib(),
            "cudagraph_mode": str(backend.llm.llm_engine.vllm_config.compilation_config.cudagraph_mode)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="HF id or local path of the policy (an 8B Llama-family model in bf16)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gpu-util", type=float, default=0.5, help="vLLM's share of the GPU, the same in both arms")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)      # the child's side
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args)))
        return
    args.out = tempfile.mkdtemp(prefix="vllm_probe_gpu_")
    res = {}
    for name in ARMS:
        env = dict(os.environ)
        if name == "hf-copy":
            env["VLLM_PLUGINS"] = ""      # an allow-list naming no plugin: vLLM loads none, the layers carry no tap
        cmd = [sys.executable, __file__, args.model, "--arm", name, "--prompts", str(args.prompts), "--new-tokens",
               str(args.new_tokens), "--repeats", str(args.repeats), "--gpu-util", str(args.gpu_util),
               "--max-model-len", str(args.max_model_len), "--out", args.out]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"arm {name} failed:\n{proc.stderr[-3000:]}")
        res[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in res.values():
        print(f"{r['arm']:8s} prompts={r['prompts']} path={r['probe_path']} hf_copy_loaded={r['hf_copy_loaded']}"
              f" start={r['start_s']:.1f}s generate={r['generate_s']:.2f}s probe={r['probe_s']:.3f}s"
              f" probe+generate={r['probe_generate_s']:.2f}s (x{r['pair_ratio']:.3f} of generate)"
              f" torch_peak={r['torch_peak_mib']:.0f}MiB gpu_used_end={r['gpu_used_mib']:.0f}MiB"
              f" cudagraph_mode={r['cudagraph_mode']}")
    o, h = res["op"], res["hf-copy"]
    print(f"op - hf-copy: torch_peak {o['torch_peak_mib'] - h['torch_peak_mib']:+.0f} MiB, gpu_used"
          f" {o['gpu_used_mib'] - h['gpu_used_mib']:+.0f} MiB, probe x{o['probe_s'] / h['probe_s']:.3f}")
    import torch

    a, b = (torch.load(os.path.join(args.out, n + ".pt")) for n in ("op", "hf-copy"))
    diff = (a["hidden"].float() - b["hidden"].float()).abs()
    print(f"features {tuple(a['hidden'].shape)}: max |op - hf| {diff.max().item():.2e}, max |diff| / max |hf| per"
          f" row {(diff.amax(-1) / b['hidden'].float().abs().amax(-1)).max().item():.2e};"
          f" generations identical: {a['tokens'] == b['tokens']}")


if __name__ == "__main__":
    main()
