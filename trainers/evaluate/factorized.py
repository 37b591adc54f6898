"""``python -m trainers.evaluate.factorized``: the tool-use-tax paper's (arXiv 2605.00136) Factorized Intervention Framework on GSM8K.

Why can tool use lose to native chain-of-thought on math word problems with semantic distractors? Every
condition below is an evaluator arm (:class:`trainers.evaluate.run.Arm`, run by :func:`trainers.evaluate.run.run_arm`
with the shared trajectory cache) on the same tasks, once per distractor setting, and each differs from its
neighbour in one named intervention:

==================  ==========================================================================================
``cot``             native CoT: a math-solver prompt with no tool wording, no tool schemas (prompt mode ``cot``)
``format_only``     the tool protocol's prompts, but no schemas rendered and calls rejected (``tool_access=hidden``)
``noop_tool``       + the calculator schema; calls run the whole protocol but return a no-op payload (``noop``)
``full_tool``       + real execution: the normal agent
``oracle_calc``     full tool, the problem's gold calculator results appended to the instruction
``oracle_evidence`` full tool on the distractor-free problem
``one_round``       full tool with at most one executed call (``max_tool_calls=1``)
==================  ==========================================================================================

The CoT-vs-tool gap splits exactly (on the same tasks, so the identity holds in every bootstrap replicate):

    acc(cot) − acc(full_tool) = formatting_cost + protocol_overhead − execution_gain
    formatting_cost   = acc(cot) − acc(format_only)        the tool prompt's wording alone
    protocol_overhead = acc(format_only) − acc(noop_tool)  the tool-calling round itself: the "tool-use tax"
    execution_gain    = acc(full_tool) − acc(noop_tool)    what the computed results buy

plus ``execution_headroom`` (oracle_calc − full_tool), ``distractor_cost_under_tools`` (oracle_evidence −
full_tool) and ``one_round_effect`` (one_round − full_tool). Each comes with a 95% paired bootstrap CI over
tasks (all conditions resampled with the same task indices); pooled over distractor settings the resampling
unit is the GSM8K problem, whose distractor variants move together. Free text is allowed everywhere
(``agent.reasoning_check: false``), so the conditions differ only in their intervention.

Outputs in the run directory: ``results.json``, ``report.md``, ``factorized.png``, and W&B (offline
without a key).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from data_builders.agent import prompts as P
from data_builders.agent.trajectory import Trajectory
from data_builders.tasks import load_tasks
from data_builders.tasks.gsm8k import instruction_for
from recipes import CONFIG_DIR
import trainers.evaluate.config  # noqa: F401 - its schemas, stored before Hydra composes
from trainers.evaluate.report import figure, markdown_table, metric_cells, metric_rows
from trainers.evaluate.run import Arm, PolicyRun, arm_metrics, run_arm, save_results
from trainers.tracking import log_report, report_job

NONE = "none"          # the label of the distractor-free setting
POOLED = "pooled"


# ---------------------------------------------------------------------------- task views
def oracle_calc_view(task):
    """The instruction with the problem's gold calculator results appended (GSM8K's ``<<expr=value>>``)."""
    calcs = _expected(task, "calculations")
    if not calcs:
        return task
    results = "; ".join(f"{c['expression']} = {c['value']}" for c in calcs)
    return replace(task, instruction=f"{task.instruction}\n\nCalculation results you may use: {results}.")


def oracle_evidence_view(task):
    """The distractor-free problem, phrased exactly as the gsm8k source phrases instructions."""
    return replace(task, instruction=instruction_for(_expected(task, "evidence")))


def _expected(task, key: str):
    if key not in task.expected:
        raise ValueError(f"task {task.id!r} has no expected[{key!r}]: the oracle views need tasks from the gsm8k "
                         "source (data_builders/tasks/gsm8k.py)")
    return task.expected[key]


TASK_VIEWS: dict[str, Callable] = {"oracle_calc": oracle_calc_view, "oracle_evidence": oracle_evidence_view}


def apply_view(view: str | None, tasks: Sequence) -> list:
    """``tasks`` through the named view (same ids and order; the cache key's instruction hash differs)."""
    if view is None:
        return list(tasks)
    if view not in TASK_VIEWS:
        raise ValueError(f"unknown task view {view!r}; known: {sorted(TASK_VIEWS)}")
    return [TASK_VIEWS[view](t) for t in tasks]


# ---------------------------------------------------------------------------- conditions
@dataclass(frozen=True)
class Condition:
    mode: str | None = None                 # None: the run's tool_mode
    agent: dict = field(default_factory=dict)
    task_view: str | None = None
    description: str = ""


CONDITIONS: dict[str, Condition] = {
    "cot": Condition(mode="cot", description="native CoT, no tool wording or schemas"),
    "format_only": Condition(agent={"tool_access": "hidden"}, description="tool prompt, no schemas, calls rejected"),
    "noop_tool": Condition(agent={"tool_access": "noop"}, description="calculator schema, calls return a no-op"),
    "full_tool": Condition(description="the normal agent, real calculator"),
    "oracle_calc": Condition(task_view="oracle_calc", description="full tool + gold calculator results given"),
    "oracle_evidence": Condition(task_view="oracle_evidence", description="full tool on the distractor-free problem"),
    "one_round": Condition(agent={"max_tool_calls": 1}, description="full tool, at most one executed call"),
}

# name -> (weights over condition accuracies, what it means)
CONTRASTS: dict[str, tuple[dict[str, int], str]] = {
    "cot_minus_tool": ({"cot": 1, "full_tool": -1}, "acc(cot) − acc(full_tool)"),
    "formatting_cost": ({"cot": 1, "format_only": -1}, "acc(cot) − acc(format_only)"),
    "protocol_overhead": ({"format_only": 1, "noop_tool": -1}, "acc(format_only) − acc(noop_tool): tool-use tax"),
    "execution_gain": ({"full_tool": 1, "noop_tool": -1}, "acc(full_tool) − acc(noop_tool)"),
    "execution_headroom": ({"oracle_calc": 1, "full_tool": -1}, "acc(oracle_calc) − acc(full_tool)"),
    "distractor_cost_under_tools": ({"oracle_evidence": 1, "full_tool": -1}, "acc(oracle_evidence) − acc(full_tool)"),
    "one_round_effect": ({"one_round": 1, "full_tool": -1}, "acc(one_round) − acc(full_tool)"),
}
DECOMPOSITION = ("formatting_cost", "protocol_overhead", "execution_gain")
CORE = ("cot", "format_only", "noop_tool", "full_tool")


def make_arm(name: str, tool_mode: str = "force") -> Arm:
    if name not in CONDITIONS:
        raise ValueError(f"unknown condition {name!r}; known: {list(CONDITIONS)}")
    c = CONDITIONS[name]
    mode = c.mode or tool_mode
    return Arm(name, "factorized", {"name": f"factorized_{name}", "condition": name, "mode": mode, "reasoning": False},
               mode=mode, agent=dict(c.agent), task_view=c.task_view)


# ---------------------------------------------------------------------------- statistics
def bootstrap_accuracies(correct: dict[str, np.ndarray], clusters: Sequence | None = None, replicates: int = 2000,
                         seed: int = 0) -> dict[str, np.ndarray]:
    """Per condition, ``replicates`` bootstrap accuracies, every condition resampled with the same units.

    ``clusters``: one id per task; the units resampled are the distinct ids (a task and its distractor
    variants move together). None: every task is its own unit."""
    n = len(next(iter(correct.values())))
    if any(len(v) != n for v in correct.values()):
        raise ValueError("every condition needs one outcome per task, in the same task order")
    inv = np.arange(n) if clusters is None else np.unique(np.asarray(clusters, dtype=str), return_inverse=True)[1]
    k = int(inv.max()) + 1 if n else 0
    sizes = np.bincount(inv, minlength=k)
    sums = {c: np.bincount(inv, weights=np.asarray(v, dtype=float), minlength=k) for c, v in correct.items()}
    idx = np.random.default_rng(seed).integers(0, k, size=(replicates, k))
    denom = sizes[idx].sum(axis=1)
    return {c: s[idx].sum(axis=1) / denom for c, s in sums.items()}


def contrasts(correct: dict[str, np.ndarray], clusters: Sequence | None = None, replicates: int = 2000, seed: int = 0,
              level: float = 0.95, reps: dict[str, np.ndarray] | None = None) -> dict[str, dict]:
    """Every contrast whose conditions are present: point value, difference in correct tasks (an integer, so the
    decomposition identity holds exactly) and the percentile bootstrap CI. ``reps``: bootstrap accuracies
    already drawn with these arguments (:func:`bootstrap_accuracies`), reused instead of drawn again."""
    present = {name: (w, text) for name, (w, text) in CONTRASTS.items() if set(w) <= set(correct)}
    if not present or not len(next(iter(correct.values()))):
        return {}
    n = len(next(iter(correct.values())))
    counts = {c: int(np.sum(v)) for c, v in correct.items()}
    if reps is None:
        reps = bootstrap_accuracies({c: correct[c] for c in {c for w, _ in present.values() for c in w}},
                                    clusters, replicates, seed)
    q = 100 * (1 - level) / 2
    out = {}
    for name, (w, text) in present.items():
        diff = sum(k * counts[c] for c, k in w.items())
        boot = sum(k * reps[c] for c, k in w.items())
        lo, hi = np.percentile(boot, [q, 100 - q])
        out[name] = {"value": diff / n, "diff_correct": diff, "tasks": n, "ci": [float(lo), float(hi)],
                     "level": level, "definition": text}
    return out


def identity_check(con: dict[str, dict]) -> dict | None:
    """acc(cot) − acc(full_tool) against formatting_cost + protocol_overhead − execution_gain, in correct tasks."""
    if not {"cot_minus_tool", *DECOMPOSITION} <= set(con):
        return None
    total = con["cot_minus_tool"]["diff_correct"]
    parts = (con["formatting_cost"]["diff_correct"] + con["protocol_overhead"]["diff_correct"]
             - con["execution_gain"]["diff_correct"])
    return {"cot_minus_tool": total, "sum_of_components": parts, "holds": total == parts}


def condition_metrics(trajs: list[Trajectory], gamma: float, pte_cfg) -> dict:
    m = arm_metrics(trajs, gamma, pte_cfg)
    n = max(len(trajs), 1)
    m["rejected_calls_per_task"] = sum(t.rejected_calls for t in trajs) / n
    m["format_errors_per_task"] = sum(t.format_errors for t in trajs) / n
    m["noop_calls_per_task"] = sum(sum(c.status == "noop" for c in t.calls) for t in trajs) / n
    return m


def summarize_setting(by_cond: dict[str, list[Trajectory]], gamma: float, pte_cfg, boot: dict,
                      clusters: Sequence | None = None) -> dict:
    """Per-condition metrics and every contrast (with CIs) for one setting's trajectories."""
    ids = None
    for name, trajs in by_cond.items():
        these = [t.task_id for t in trajs]
        if ids is not None and these != ids:
            raise ValueError(f"condition {name!r} ran other tasks (or another order) than the first condition")
        ids = these
    correct = {name: np.array([bool(t.correct) for t in trajs]) for name, trajs in by_cond.items()}
    # one resample for the conditions' CIs and the contrasts' (each condition's draw depends only on the units)
    reps = bootstrap_accuracies(correct, clusters, boot.get("replicates", 2000), boot.get("seed", 0)) \
        if ids else {}
    con = contrasts(correct, clusters, boot.get("replicates", 2000), boot.get("seed", 0), boot.get("level", 0.95),
                    reps=reps or None)
    q = 100 * (1 - boot.get("level", 0.95)) / 2
    metrics = {}
    for name, trajs in by_cond.items():
        metrics[name] = condition_metrics(trajs, gamma, pte_cfg)
        if name in reps:
            metrics[name]["accuracy_ci"] = [float(x) for x in np.percentile(reps[name], [q, 100 - q])]
    return {"tasks": len(ids or []), "conditions": metrics, "contrasts": con, "identity": identity_check(con)}


def base_id(task_id, distractor: str | None) -> str:
    """The GSM8K problem a (possibly distracted) task id names: ``gsm8k-12-hedged`` -> ``gsm8k-12``."""
    s = str(task_id)
    return s[: -len(distractor) - 1] if distractor and s.endswith(f"-{distractor}") else s


# ---------------------------------------------------------------------------- tasks
def _distractor(value) -> str | None:
    return None if value is None or str(value).lower() in ("none", "null", "") else str(value)


def load_setting(cfg: DictConfig, distractor: str | None) -> list:
    """The run's gsm8k tasks with one distractor setting (``limit`` tasks of ``split``)."""
    options = OmegaConf.to_container(cfg.tasks, resolve=True)
    source = options.pop("source")
    if source != "gsm8k":
        raise ValueError(f"trainers.evaluate.factorized runs on the gsm8k task source (tasks=gsm8k), not {source!r}")
    path = options.get("path")
    if not path:
        raise ValueError("no GSM8K file: pass tasks.path=<file.jsonl>, e.g. GSM8K's train.jsonl")
    if not Path(path).expanduser().is_file():
        raise FileNotFoundError(f"tasks.path={path!r}: no such file (expected a GSM8K .jsonl file, e.g. "
                                "GSM8K's train.jsonl from github.com/openai/grade-school-math)")
    options["distractor"] = distractor
    return load_tasks(source, split=cfg.split, limit=cfg.get("limit"), **options)


# ---------------------------------------------------------------------------- run
def run(cfg: DictConfig) -> dict:
    conditions = list(CONDITIONS) if cfg.conditions is None else list(cfg.conditions)
    for name in conditions:
        if name not in CONDITIONS:
            raise ValueError(f"unknown condition {name!r} in conditions; known: {list(CONDITIONS)}")
    if P.canonical_mode(cfg.tool_mode) not in P.MODES:
        raise ValueError(f"tool_mode={cfg.tool_mode!r}: the tool conditions need a tool prompt mode, one of {P.MODES}")
    distractors = [_distractor(d) for d in cfg.distractors]
    labels = [d or NONE for d in distractors]
    settings_tasks = {label: load_setting(cfg, d) for label, d in zip(labels, distractors)}   # fail before the model
    arms = [make_arm(name, cfg.tool_mode) for name in conditions]

    out_dir = Path(cfg.out_dir)
    ctx = PolicyRun.from_config(cfg)
    backend, agent_kw, pte_cfg, gamma, cache = ctx.backend, ctx.agent_kw, ctx.pte_cfg, ctx.gamma, ctx.cache
    boot = OmegaConf.to_container(cfg.bootstrap, resolve=True)

    start = time.perf_counter()
    by_setting: dict[str, dict[str, list[dict]]] = {}
    timing: dict[str, dict] = {}
    for label, d in zip(labels, distractors):
        tasks = settings_tasks[label]
        by_setting[label] = {}
        for arm in arms:
            trajs, seconds, computed = run_arm(arm, backend, apply_view(arm.task_view, tasks), cache, agent_kw)
            by_setting[label][arm.name] = trajs
            timing[f"{label}/{arm.name}"] = {"seconds": round(seconds, 2), "computed": computed,
                                             "cached": len(tasks) - computed}
            print(f"{label:<16} {arm.name:<16} {computed:>4} computed {len(tasks) - computed:>4} cached "
                  f"{seconds:7.1f} s")
    wall = time.perf_counter() - start

    settings = {label: summarize_setting(by_setting[label], gamma, pte_cfg, boot) for label in labels}
    if len(labels) > 1:
        pooled = {name: [t for label in labels for t in by_setting[label][name]] for name in conditions}
        clusters = [base_id(t.task_id, d) for label, d in zip(labels, distractors)
                    for t in by_setting[label][conditions[0]]] if conditions else None
        settings[POOLED] = summarize_setting(pooled, gamma, pte_cfg, boot, clusters)
    results = {"conditions": {n: CONDITIONS[n].description for n in conditions}, "distractors": labels,
               "tool_mode": cfg.tool_mode, "limit": cfg.get("limit"), **ctx.provenance(cfg), "bootstrap": boot,
               "settings": settings, "timing": timing, "wall_s": round(wall, 2), "cache": ctx.cache_stats()}
    files = save_results(results, out_dir, write_report)
    _log_wandb(cfg, results, files)
    print(decomposition_table(results))
    print(f"results: {out_dir / 'results.json'}  report: {out_dir / 'report.md'}")
    print(f"conditions={len(conditions)} settings={len(labels)} computed={cache.misses} cached={cache.hits} "
          f"wall_s={wall:.1f}")
    return results


# ---------------------------------------------------------------------------- report
COLUMNS = [("accuracy", "acc", "{:.3f}"), ("tool_calls_per_task", "calls/task", "{:.2f}"),
           ("rejected_calls_per_task", "rejected/task", "{:.2f}"), ("format_errors_per_task", "fmt err/task", "{:.2f}"),
           ("format_error_rate", "fmt err rate", "{:.3f}"), ("tokens_per_task", "tokens", "{:.0f}"),
           ("pte_per_task", "PTE", "{:.0f}")]


def _signed(c: dict | None) -> str:
    if c is None:
        return "–"
    return f"{c['value']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]"


def conditions_table(setting: dict) -> str:
    rows = []
    for name, m in setting["conditions"].items():
        ci = m.get("accuracy_ci")
        rows.append([name, *metric_cells(m, COLUMNS), "–" if ci is None else f"[{ci[0]:.3f}, {ci[1]:.3f}]"])
    return markdown_table(["condition", *(c[1] for c in COLUMNS), "acc 95% CI"], rows)


def decomposition_table(results: dict) -> str:
    names = ["cot_minus_tool", *DECOMPOSITION]
    rows = []
    for label, s in results["settings"].items():
        ident = s.get("identity")
        rows.append([label, s["tasks"], *(_signed(s["contrasts"].get(n)) for n in names),
                     "–" if ident is None else ("holds" if ident["holds"] else "BROKEN")])
    return markdown_table(["setting", "tasks", *names, "identity"], rows)


def other_contrasts_table(results: dict) -> str:
    names = ["execution_headroom", "distractor_cost_under_tools", "one_round_effect"]
    return markdown_table(["setting", *names], [[label, *(_signed(s["contrasts"].get(n)) for n in names)]
                                                for label, s in results["settings"].items()])


def _bars(ax, labels: list[str], series: dict[str, tuple[list[float], list[list[float]]]]) -> None:
    """Grouped bars with error bars: ``series`` maps a name to (values per label, [lower errors, upper errors])."""
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for i, (name, (vals, err)) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, yerr=err, capsize=2,
               error_kw={"elinewidth": 0.8}, label=name)
    ax.set_xticks(x, labels, rotation=20, fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")


def plot(results: dict, out_dir: Path) -> Path:
    labels = list(results["settings"])
    settings = [results["settings"][lb] for lb in labels]
    core = [c for c in CORE if all(c in s["conditions"] for s in settings)]
    accuracy = {}
    for name in core:
        acc = [s["conditions"][name]["accuracy"] for s in settings]
        ci = [s["conditions"][name].get("accuracy_ci") or [a, a] for s, a in zip(settings, acc)]
        accuracy[name] = (acc, np.array([[a - c[0] for a, c in zip(acc, ci)],
                                         [c[1] - a for a, c in zip(acc, ci)]]).clip(min=0))
    gaps = {}
    for name in ["cot_minus_tool", *DECOMPOSITION]:
        cs = [s["contrasts"].get(name) for s in settings]
        vals = [c["value"] if c else np.nan for c in cs]
        gaps[name] = (vals, [[max(v - c["ci"][0], 0) if c else 0 for v, c in zip(vals, cs)],
                             [max(c["ci"][1] - v, 0) if c else 0 for v, c in zip(vals, cs)]])
    path = out_dir / "factorized.png"
    with figure(path, ncols=2, figsize=(12, 4.5)) as (fig, (ax1, ax2)):
        _bars(ax1, labels, accuracy)
        ax1.set_ylabel("accuracy")
        ax1.set_ylim(0, 1.05)
        ax1.set_title("cot → format_only → noop_tool → full_tool (95% CI)", fontsize=9)
        _bars(ax2, labels, gaps)
        ax2.axhline(0, color="black", lw=0.8)
        ax2.set_ylabel("accuracy difference")
        ax2.set_title("gap = formatting_cost + protocol_overhead − execution_gain", fontsize=9)
        fig.suptitle(f"{results['policy'].split('@')[0]} · gsm8k {results['split']} · tool mode "
                     f"{results['tool_mode']}", fontsize=9)
    return path


def write_report(results: dict, out_dir: Path) -> list[Path]:
    png = plot(results, out_dir)
    cond = "\n".join(f"- `{n}`: {d}" for n, d in results["conditions"].items())
    defs = "\n".join(f"- `{n}` = {text}" for n, (_, text) in CONTRASTS.items())
    per_setting = "\n\n".join(f"### {label} ({s['tasks']} tasks)\n\n{conditions_table(s)}"
                              for label, s in results["settings"].items())
    b = results["bootstrap"]
    text = f"""# Factorized intervention framework (the tool-use-tax paper, arXiv 2605.00136)

GSM8K `{results['split']}` problems per distractor setting ({', '.join(results['distractors'])}), policy
`{results['policy']}` on `{results['backend']}`, tool mode `{results['tool_mode']}`, decoding {results['decoding']}.
PTE with γ = {results['gamma']:.5f} (hardware `{results['hardware']}`).

Conditions:

{cond}

## Decomposition: acc(cot) − acc(full_tool) = formatting_cost + protocol_overhead − execution_gain

Differences of accuracy with {int(100 * b.get('level', 0.95))}% paired bootstrap CIs ({b.get('replicates')} replicates,
seed {b.get('seed')}; pooled: problems resampled with all their distractor variants). "identity" checks the
equation on counts of correct tasks.

{decomposition_table(results)}

## Other contrasts

{other_contrasts_table(results)}

Definitions:

{defs}

## Conditions per setting

{per_setting}

![factorized](factorized.png)

Wall time {results['wall_s']} s; cache {results['cache']}.
"""
    (out_dir / "report.md").write_text(text)
    return [png]


def _log_wandb(cfg: DictConfig, results: dict, files: list[Path]) -> None:
    cols = ["setting", "condition"] + [c[0] for c in COLUMNS]
    rows = metric_rows((((label, name), m) for label, s in results["settings"].items()
                        for name, m in s["conditions"].items()), COLUMNS)
    con = [[label, name, c["value"], c["ci"][0], c["ci"][1]]
           for label, s in results["settings"].items() for name, c in s["contrasts"].items()]
    log_report(cfg, "factorized", {"conditions": (cols, rows),
                                   "contrasts": (["setting", "contrast", "value", "ci_low", "ci_high"], con)}, files)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="factorized")
def main(cfg: DictConfig) -> None:
    report_job(cfg, run)


if __name__ == "__main__":
    main()
