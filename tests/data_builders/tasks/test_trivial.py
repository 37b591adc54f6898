"""The trivial tier (data_builders/tasks/generators/trivial.py): exact golds the environments' tools reach, disjoint
splits, templates kept by the recorded measurement and its rule, and the ``tier`` option of the builtin source."""
from __future__ import annotations

import pytest

from data_builders.oracle.core import run_oracle
from data_builders.tasks import load_tasks
from data_builders.tasks.builtin import generate_builtin, generate_trivial
from data_builders.tasks.generators import GENERATORS, trivial
from data_builders.tasks.schema import ENV_CATEGORY

ALL = list(trivial.CANDIDATES)


@pytest.mark.parametrize("name", ALL)
def test_splits_are_disjoint_and_hold_the_measured_draw(name):
    train, test = trivial.split_pool(name, "train"), trivial.split_pool(name, "test")
    assert not {d[0] for d in train} & {d[0] for d in test}
    assert len({d[0] for d in trivial.CANDIDATES[name].pool()}) == len(train) + len(test)   # no repeated question
    # the measurement drew 16 train tasks per template: without repeats only if the share holds 16
    assert len(train) >= trivial.MEASURED[name][1]


@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_solves_every_candidate_through_the_environment_tools(split):
    """The gold is exact and the task's own tools reach it: a tool-using arm can answer every trivial task."""
    tasks = generate_trivial(split, n_per_template=16, templates=ALL)
    wrong = [(t.id, t.answer, r.answer, r.error) for t in tasks for r in [run_oracle(t)] if not r.correct]
    assert wrong == []


def test_tasks_keep_the_when2tool_schema_of_their_environment():
    for t in generate_trivial("test", n_per_template=3, templates=ALL):
        name = t.tags[1]
        tpl = trivial.CANDIDATES[name]
        assert t.id.startswith(f"builtin/trivial/{name}/test/") and t.split == "test"
        assert t.difficulty == "easy" and not t.multi_step and t.tags == ("trivial", name, "single_round")
        assert t.env.name == tpl.env and t.category == ENV_CATEGORY[tpl.env]
        assert t.env.tools == GENERATORS[tpl.env].tools("easy")   # the tool list that environment's tasks carry


def test_kept_templates_follow_the_recorded_measurement_and_rule():
    assert set(trivial.MEASURED) == set(trivial.CANDIDATES)
    assert trivial.KEPT == trivial.kept() and trivial.KEPT
    lo, hi = trivial.KEEP_RANGE
    for name, (right, asked) in trivial.MEASURED.items():
        assert (name in trivial.KEPT) == (lo <= right / asked <= hi)
    # "often but not always": an always-right template is dropped, so the label varies inside every kept one
    assert trivial.kept({"add_1d": (16, 16), "sub_1d": (15, 16), "mul_1d": (3, 10), "add_2d": (2, 10)}) == \
        ("sub_1d", "mul_1d")


def test_tier_option_of_the_builtin_source():
    standard = generate_builtin("test", n_per_cell=1)
    tiny = generate_builtin("test", n_per_cell=1, tier="trivial", n_per_template=5)
    both = generate_builtin("test", n_per_cell=1, tier="both", n_per_template=5)
    assert [t.id for t in both] == [t.id for t in standard] + [t.id for t in tiny]
    assert {t.tags[1] for t in tiny} == set(trivial.KEPT) and len(tiny) == 5 * len(trivial.KEPT)
    assert generate_builtin("test", n_per_cell=1) == standard                              # default unchanged
    # deterministic, and a smaller draw is a prefix of a larger one
    more = generate_trivial("test", n_per_template=9)
    assert [t.instruction for t in more if t.tags[1] == trivial.KEPT[0]][:5] == \
        [t.instruction for t in tiny if t.tags[1] == trivial.KEPT[0]]
    assert generate_trivial("test", n_per_template=9) == more
    # filters apply to the tier too; the tier is single-hop
    env = trivial.CANDIDATES[trivial.KEPT[0]].env
    assert {t.env.name for t in generate_builtin("test", tier="trivial", envs=[env], n_per_template=2)} == {env}
    with pytest.raises(ValueError, match="selected no task"):
        load_tasks("builtin", split="test", tier="trivial", hops="multi")


def test_a_larger_train_split_keeps_the_test_split_and_repeats_no_question():
    mix = {"tier": "both", "n_per_cell": 1, "n_per_template": 18}
    grown = {**mix, "train_n_per_cell": 2, "train_n_per_template": 1000}
    assert load_tasks("builtin", split="test", **grown) == load_tasks("builtin", split="test", **mix)
    before = {t.id: t.instruction for t in load_tasks("builtin", split="train", **mix)}
    after = load_tasks("builtin", split="train", **grown)
    assert {t.id: t.instruction for t in after if t.id in before} == before      # the old train tasks stay
    for name in trivial.KEPT:         # every instance of each template's train share, once
        mine = [t.instruction for t in after if "trivial" in t.tags and t.tags[1] == name]
        assert sorted(mine) == sorted(d[0] for d in trivial.split_pool(name, "train"))
    standard = [t for t in after if "trivial" not in t.tags]
    assert len(standard) == 2 * len([t for t in load_tasks("builtin", split="train", **mix) if "trivial" not in t.tags])
    with pytest.raises(ValueError, match="builtin task source only"):
        load_tasks("gsm8k", path="x.jsonl", train_n_per_template=5)


def test_each_task_owns_its_environment_parameters():
    a, b = generate_trivial("test", n_per_template=2, templates=["capital"])
    assert a.env.parameters["corpus"] is not b.env.parameters["corpus"]
    a.env.parameters["corpus"].clear()
    assert generate_trivial("test", n_per_template=2, templates=["capital"])[0].env.parameters["corpus"]


def test_bad_requests_fail_clearly(monkeypatch):
    with pytest.raises(ValueError, match="tier must be one of"):
        generate_builtin("test", tier="easy")
    with pytest.raises(ValueError, match="no trivial template"):
        generate_trivial("test", templates=["add_3d"])
    with pytest.raises(ValueError, match="builtin task source only"):
        load_tasks("gsm8k", path="x.jsonl", tier="trivial")
    monkeypatch.setattr(trivial, "KEPT", ())
    with pytest.raises(ValueError, match="keeps no template yet"):
        generate_trivial("test")
