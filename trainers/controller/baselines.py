"""The probe's two baselines, in the same table as the all-layer probe (issue: what do hidden states add?).

* ``single_layer``: the same LinearProbe and training on one layer; the layer is chosen by validation AUROC
  (never by test), and its test AUROC is reported.
* ``bag_of_words``: scikit-learn logistic regression on word 1-2-gram counts of the task instruction — what
  the text alone predicts, with no model states.
"""
from __future__ import annotations

import numpy as np
from omegaconf import DictConfig, OmegaConf
from sklearn.feature_extraction.text import CountVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline

from data_builders.tasks import load_tasks

from trainers.controller.training import new_controller, raw_logits, train


def _auroc(y, p):
    y = np.asarray(y, int)
    return float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else None


def single_layer(recipe, points, splits, trainer_cfg: DictConfig) -> dict:
    (x_tr, y_tr, _), (x_va, y_va, _), (x_te, y_te, _) = (splits[s] for s in ("train", "val", "test"))
    n_layers = x_tr.shape[1]
    val = {}
    for layer in range(n_layers):
        c = new_controller(recipe, points, x_tr, layers=[layer])
        train(c, recipe.train, (x_tr, y_tr), None, trainer_cfg, progress=False)
        val[layer] = _auroc(y_va.numpy(), raw_logits(c, x_va).numpy()) if len(y_va) else None
    scored = {k: v for k, v in val.items() if v is not None}
    best = max(scored, key=scored.get) if scored else n_layers - 1
    c = new_controller(recipe, points, x_tr, layers=[best])
    train(c, recipe.train, (x_tr, y_tr), None, trainer_cfg, progress=False)
    # without a val AUROC (no val points, or one class there) nothing was chosen: the last layer is a default
    how = "chosen on val" if scored else ("the last layer: no val points to choose on" if not len(y_va)
                                         else "the last layer: val has one class, no AUROC to choose on")
    return {"test": {"auroc": _auroc(y_te.numpy(), raw_logits(c, x_te).numpy())}, "layer": best,
            "val_auroc_by_layer": val, "detail": f"layer {best} of {n_layers}, {how}"}


def bag_of_words(points, splits, build: DictConfig, C: float) -> dict:
    # The instructions of the tasks the dataset was built on: its manifest's task source, whole splits (the
    # manifest has no limit). A points.dir dataset may come from other tasks or another limit than this run.
    source = dict(points.manifest.get("task_source") or OmegaConf.to_container(build.tasks, resolve=True))
    name = source.pop("source")
    text = {}
    for split in ("train", "test"):
        text |= {str(t.id): t.instruction for t in load_tasks(name, split=split, **source)}
    docs = {s: [text[i] for i in splits[s][2].points["task_id"]] for s in ("train", "test")}
    model = make_pipeline(CountVectorizer(ngram_range=(1, 2), min_df=1),
                          LogisticRegression(C=C, class_weight="balanced", max_iter=2000))
    model.fit(docs["train"], splits["train"][1].numpy().astype(int))
    p = model.predict_proba(docs["test"])[:, 1] if docs["test"] else np.zeros(0)
    return {"test": {"auroc": _auroc(splits["test"][1].numpy(), p)}, "detail": f"word 1-2-grams, C={C}"}


def probe_baselines(recipe: DictConfig, cfg: DictConfig, points, splits, build: DictConfig) -> dict:
    b = recipe.baselines
    out = {}
    if b.get("single_layer"):
        out["best single-layer probe"] = single_layer(recipe, points, splits, cfg.trainer)
    if b.get("bag_of_words"):
        out["bag-of-words logistic regression"] = bag_of_words(points, splits, build, b.get("bow_C", 1.0))
    return out
