"""Cross-validated AUROC of the Probe&Prefill probe and its two baselines on one probe dataset (measure only).

    flock /tmp/torch.lock python benchmarks/probe_cv.py outputs/points/w2t_v2/probe [--folds 5] [--repeats 3] \
        [recipe.train.l2=100 ...]      # fit overrides, as on the trainers.fit command line

Why: a policy that answers little unaided leaves a handful of "no tool needed" points, so the test split's AUROC
moves in big steps (6 negatives: one AUROC standard error is about 0.1). This pools train+val+test and refits, in
each of ``--repeats`` × ``--folds`` stratified folds, exactly what ``python -m trainers.fit recipe=probe_prefill``
fits — the all-layer probe with the recipe's training (trainers/controller/training.py), each single layer the
same way, and the bag-of-words logistic regression (trainers/controller/baselines.py) — and prints the mean and
standard deviation of the folds' AUROCs. The best single layer is the one with the best *cross-validated* AUROC,
chosen on the same folds: an optimistic figure for that baseline, so "the probe beats it" is the cautious claim.
(``PYTHONPATH=.`` when the installed toolwise is another checkout.) Ends with ``probe_cv_auroc=… best_layer_cv_auroc=… bow_cv_auroc=… negatives=… points=…``.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
from sklearn.model_selection import StratifiedKFold

import recipes
from data_builders.gates import gate_named
from data_builders.points.store import load_points
from trainers.controller.baselines import _auroc, bag_of_words
from trainers.controller.training import new_controller, raw_logits, train


def fold_aurocs(cfg, points, x, y, train_idx, test_idx, layers):
    recipe = cfg.recipe
    x_tr, y_tr, x_te, y_te = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
    out = {}
    for name, use in [("probe", None)] + [(f"layer {k}", [k]) for k in layers]:
        c = new_controller(recipe, points, x_tr, **({} if use is None else {"layers": use}))
        train(c, recipe.train, (x_tr, y_tr), None, cfg.trainer, progress=False)
        out[name] = _auroc(y_te.numpy(), raw_logits(c, x_te).numpy())
    parts = {"train": (x_tr, y_tr, points.select(train_idx)), "test": (x_te, y_te, points.select(test_idx))}
    out["bow"] = bag_of_words(points, parts, None, recipe.baselines.get("bow_C", 1.0))["test"]["auroc"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("points_dir")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("overrides", nargs="*", help="fit config overrides (e.g. recipe.train.l2=100)")
    args = ap.parse_args()
    probe = gate_named("probe_prefill")
    cfg = recipes.compose("fit", [f"recipe={probe.name}", f"recipe.points.dir={args.points_dir}", "logger=none",
                                  *args.overrides])
    points = load_points(args.points_dir, kind=probe.kind, featurizer=probe.featurizer.id)
    x, y = probe.featurizer.controller_input(points.features), points.labels
    negatives = int((y == 0).sum())
    if negatives < args.folds or int(y.sum()) < args.folds:
        raise SystemExit(f"{args.points_dir}: {negatives} negatives and {int(y.sum())} positives; "
                         f"--folds {args.folds} needs at least that many of each")
    layers = list(range(x.shape[1]))
    scores: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        folds = StratifiedKFold(args.folds, shuffle=True, random_state=rep)
        for tr, te in folds.split(np.zeros(len(y)), y.numpy().astype(int)):
            for name, v in fold_aurocs(cfg, points, x, y, tr, te, layers).items():
                if v is not None:
                    scores.setdefault(name, []).append(v)

    def stat(name):
        v = scores[name]
        return statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0.0

    best = max((n for n in scores if n.startswith("layer ")), key=lambda n: stat(n)[0])
    for name in ("probe", best, "bow"):
        m, s = stat(name)
        label = {"probe": "all-layer probe", "bow": "bag of words"}.get(name, f"best single layer ({name})")
        print(f"{label:<34} cv auroc {m:.3f} ± {s:.3f} over {len(scores[name])} folds")
    print(f"probe_cv_auroc={stat('probe')[0]:.3f} best_layer_cv_auroc={stat(best)[0]:.3f} "
          f"bow_cv_auroc={stat('bow')[0]:.3f} negatives={negatives} points={len(y)}")


if __name__ == "__main__":
    main()
