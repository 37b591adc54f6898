"""The evaluator's ``report.md`` and plots (matplotlib, PNG) from ``results.json``'s structure."""
from __future__ import annotations

from pathlib import Path

COLUMNS = [("accuracy", "acc", "{:.3f}"), ("tool_calls_per_task", "calls/task", "{:.2f}"),
           ("tool_call_rate", "call rate", "{:.2f}"), ("tokens_per_task", "tokens", "{:.0f}"),
           ("token_cost_per_task", "token_cost", "{:.0f}"), ("pte_per_task", "PTE", "{:.0f}"),
           ("latency_s_per_task", "latency s", "{:.2f}"), ("format_error_rate", "fmt err", "{:.3f}")]


def _fmt(v, spec) -> str:
    return "–" if v is None else spec.format(v)


def arms_table(results: dict) -> str:
    head = "| arm | " + " | ".join(c[1] for c in COLUMNS) + " | ΔAcc (pts) | ΔTC | ΔAcc/−ΔTC |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 4)]
    for name, m in results["arms"].items():
        d = results["deltas"][name]
        lines.append(f"| {name} | " + " | ".join(_fmt(m["all"].get(k), f) for k, _, f in COLUMNS)
                     + f" | {d['d_acc']:+.1f} | {d['d_tc']:+.2f} | {_fmt(d['d_acc_per_saved_call'], '{:+.1f}')} |")
    return "\n".join(lines)


def by_group_table(results: dict, prefix: str) -> str:
    groups = sorted({g for m in results["arms"].values() for g in m if g.startswith(prefix)})
    head = "| arm | " + " | ".join(f"{g.split('=')[1]} acc | calls" for g in groups) + " |"
    lines = [head, "|" + "---|" * (1 + len(groups))]
    for name, m in results["arms"].items():
        cells = [f"{m[g]['accuracy']:.3f} / {m[g]['tool_calls_per_task']:.2f}" if g in m else "–" for g in groups]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def patterns_table(results: dict) -> str | None:
    rows = [(n, m["patterns"]) for n, m in results["arms"].items() if m.get("patterns")]
    if not rows:
        return None
    keys = [k for k in rows[0][1] if k != "n"]
    lines = ["| arm | " + " | ".join(keys) + " |", "|" + "---|" * (1 + len(keys))]
    lines += [f"| {n} | " + " | ".join(str(p.get(k, 0)) for k in keys) + " |" for n, p in rows]
    return "\n".join(lines)


def plots(results: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    swept = {name for c in results["curves"].values() for name in c["arms"]}
    for x_key, label, fname in (("tool_calls_per_task", "tool calls per task", "accuracy_vs_calls.png"),
                                ("pte_per_task", "PTE per task (tokens)", "accuracy_vs_pte.png")):
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for name, m in results["arms"].items():
            if name not in swept:
                ax.scatter(m["all"][x_key], m["all"]["accuracy"], label=name, marker="s" if "@" not in name else "o")
        for family, c in results["curves"].items():
            pts = sorted((results["arms"][n]["all"][x_key], results["arms"][n]["all"]["accuracy"]) for n in c["arms"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label=f"{family} (τ sweep)")
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{results['tasks']} {results['split']} tasks · {results['policy'].split('@')[0]}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = out_dir / fname
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files.append(path)
    return files


def write_report(results: dict, out_dir: Path) -> list[Path]:
    files = plots(results, out_dir)
    ctrl = "\n".join(f"- {k}: `{v['checkpoint']}` (τ {v['tau']:.3f}, T {v['temperature']:.2f}, test AUROC on its "
                     f"decision points {v['test_auroc']})" for k, v in results["controllers"].items())
    curves = "\n".join(f"- {f}: area under accuracy vs calls {c['area'] if c['area'] is None else round(c['area'], 4)}"
                       f" ({len(c['arms'])} τ values)" for f, c in results["curves"].items())
    pat = patterns_table(results)
    text = f"""# toolwise evaluation

{results['tasks']} {results['split']} tasks of `{results['task_source'].get('source')}`, policy
`{results['policy']}` on `{results['backend']}`, decoding {results['decoding']}. PTE with γ = {results['gamma']:.5f}
(hardware `{results['hardware']}`, {results['pte']}). Deltas against `{results['reference']}`.

## Arms

{arms_table(results)}

## Per difficulty (accuracy / calls per task)

{by_group_table(results, 'difficulty=')}

## Per category (accuracy / calls per task)

{by_group_table(results, 'category=')}

## Controllers

{ctrl or '(none)'}

{curves}

{'## Inefficiency patterns (seed 003), trajectories per arm' + chr(10) + chr(10) + pat if pat else ''}

![accuracy vs calls](accuracy_vs_calls.png) ![accuracy vs PTE](accuracy_vs_pte.png)

Wall time {results['wall_s']} s; cache {results['cache']}.
"""
    (out_dir / "report.md").write_text(text)
    return files
