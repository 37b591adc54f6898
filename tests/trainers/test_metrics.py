"""trainers.controller.metrics: binary metrics of a split, per group, and the printed table."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from trainers.controller.metrics import binary_metrics, fmt, grouped_metrics, metrics_table

PROBS = [0.92, 0.23, 0.64, 0.45, 0.81, 0.12]
LABELS = [1, 0, 0, 1, 1, 0]


def test_binary_metrics_on_a_hand_made_example():
    m = binary_metrics(PROBS, LABELS, tau=0.5)
    assert m["n"] == 6 and m["positives"] == 0.5
    # positive pairs ranked above negatives: 0.92 > 3, 0.45 > 2, 0.81 > 3 -> 8 of 9
    assert m["auroc"] == pytest.approx(8 / 9) and m["auroc"] == pytest.approx(roc_auc_score(LABELS, PROBS))
    # act = p >= 0.5 -> [1, 0, 1, 0, 1, 0]; wrong at 0.64 (acts on a negative) and 0.45 (misses a positive)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["action_rate"] == pytest.approx(3 / 6)
    assert m["missed"] == pytest.approx(1 / 6)
    p, y = np.array(PROBS), np.array(LABELS)
    assert m["brier"] == pytest.approx(np.mean((p - y) ** 2))
    assert m["ece"] == pytest.approx(np.mean(np.abs(p - y)), abs=1e-6)   # one point per bin of width 0.1


def test_threshold_is_inclusive_and_moves_the_decisions():
    m = binary_metrics(PROBS, LABELS, tau=0.45)            # p >= τ: 0.45 now acts
    assert m["action_rate"] == pytest.approx(4 / 6) and m["missed"] == 0.0 and m["accuracy"] == pytest.approx(5 / 6)
    assert binary_metrics(PROBS, LABELS, tau=1.01)["missed"] == pytest.approx(3 / 6)


def test_auroc_is_none_with_a_single_class_and_empty_is_just_n():
    m = binary_metrics([0.2, 0.7, 0.9], [1, 1, 1], tau=0.5)
    assert m["auroc"] is None and m["n"] == 3 and m["positives"] == 1.0 and m["missed"] == pytest.approx(1 / 3)
    assert binary_metrics([0.2, 0.7], [0, 0], 0.5)["auroc"] is None
    assert binary_metrics([], [], 0.5) == {"n": 0}


def grouped():
    rng = np.random.default_rng(0)
    cats = ["A", "B", "C", "A", "A", "B", "C", "C", "C", "A"]
    diffs = ["easy", "hard", "easy", "easy", "medium", "hard", "hard", "easy", "medium", "easy"]
    probs, labels = rng.random(10), np.array([1, 0, 1, 0, 1, 1, 0, 0, 1, 0])
    return probs, labels, cats, diffs, grouped_metrics(probs, labels, 0.5, {"category": cats, "difficulty": diffs})


def test_grouped_metrics_keys_and_group_sizes():
    probs, labels, cats, diffs, g = grouped()
    assert set(g) == {"all", "category", "difficulty", "category×difficulty"}
    assert g["all"] == binary_metrics(probs, labels, 0.5)
    assert {k: v["n"] for k, v in g["category"].items()} == {"A": 4, "B": 2, "C": 4}
    assert {k: v["n"] for k, v in g["difficulty"].items()} == {"easy": 5, "hard": 3, "medium": 2}
    assert {k: v["n"] for k, v in g["category×difficulty"].items()} == {
        "A/easy": 3, "A/medium": 1, "B/hard": 2, "C/easy": 2, "C/hard": 1, "C/medium": 1}
    a = [i for i, c in enumerate(cats) if c == "A"]
    assert g["category"]["A"] == binary_metrics(probs[a], labels[a], 0.5)
    # a group without the pair of columns has no cross table
    only = grouped_metrics(probs, labels, 0.5, {"category": cats})
    assert set(only) == {"all", "category"}


def test_metrics_table_has_a_row_per_group():
    *_, g = grouped()
    table = metrics_table(g, "test split")
    lines = table.splitlines()
    assert lines[0] == "test split" and lines[1].split()[:3] == ["group", "n", "positives"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"all", "cate=A", "cate=B", "cate=C", "diff=easy", "diff=hard", "diff=medium"}
    assert rows["all"][1] == "10" and rows["cate=B"][1] == "2" and rows["diff=medium"][1] == "2"
    assert rows["cate=B"][3] == fmt(g["category"]["B"]["auroc"]) and rows["all"][4] == fmt(g["all"]["accuracy"])
    single = metrics_table({"all": binary_metrics([0.3, 0.8], [1, 1], 0.5)}, "t")
    assert single.splitlines()[2].split()[3] == "-"      # auroc None prints as a dash
