"""The when2tool task source: directory files, hub rows, and errors that name file, record and field."""
from __future__ import annotations

import json
from collections import Counter

import pytest

from data_builders.tasks import load_tasks
from data_builders.tasks import when2tool as w2t
from data_builders.tasks.schema import TaskFormatError
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"

CALC = {"id": 11001, "difficulty": "easy", "multi_step": False, "instruction": "Answer with only the number: 2+3",
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression", "get_last_result",
                                                               "clear_last_result"], "parameters": {}}],
        "expected": {"answer": "5"}, "tags": ["calculator", "single_round"]}
MULTI = {"id": 161001, "difficulty": "easy", "multi_step": True,
         "instruction": "Three-step computation: First compute x = 1+2. Then compute y = x*5. Finally compute z = y-5. "
                        "Return only z.",
         "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"], "parameters": {}}],
         "expected": {"answer": "10", "steps": ["3", "15", "10"]}, "tags": ["calculator", "multihop_3step"]}


def _write_dir(tmp_path, single=(CALC,), multi=(MULTI,), split="train"):
    (tmp_path / f"tasks_v1_{split}.json").write_text(json.dumps(list(single)))
    (tmp_path / f"tasks_v1_multihop_{split}.json").write_text(json.dumps(list(multi)))
    return tmp_path


def test_directory_source_reads_both_files_and_sets_split_and_category(tmp_path):
    _write_dir(tmp_path)
    tasks = load_tasks("when2tool", split="train", path=str(tmp_path))
    assert [t.id for t in tasks] == [11001, 161001]
    assert {t.split for t in tasks} == {"train"}
    assert [t.category for t in tasks] == ["A", "M"]  # multi-hop is its own group
    assert tasks[1].expected_steps == 3
    assert [t.id for t in load_tasks("when2tool", split="train", path=str(tmp_path), hops="single")] == [11001]


def test_missing_file_and_directory_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_tasks("when2tool", split="train", path=str(tmp_path / "nope"))
    (tmp_path / "tasks_v1_test.json").write_text("[]")
    with pytest.raises(FileNotFoundError, match="tasks_v1_multihop_test.json"):
        load_tasks("when2tool", split="test", path=str(tmp_path))


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.pop("instruction"), "instruction"),
    (lambda r: r["expected"].pop("answer"), "expected.answer"),
    (lambda r: r.update(difficulty="extreme"), "difficulty"),
    (lambda r: r["environments"][0].update(tools="evaluate_expression"), "environments[0].tools"),
])
def test_malformed_record_error_names_file_record_and_field(tmp_path, mutate, field):
    bad = json.loads(json.dumps(CALC))
    bad["id"] = 11002
    mutate(bad)
    _write_dir(tmp_path, single=(CALC, bad))
    with pytest.raises(TaskFormatError) as err:
        load_tasks("when2tool", split="train", path=str(tmp_path))
    msg = str(err.value)
    assert "tasks_v1_train.json" in msg and "record 11002" in msg and f"'{field}'" in msg


def test_invalid_json_and_wrong_top_level_are_named(tmp_path):
    _write_dir(tmp_path)
    (tmp_path / "tasks_v1_train.json").write_text("[{")
    with pytest.raises(TaskFormatError, match="tasks_v1_train.json.*not valid JSON"):
        load_tasks("when2tool", split="train", path=str(tmp_path))
    (tmp_path / "tasks_v1_train.json").write_text('{"id": 1}')
    with pytest.raises(TaskFormatError, match="expected a JSON array"):
        load_tasks("when2tool", split="train", path=str(tmp_path))


def _flat(rec: dict) -> dict:
    """A hub row: env fields flattened, JSON strings for tools/parameters/steps."""
    env = rec["environments"][0]
    return {"id": rec["id"], "difficulty": rec["difficulty"], "multi_step": rec["multi_step"],
            "instruction": rec["instruction"], "env_name": env["name"], "tools": json.dumps(env["tools"]),
            "parameters": json.dumps(env["parameters"]), "answer": rec["expected"]["answer"],
            "steps": json.dumps(rec["expected"].get("steps", [])), "tags": rec["tags"]}


