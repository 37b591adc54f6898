"""Report writing for the evaluator and the factorized comparison: markdown tables and matplotlib figures
(shared helpers), and the evaluator's own ``report.md`` and plots from ``results.json``'s structure."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import matplotlib

matplotlib.use("Agg")   # reports are files: never open a window, also on a machine without a display
import matplotlib.pyplot as plt  # noqa: E402

COLUMNS = [("accuracy", "acc", "{:.3f}"), ("tool_calls_per_task", "calls/task", "{:.2f}"),
           ("tool_call_rate", "call rate", "{:.2f}"), ("tokens_per_task", "tokens", "{:.0f}"),
           ("token_cost_per_task", "token_cost", "{:.0f}"), ("pte_per_task", "PTE", "{:.0f}"),
           ("latency_s_per_task", "latency s", "{:.2f}"), ("format_error_rate", "fmt err", "{:.3f}")]


# ---------------------------------------------------------------------------- shared by every report
def fmt(v, spec: str) -> str:
    return "–" if v is None else spec.format(v)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def metric_cells(m: dict, columns: Sequence[tuple[str, str, str]]) -> list[str]:
    """One table row's cells for ``columns`` = [(metric key, header, format spec)]."""
    return [fmt(m.get(k), f) for k, _, f in columns]


def metric_rows(named: Iterable[tuple[Sequence, dict]], columns: Sequence[tuple[str, str, str]]) -> list[list]:
    """Raw values for W&B tables: ``named`` yields (leading label cells, metrics dict)."""
    return [[*labels, *(m.get(k) for k, _, _ in columns)] for labels, m in named]


