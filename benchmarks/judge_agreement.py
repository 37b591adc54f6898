"""How often an LLM judge agrees with When2Tool's exact scoring on the same answers.

    PYTHONPATH=. python benchmarks/judge_agreement.py --trajectories outputs/rollout/<run> \\
        --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct [--json agreement.json]

(``PYTHONPATH=.`` where the installed toolwise is another checkout, as for the other benchmarks.)

``--trajectories``: trajectory JSONL files, or folders: a rollout's output folder (its ``trajectories.jsonl``), or
one above it holding exactly one ``trajectories.jsonl`` (several are refused: name the run). The judge is
:class:`~data_builders.tasks.judge.Judge`, the one the ``judge`` scorer uses, behind any OpenAI-compatible endpoint
(vLLM, ``python -m runtime.serve``, a hosted API), with its rubric (``--rubric FILE``, default the judge's own) and
its verdict cache (``--cache-dir``; a rerun over the same answers makes no request).

Per trajectory with a gold answer and a final response:

* exact verdict (``--exact when2tool``, default): ``is_correct(final_response, gold)``, When2Tool's rule. It is the
  rule the agent loop scored built-in tasks with (a task without a scorer is scored ``is_correct(final_response,
  gold)``), re-applied rather than read, so that a file written before a change of the scorer is measured against
  today's rule; the stored verdicts that differ are counted. ``--exact stored`` takes the stored ``correct``
  instead (the task's own scorer, for ``tasks=custom`` runs).
* judge verdict: the judge on (the task's instruction, the final response stripped, the gold), as the ``judge``
  scorer asks it, so the two share cached verdicts. The instruction is the first user message without the
  response policy this toolwise appends to it (``prompts.user_prompt``); a message that does not end with that
  policy (another prompt version) is sent whole, and counted.

An episode that never answered is left out (both scorers call it wrong without reading it, which would only
inflate the agreement), and so is one without gold; both are counted. A judge that gives no verdict
(:class:`~data_builders.tasks.judge.JudgeError`: down, refusing, unreadable) stops the run naming the trajectory:
a missing verdict is never counted as "incorrect".

Prints n, the agreement rate and Cohen's kappa (``scorers.agreement``) with percentile bootstrap intervals over
trajectories (``trainers/intervals.py``; ``--replicates``, ``--seed``, ``--level``), the 2x2 table judge x exact,
agreement per category, the disagreements (``--show`` of them, with the judge's reason), the judge and how many
verdicts came from its cache; ends with a key=value line. ``--json OUT`` writes the same numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_builders.agent.prompts import user_prompt
from data_builders.agent.trajectory import Trajectory, TrajectoryError, read_trajectories
from data_builders.tasks.judge import DEFAULT_API_KEY_ENV, DEFAULT_CACHE_DIR, DEFAULT_RUBRIC, Judge, JudgeError
from data_builders.tasks.scorers import agreement
from data_builders.tasks.scoring import extract_boxed, is_correct
from trainers.intervals import BootstrapSpec, kappa_interval, mean_interval

TRAJECTORY_FILE = "trajectories.jsonl"   # what a rollout writes into its output folder (data_builders/rollout.py)


@dataclass
class Item:
    path: Path
    index: int            # 1-based position of the trajectory in its file
    traj: Trajectory
    instruction: str
    whole_prompt: bool    # the instruction is the whole first user message (its policy suffix not recognised)
    exact: bool
    judge: bool | None = None
    reason: str = ""
    cached: bool = False

    def where(self) -> str:
        t = self.traj
        return f"{self.path}, trajectory {self.index} (task {t.task_id!r}, {t.env}, {t.difficulty})"


def trajectory_files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            if (p / TRAJECTORY_FILE).is_file():
                files.append(p / TRAJECTORY_FILE)
                continue
            found = sorted(p.rglob(TRAJECTORY_FILE))
            if not found:
                raise SystemExit(f"{p}: no {TRAJECTORY_FILE} in it or below it (a rollout writes one into its "
                                 "output folder)")
            if len(found) > 1:
                # several runs would count the same tasks several times, and mix policies
                shown = "\n  ".join(str(f.parent) for f in found[:20])
                raise SystemExit(f"{p}: {len(found)} rollout runs below it; name one (or several on purpose):\n  "
                                 f"{shown}")
            files.append(found[0])
        else:
            raise SystemExit(f"{p}: not found")
    return files


def instruction_of(t: Trajectory) -> tuple[str, bool]:
    """The task's instruction and whether it is the whole first user message (see the module docstring)."""
    first = next((m["content"] for m in t.messages if m.get("role") == "user"), "")
    try:
        suffix = user_prompt("", t.mode, t.reasoning)   # the prompt is f"{instruction}{suffix}"
    except ValueError:   # a mode this toolwise does not know
        return first, True
    if suffix and first.endswith(suffix):
        return first[:-len(suffix)], False
    return first, True


