"""Memory of the probe's all-layer read, measured in fresh processes on the embedded model (peak RSS above the
loaded model), and the weights a probe-only HF copy beside vLLM holds.

    python benchmarks/probe_memory.py [--prompts 32]

* ``hooks``: ``HFBackend.prefill`` as shipped: forward hooks keep each row's last position per layer
  (``data_builders/backends/hf.py``, ``last_token_states``).
* ``output_hidden_states``: the same forward with transformers' ``output_hidden_states=True``, which keeps all
  n_layers + 1 full [batch, seq, d] states alive until the last slice is taken (toolwise's earlier read).
* weights: the full causal LM vs the ``probe_only`` base model (no LM head) that a vLLM backend loads for the probe.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys


def rss_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(mode: str, n: int) -> dict:
    import torch

    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.backends.hf import _position_ids
    from data_builders.backends.loading import load_backend
    from data_builders.tasks import load_tasks

    backend = load_backend("smollm2", probe_only=(mode == "weights_probe_only"))
    if mode.startswith("weights"):
        return {"param_bytes": sum(p.numel() * p.element_size() for p in backend.model.parameters())}
    agent = Agent(backend, AgentConfig(mode="default"))
    prompts = [agent._render(agent._start(t, i)) for i, t in enumerate(load_tasks("builtin", limit=n))]
    base = rss_kib("VmRSS")
    with torch.inference_mode():
        if mode == "hooks":
            backend.prefill(prompts)
        else:
            kept = []   # the KV caches, as prefill keeps them for the generation that continues each batch
            for idx in backend._chunks(prompts):
                enc = backend._encode([prompts[i] for i in idx])
                out = backend.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                                    position_ids=_position_ids(enc["attention_mask"]), use_cache=True,
                                    output_hidden_states=True, logits_to_keep=1)
                torch.stack([h[:, -1, :] for h in out.hidden_states], dim=1)
                kept.append(out.past_key_values if hasattr(out, "past_key_values") else out.cache)
                del out
    return {"peak_above_model_mib": (rss_kib("VmHWM") - base) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.prompts)))
        return
    res = {}
    for mode in ("hooks", "output_hidden_states", "weights_causal_lm", "weights_probe_only"):
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--prompts", str(args.prompts)],
                             capture_output=True, text=True, check=True).stdout
        res[mode] = json.loads(out.strip().splitlines()[-1])
    h, o = res["hooks"]["peak_above_model_mib"], res["output_hidden_states"]["peak_above_model_mib"]
    print(f"prefill of {args.prompts} agent prompts, peak RSS above the loaded model: hooks {h:.0f} MiB, "
          f"output_hidden_states {o:.0f} MiB (ratio {o / max(h, 1e-9):.2f})")
    w, p = res["weights_causal_lm"]["param_bytes"], res["weights_probe_only"]["param_bytes"]
    print(f"weights: causal LM {w / 2**20:.0f} MiB, probe-only copy {p / 2**20:.0f} MiB "
          "(SmolLM2 ties its LM head to the embeddings, so nothing is saved here; an untied 8B Llama 3 saves "
          "128256 x 4096 x 2 B = 1.05 GB in bf16)")
    print(f"probe_memory_hooks_mib={h:.0f} probe_memory_output_hidden_states_mib={o:.0f}")


if __name__ == "__main__":
    main()