@contextmanager
def figure(path: Path, **subplots) -> Iterator[tuple]:
    """``with figure(out / "x.png", ncols=2) as (fig, axes):`` draws, then lays out, saves at 120 dpi, closes."""
    fig, axes = plt.subplots(**subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------- the evaluator's report
def with_interval(value, ci, spec: str) -> str:
    """``0.630 [0.500, 0.759]``: a value and its interval in one format (the value alone when there is none)."""
    if value is None:
        return "–"
    return spec.format(value) + ("" if not ci else f" [{spec.format(ci[0])}, {spec.format(ci[1])}]")


# The evaluator's headline numbers, stated with their intervals: (metric, header, format).
HEADLINE = [("accuracy", "acc [CI]", "{:.3f}"), ("tool_calls_per_task", "calls/task [CI]", "{:.2f}"),
            ("pte_per_task", "PTE [CI]", "{:,.0f}")]
# Deltas against the reference: (key, header, format), with their paired intervals.
DELTAS = [("d_acc", "ΔAcc pts [paired CI]", "{:+.1f}"), ("d_tc", "ΔTC [CI]", "{:+.2f}"),
          ("d_pte", "ΔPTE [CI]", "{:+,.0f}")]


def headline_table(results: dict) -> str:
    """One row per arm: accuracy, calls and PTE per task with their bootstrap intervals, and the paired deltas
    against the reference arm with theirs (results.json's ``ci`` entries; runs before intervals had none)."""
    header = ["arm", *(h for _, h, _ in HEADLINE), *(h for _, h, _ in DELTAS), "ΔAcc/−ΔTC"]
    rows = []
    for name, m in results["arms"].items():
        d = results["deltas"][name]
        ci, dci = m.get("ci") or {}, d.get("ci") or {}
        rows.append([name, *(with_interval(m["all"].get(k), ci.get(k), f) for k, _, f in HEADLINE),
                     *(with_interval(d.get(k), dci.get(k), f) for k, _, f in DELTAS),
                     fmt(d["d_acc_per_saved_call"], "{:+.1f}")])
    return markdown_table(header, rows)


def arms_table(results: dict) -> str:
    header = ["arm", *(c[1] for c in COLUMNS), "ΔAcc (pts)", "ΔTC", "ΔAcc/−ΔTC"]
    rows = []
    for name, m in results["arms"].items():
        d = results["deltas"][name]
        rows.append([name, *metric_cells(m["all"], COLUMNS), f"{d['d_acc']:+.1f}", f"{d['d_tc']:+.2f}",
                     fmt(d["d_acc_per_saved_call"], "{:+.1f}")])
    return markdown_table(header, rows)


def by_group_table(results: dict, prefix: str) -> str:
    """Accuracy / calls per task of each arm in each group; the accuracy's bootstrap interval over the group's tasks
    where the results have one."""
    groups = sorted({g for m in results["arms"].values() for g in m if g.startswith(prefix)})

    def cell(m: dict) -> str:
        ci = (m.get("ci") or {}).get("accuracy")
        acc = f"{m['accuracy']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        return f"{acc} / {m['tool_calls_per_task']:.2f}"

    rows = [[name, *(cell(m[g]) if g in m else "–" for g in groups)] for name, m in results["arms"].items()]
    return markdown_table(["arm", *(f"{g.split('=')[1]} acc [CI] / calls" for g in groups)], rows)


def patterns_table(results: dict) -> str | None:
    rows = [(n, m["patterns"]) for n, m in results["arms"].items() if m.get("patterns")]
    if not rows:
        return None
    keys = [k for k in rows[0][1] if k != "n"]
    return markdown_table(["arm", *keys], [[n, *(p.get(k, 0) for k in keys)] for n, p in rows])


def accuracy_plot(results: dict, x_key: str, x_label: str, path: Path) -> Path:
    """Accuracy against a cost per task: one marker per arm, one line per τ-swept controller family. Every series
    gets its own colour (tab20: a grid of modes × constrained calls, controllers and policies is 15-20 series,
    past the default cycle's 10) and the legend sits outside the axes, so no point hides behind it."""
    swept = {name for c in results["curves"].values() for name in c["arms"]}
    # one iterator for both: matplotlib keeps separate colour cycles for scatter and plot, so set_prop_cycle
    # would give the τ-sweep lines the same colours as the first arms
    colours = iter(plt.get_cmap("tab20").colors * 4)
    with figure(path, figsize=(8.5, 4.8)) as (fig, ax):
        for name, m in results["arms"].items():
            if name not in swept:
                marker = "D" if name.endswith("+cc") else "s" if "@" not in name else "o"
                ax.scatter(m["all"][x_key], m["all"]["accuracy"], label=name, marker=marker, color=next(colours))
        for family, c in results["curves"].items():
            pts = sorted((results["arms"][n]["all"][x_key], results["arms"][n]["all"]["accuracy"]) for n in c["arms"])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", label=f"{family} (τ sweep)", color=next(colours))
        ax.set_xlabel(x_label)
        ax.set_ylabel("accuracy")
        ax.set_title(f"{results['tasks']} {results['split']} tasks · {results['policy'].split('@')[0]}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return path


def plots(results: dict, out_dir: Path) -> list[Path]:
    return [accuracy_plot(results, "tool_calls_per_task", "tool calls per task", out_dir / "accuracy_vs_calls.png"),
            accuracy_plot(results, "pte_per_task", "PTE per task (tokens)", out_dir / "accuracy_vs_pte.png")]


def _auroc(controller: dict) -> str:
    value, ci = controller.get("test_auroc"), controller.get("test_auroc_ci")
    return "–" if value is None else with_interval(value, ci, "{:.3f}") + (" (bootstrap CI of the fit)" if ci else "")


def write_report(results: dict, out_dir: Path) -> list[Path]:
    files = plots(results, out_dir)
    ctrl = "\n".join(f"- {k}: `{v['checkpoint']}` (τ {v['tau']:.3f}, T {v['temperature']:.2f}, test AUROC on its "
                     f"decision points {_auroc(v)})" for k, v in results["controllers"].items())
    curves = "\n".join(f"- {f}: area under accuracy vs calls {c['area'] if c['area'] is None else round(c['area'], 4)}"
                       f" ({len(c['arms'])} τ values)" for f, c in results["curves"].items())
    pat = patterns_table(results)
    b = results.get("bootstrap")
    boot = (f"{int(round(100 * b['level']))}% {b['method']} bootstrap intervals over tasks ({b['replicates']} "
            f"resamples, seed {b['seed']}); the deltas' intervals are paired (an arm and `{results['reference']}` "
            "resampled on the same tasks)." if b else "")
    text = f"""# toolwise evaluation

{results['tasks']} {results['split']} tasks of `{results['task_source'].get('source')}`, policy
`{results['policy']}` on `{results['backend']}`, decoding {results['decoding']}. PTE with γ = {results['gamma']:.5f}
(hardware `{results['hardware']}`, {results['pte']}). Deltas against `{results['reference']}`.

## Headline figures

{headline_table(results)}

{boot}

## Arms

{arms_table(results)}

## Per difficulty (accuracy / calls per task)

{by_group_table(results, 'difficulty=')}

## Per category (accuracy / calls per task)

{by_group_table(results, 'category=')}

## Controllers

{ctrl or '(none)'}

{curves}

{'## Inefficiency patterns (arXiv 2604.05404), trajectories per arm' + chr(10) + chr(10) + pat if pat else ''}

![accuracy vs calls](accuracy_vs_calls.png) ![accuracy vs PTE](accuracy_vs_pte.png)

Wall time {results['wall_s']} s; cache {results['cache']}.
"""
    (out_dir / "report.md").write_text(text)
    return files