def test_hub_rows_rebuild_the_same_tasks_as_the_files(tmp_path, monkeypatch):
    calls = []

    def fake_load_dataset(hub_id, config, split, revision=None):
        calls.append((hub_id, config, split))
        return [_flat(CALC)] if config == "single_hop" else [_flat(MULTI)]

    import datasets
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    from_hub = load_tasks("when2tool", split="train")
    from_dir = load_tasks("when2tool", split="train", path=str(_write_dir(tmp_path)))
    assert from_hub == from_dir
    assert calls == [("cesun/When2Tool", "single_hop", "train"), ("cesun/When2Tool", "multi_hop", "train")]


def test_hub_row_with_broken_json_names_the_field():
    row = _flat(CALC) | {"parameters": "{not json"}
    with pytest.raises(TaskFormatError, match="record 11001: field 'parameters'"):
        w2t.tasks_from_rows([row], source="hub", split="test")


def test_hub_failure_says_how_to_work_offline(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="tasks.path"):
        load_tasks("when2tool", split="test")


@pytest.mark.parametrize("split, single, multi", [("train", 900, 180), ("test", 2250, 450)])
def test_shared_files_load_completely(split, single, multi):
    if not DATA.is_dir():
        pytest.skip(f"When2Tool data not available at {DATA}")
    tasks = load_tasks("when2tool", split=split, path=str(DATA))
    assert len(tasks) == single + multi
    per_cell = Counter((t.env.name, t.difficulty, t.multi_step) for t in tasks)
    assert len(per_cell) == 18 * 3 and set(per_cell.values()) == {20 if split == "train" else 50}
    assert Counter(t.category for t in tasks) == {"A": single // 3, "B": single // 3, "C": single // 3, "M": multi}
    # Round trip through the hub's flat row schema is lossless.
    raw = json.loads((DATA / f"tasks_v1_{split}.json").read_text())[:40]
    assert w2t.tasks_from_rows([_flat(r) for r in raw], source="rows", split=split) == tasks_by_id(tasks, raw)


def tasks_by_id(tasks, raw):
    index = {t.id: t for t in tasks}
    return [index[r["id"]] for r in raw]


def test_unknown_environment_is_refused_at_load_naming_file_record_and_field(tmp_path):
    # accepted before, it failed only when its episode started, after earlier episodes had run
    typo = json.loads(json.dumps(CALC)) | {"id": 11002}
    typo["environments"][0]["name"] = "CalculaterEnv"
    _write_dir(tmp_path, single=(CALC, typo))
    with pytest.raises(TaskFormatError) as err:
        load_tasks("when2tool", split="train", path=str(tmp_path))
    e = err.value
    assert (e.source, e.record, e.field_name) == (str(tmp_path / "tasks_v1_train.json"), 11002, "environments[0].name")
    assert "'CalculaterEnv'" in e.problem and "CalculatorEnv" in e.problem and "HashEnv" in e.problem


def test_unknown_tool_is_refused_at_load_naming_file_record_and_field(tmp_path):
    # accepted before, the episode's environment refused it mid-rollout, naming neither file nor record
    rogue = json.loads(json.dumps(CALC)) | {"id": 11002}
    rogue["environments"][0]["tools"] = ["evaluate_expression", "launch_missiles"]
    _write_dir(tmp_path, single=(CALC, rogue))
    with pytest.raises(TaskFormatError) as err:
        load_tasks("when2tool", split="train", path=str(tmp_path))
    e = err.value
    assert (e.source, e.record, e.field_name) == (str(tmp_path / "tasks_v1_train.json"), 11002, "environments[0].tools")
    assert "'launch_missiles'" in e.problem and "CalculatorEnv" in e.problem and "evaluate_expression" in e.problem
    # the hub's flat rows go through the same check
    with pytest.raises(TaskFormatError, match=r"record 11002: field 'environments\[0\]\.tools': unknown tools"):
        w2t.tasks_from_rows([_flat(CALC), _flat(rogue)], source="hub", split="train")


def test_duplicate_task_id_in_one_file_is_refused(tmp_path):
    twin = json.loads(json.dumps(CALC)) | {"instruction": "Answer with only the number: 3+3"}
    _write_dir(tmp_path, single=(CALC, twin))
    with pytest.raises(TaskFormatError, match=r"tasks_v1_train\.json: record 11001: field 'id': duplicate id"):
        load_tasks("when2tool", split="train", path=str(tmp_path))
    with pytest.raises(TaskFormatError, match="record 11001: field 'id': duplicate id"):
        w2t.tasks_from_rows([_flat(CALC), _flat(twin)], source="hub", split="train")
