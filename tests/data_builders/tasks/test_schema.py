"""Task contract: bad records get an error naming source file, record and field."""
from __future__ import annotations

import copy

import pytest

from data_builders.tasks import interleave, load_tasks
from data_builders.tasks.schema import Task, TaskFormatError

GOOD = {"id": 11001, "difficulty": "easy", "multi_step": False, "instruction": "Answer with only the number: 20+20",
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"], "parameters": {}}],
        "expected": {"answer": "40"}, "tags": ["calculator", "single_round"]}


def test_good_record_round_trips_and_gets_category():
    t = Task.from_dict(GOOD, source="tasks.json", split="train")
    assert t.category == "A" and t.split == "train" and t.expected_steps == 1 and t.answer == "40"
    assert Task.from_dict(t.to_dict()) == t


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r.pop("instruction"), "instruction"),
    (lambda r: r.update(instruction="  "), "instruction"),
    (lambda r: r.update(difficulty="brutal"), "difficulty"),
    (lambda r: r.update(environments=[]), "environments"),
    (lambda r: r["environments"][0].update(tools="evaluate_expression"), "environments[0].tools"),
    (lambda r: r["environments"][0].pop("name"), "environments[0].name"),
    (lambda r: r["environments"][0].update(parameters=[1]), "environments[0].parameters"),
    (lambda r: r.update(expected={}), "expected.answer"),
    (lambda r: r.update(multi_step="no"), "multi_step"),
    (lambda r: r.update(id=True), "id"),
])
def test_bad_record_names_file_record_and_field(mutate, field):
    rec = copy.deepcopy(GOOD)
    mutate(rec)
    with pytest.raises(TaskFormatError) as e:
        Task.from_dict(rec, source="tasks_v1_test.json", index=7, split="test")
    msg = str(e.value)
    assert msg.startswith("tasks_v1_test.json: record ") and f"field '{field}'" in msg
    assert e.value.field_name == field


def test_missing_split_is_an_error_unless_the_source_gives_it():
    with pytest.raises(TaskFormatError, match="'split'"):
        Task.from_dict(GOOD, source="x.json")


def test_interleave_prefix_covers_every_category_first():
    tasks = load_tasks("builtin", split="test", n_per_cell=4)
    assert [t.category for t in tasks[:3]] == ["A", "B", "C"]
    cells = {(t.env.name, t.difficulty) for t in tasks}
    assert {(t.env.name, t.difficulty) for t in tasks[:len(cells)]} == cells
    assert sorted(t.id for t in interleave(tasks)) == sorted(t.id for t in tasks)
    assert len(load_tasks("builtin", split="test", limit=5)) == 5
    with pytest.raises(ValueError, match="unknown task source"):
        load_tasks("nope")


def test_stratified_sample_takes_k_per_cell_deterministically():
    a = load_tasks("builtin", split="test", n_per_cell=6, per_cell=2, sample_seed=3)
    b = load_tasks("builtin", split="test", n_per_cell=6, per_cell=2, sample_seed=3)
    c = load_tasks("builtin", split="test", n_per_cell=6, per_cell=2, sample_seed=4)
    full = load_tasks("builtin", split="test", n_per_cell=6)
    from collections import Counter
    assert a == b and a != c
    cells = Counter((t.env.name, t.difficulty) for t in a)
    assert set(cells.values()) == {2} and len(cells) == len({(t.env.name, t.difficulty) for t in full})
    assert set(t.id for t in a) <= set(t.id for t in full)