def load(files: list[Path], exact: str) -> tuple[list[Item], dict]:
    items: list[Item] = []
    counts = {"read": 0, "no_gold": 0, "no_answer": 0, "stored_differs": 0}
    for path in files:
        for i, t in enumerate(read_trajectories(path), 1):
            counts["read"] += 1
            if not t.gold.strip():
                counts["no_gold"] += 1
                continue
            if not t.final_response.strip():
                counts["no_answer"] += 1
                continue
            rule = is_correct(t.final_response, t.gold)
            counts["stored_differs"] += rule != t.correct
            instruction, whole = instruction_of(t)
            items.append(Item(path, i, t, instruction, whole, rule if exact == "when2tool" else t.correct))
    return items, counts


def ask(judge: Judge, items: list[Item], workers: int) -> None:
    """Fills each item's judge verdict; the first JudgeError, in trajectory order, stops the run naming it."""
    def one(item: Item):
        return judge.judge(item.instruction, item.traj.final_response.strip(), item.traj.gold)

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        futures = [pool.submit(one, item) for item in items]
        for item, future in zip(items, futures):
            try:
                verdict = future.result()
            except JudgeError as e:
                raise SystemExit(f"judge failed on {item.where()}: {e}\nno agreement computed: a trajectory "
                                 "without a verdict is never counted as incorrect") from None
            item.judge, item.reason, item.cached = verdict.correct, verdict.reason, verdict.cached
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _pair(ci) -> list[float] | None:
    return None if ci is None else [round(ci[0], 4), round(ci[1], 4)]


def summarize(items: list[Item], spec: BootstrapSpec) -> dict:
    judge = np.array([it.judge for it in items], bool)
    exact = np.array([it.exact for it in items], bool)
    overall = agreement(list(zip(judge.tolist(), exact.tolist())))
    kappa_ci, undefined = kappa_interval(judge, exact, spec)
    confusion = {f"judge_{'correct' if j else 'wrong'}_exact_{'correct' if e else 'wrong'}":
                 int(np.sum((judge == j) & (exact == e))) for j in (True, False) for e in (True, False)}
    cells: dict[str, list[Item]] = defaultdict(list)
    for it in items:
        cells[it.traj.category].append(it)
    per_category = {}
    for cat in sorted(cells):
        group = cells[cat]
        a = agreement([(it.judge, it.exact) for it in group])
        per_category[cat] = {**a, "judge_only": sum(it.judge and not it.exact for it in group),
                             "exact_only": sum(it.exact and not it.judge for it in group)}
    return {**overall, "rate_ci": _pair(mean_interval((judge == exact).astype(float), spec)),
            "cohen_kappa_ci": _pair(kappa_ci), "kappa_resamples_undefined": undefined,
            "judge_accuracy": float(judge.mean()), "exact_accuracy": float(exact.mean()),
            "confusion": confusion, "per_category": per_category}


def _num(x, spec: str = "{:.3f}") -> str:
    return "undefined" if x is None else spec.format(x)


