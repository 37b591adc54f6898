"""Lightning controller training vs scikit-learn ``LogisticRegression`` on the same features, side by side.

    python benchmarks/controller_training.py --points outputs/points/w2t_pc2/probe [--l2 0.1] [--repeats 3]

Both arms fit the same objective on the train split: standardised features, class-balanced logistic loss,
an L2 penalty on the weights (scikit-learn ``C = 1 / (l2 · N)``), L-BFGS to convergence. The Lightning arm is
exactly what ``recipe=probe_prefill`` runs (``trainers.controller.training.train`` on a ``LinearProbe``, or the
ToolGate gate for a flip dataset); the reference is ``StandardScaler`` + ``LogisticRegression``. Prints the
wall time of each (best of --repeats, arms alternating) and AUROC on test (and train). Targets:
Lightning time ≤ 2× scikit-learn, test AUROC within 0.005.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from omegaconf import OmegaConf
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from data_builders.gates import gate_named, gates
from data_builders.points.store import load_points
from recipes import compose
from trainers.controller.training import new_controller, raw_logits, split_tensors, train

LOGISTIC = ("probe_prefill", "toolgate")     # the gates whose controller is a logistic regression


def auroc(y, s) -> float | None:
    y = np.asarray(y, int)
    return float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", required=True, help="a probe or flip decision-point dataset directory")
    ap.add_argument("--l2", type=float, default=None, help="default: the recipe's recipe.train.l2")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    points = load_points(args.points)
    kind = points.manifest["kind"]
    by_kind = {g.kind: g for g in gates().values()}
    if kind not in by_kind or by_kind[kind].name not in LOGISTIC:
        raise SystemExit(f"{args.points}: a {kind!r} dataset; this benchmark compares the logistic controllers "
                         f"(kinds {sorted(gate_named(g).kind for g in LOGISTIC)}) with scikit-learn's "
                         "LogisticRegression")
    cfg = compose("fit", [f"recipe={by_kind[kind].name}"])
    recipe = cfg.recipe
    OmegaConf.set_struct(recipe, False)
    if args.l2 is not None:
        recipe.train.l2 = args.l2
    splits = split_tensors(points, kind)
    (x_tr, y_tr, _), (x_te, y_te, _) = splits["train"], splits["test"]
    n = len(y_tr)
    flat = lambda x: x.reshape(len(x), -1).numpy()   # noqa: E731
    xs_tr, xs_te = flat(x_tr), flat(x_te)
    print(f"{args.points}: kind={kind} train={n} (positives {int(y_tr.sum())}) test={len(y_te)} "
          f"(positives {int(y_te.sum())}) features={xs_tr.shape[1]} l2={recipe.train.l2}")

    times = {"lightning": [], "sklearn": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        c = new_controller(recipe, points, x_tr)
        train(c, recipe.train, (x_tr, y_tr), None, cfg.trainer, progress=False)   # trainer=default: 1 CPU
        times["lightning"].append(time.perf_counter() - start)

        start = time.perf_counter()
        sk = make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / (recipe.train.l2 * n), class_weight="balanced",
                                                                max_iter=1000, tol=1e-6))
        sk.fit(xs_tr, y_tr.numpy().astype(int))
        times["sklearn"].append(time.perf_counter() - start)

    lt, st = min(times["lightning"]), min(times["sklearn"])
    rows = {"lightning": (lt, auroc(y_te, raw_logits(c, x_te).numpy()), auroc(y_tr, raw_logits(c, x_tr).numpy())),
            "sklearn": (st, auroc(y_te, sk.decision_function(xs_te)), auroc(y_tr, sk.decision_function(xs_tr)))}
    print(f"{'arm':<11}{'fit s':>9}{'test AUROC':>12}{'train AUROC':>13}")
    for arm, (t, a_te, a_tr) in rows.items():
        print(f"{arm:<11}{t:>9.3f}{a_te if a_te is None else round(a_te, 4):>12}{a_tr if a_tr is None else round(a_tr, 4):>13}")
    d = None if rows["lightning"][1] is None else abs(rows["lightning"][1] - rows["sklearn"][1])
    # AUROC moves in steps of 1/(positives x negatives); the probabilities themselves say how close the optima are
    p_l = 1 / (1 + np.exp(-raw_logits(c, x_te).numpy()))
    p_s = sk.predict_proba(xs_te)[:, 1]
    print(f"test probabilities: max |p_lightning - p_sklearn| = {np.abs(p_l - p_s).max():.4f}, "
          f"decisions at 0.5 agree on {np.mean((p_l >= 0.5) == (p_s >= 0.5)):.1%}")
    print(f"time_ratio={lt / st:.2f} (target <= 2) test_auroc_diff={d if d is None else round(d, 4)} (target <= 0.005)")


if __name__ == "__main__":
    main()