def _ci(ci) -> str:
    return "" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectories", nargs="+", type=Path, required=True,
                    help="trajectory JSONL files or rollout output folders")
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the judge's /v1 URL (%(default)s)")
    ap.add_argument("--model", required=True, help="the judge model's name on that endpoint")
    ap.add_argument("--rubric", type=Path, help="a file holding the rubric (a str.format template over "
                                                 "{instruction}, {answer}, {gold}); default: the judge's own")
    ap.add_argument("--api-key-env", default=DEFAULT_API_KEY_ENV, help="variable holding the key (%(default)s)")
    ap.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help="verdict cache (%(default)s)")
    ap.add_argument("--no-cache", action="store_true", help="ask the judge about every answer")
    ap.add_argument("--timeout-s", type=float, default=60)
    ap.add_argument("--max-retries", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4, help="requests in flight at once (%(default)s)")
    ap.add_argument("--exact", choices=("when2tool", "stored"), default="when2tool",
                    help="the exact verdict: When2Tool's rule re-applied, or the trajectory's stored one")
    ap.add_argument("--replicates", type=int, default=2000, help="bootstrap resamples (%(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--show", type=int, default=10, help="disagreements listed (%(default)s)")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")

    spec = BootstrapSpec(level=args.level, replicates=args.replicates, seed=args.seed)
    rubric = DEFAULT_RUBRIC if args.rubric is None else args.rubric.read_text(encoding="utf-8")
    judge = Judge(args.base_url, args.model, rubric, api_key_env=args.api_key_env,
                  cache_dir=None if args.no_cache else args.cache_dir, timeout_s=args.timeout_s,
                  max_retries=args.max_retries)
    files = trajectory_files(args.trajectories)
    try:
        items, counts = load(files, args.exact)
    except (TrajectoryError, ValueError, UnicodeDecodeError) as e:   # the reader names file, line, task, field
        raise SystemExit(f"unreadable trajectories: {e}") from None
    for f in files:
        print(f"trajectories: {f}")
    print(f"judge: model {judge.model} at {judge.base_url}, rubric "
          f"{'default' if args.rubric is None else args.rubric}, cache "
          f"{'off' if judge.cache_dir is None else judge.cache_dir}")
    print(f"read {counts['read']}; left out: {counts['no_gold']} without gold, {counts['no_answer']} that never "
          f"answered; exact verdict: "
          + ("When2Tool's rule re-applied" if args.exact == "when2tool" else "the stored one")
          + f" (differs from the stored verdict on {counts['stored_differs']})")
    if not items:
        print("no trajectory with a gold answer and a final response: nothing to compare", file=sys.stderr)
        return 1
    whole = sum(it.whole_prompt for it in items)
    if whole:
        print(f"{whole} instructions sent as the whole first user message (its response policy is not this "
              "toolwise's)")

    ask(judge, items, args.workers)
    cached = sum(it.cached for it in items)
    s = summarize(items, spec)
    c = s["confusion"]
    print(f"judge verdicts: {len(items)}, {cached} from the cache, {len(items) - cached} asked")
    print(f"n={s['n']} agree={s['agree']}")
    print(f"agreement rate  {_num(s['rate'])}{_ci(s['rate_ci'])}")
    print(f"Cohen's kappa   {_num(s['cohen_kappa'])}{_ci(s['cohen_kappa_ci'])}"
          + (f"  ({s['kappa_resamples_undefined']} of {spec.replicates} resamples undefined, left out)"
             if s["kappa_resamples_undefined"] else ""))
    print(f"({int(100 * spec.level)}% percentile bootstrap over trajectories, {spec.replicates} resamples, "
          f"seed {spec.seed})")
    print(f"accuracy: judge {s['judge_accuracy']:.3f}, exact {s['exact_accuracy']:.3f}")
    print()
    print(f"{'':16}{'exact correct':>15}{'exact wrong':>13}")
    print(f"{'judge correct':<16}{c['judge_correct_exact_correct']:>15}{c['judge_correct_exact_wrong']:>13}")
    print(f"{'judge wrong':<16}{c['judge_wrong_exact_correct']:>15}{c['judge_wrong_exact_wrong']:>13}")
    print()
    print(f"{'category':<12}{'n':>6}{'rate':>8}{'kappa':>10}{'judge only':>12}{'exact only':>12}")
    for cat, a in s["per_category"].items():
        print(f"{cat:<12}{a['n']:>6}{_num(a['rate']):>8}{_num(a['cohen_kappa']):>10}{a['judge_only']:>12}"
              f"{a['exact_only']:>12}")
    differ = [it for it in items if it.judge != it.exact]
    if differ and args.show > 0:
        print()
        print(f"disagreements ({min(len(differ), args.show)} of {len(differ)}):")
        for it in differ[:args.show]:
            t = it.traj
            print(f"  task {t.task_id!r} {t.env} judge={it.judge} exact={it.exact} "
                  f"boxed={extract_boxed(t.final_response)!r} gold={t.gold!r}: {it.reason}")
    print()
    print(f"n={s['n']} rate={_num(s['rate'], '{:.4f}')} kappa={_num(s['cohen_kappa'], '{:.4f}')} "
          f"cached={cached} model={judge.model}")

    if args.json:
        out = {"trajectories": [str(f) for f in files],
               "judge": {"model": judge.model, "base_url": judge.base_url,
                         "rubric": None if args.rubric is None else str(args.rubric),
                         "cache_dir": None if judge.cache_dir is None else str(judge.cache_dir)},
               "exact": args.exact, **counts, "whole_prompt_instructions": whole,
               "cached": cached, "asked": len(items) - cached,
               "bootstrap": {**spec.as_dict(), "unit": "trajectory"}, **s,
               "disagreements": [{"file": str(it.path), "index": it.index, "task_id": it.traj.task_id,
                                  "category": it.traj.category, "env": it.traj.env, "judge": it.judge,
                                  "exact": it.exact, "reason": it.reason} for it in differ]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
