"""The typed trajectory: the agent loop's records load and write back key for key, old files (schema version 1
as the loop wrote it before the typed schema, the evaluator cache's ``_task_key`` included) still load, and
the one validator names the task and the field of a broken record."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from data_builders.agent.trajectory import (SCHEMA_VERSION, Call, Decision, Trajectory, TrajectoryError, Turn,
                                            read_trajectories, summarize, write_jsonl,
                                            write_trajectories)
from tests.doubles import CALL, calc_task, run
from tests.trajectories import make_call, make_trajectory, make_turn

# Written by the agent loop of commit 18a981f (untyped dicts, before this schema) on test_loop's scripted
# backend: a call rejected for lacking reasoning, an executed call, an answer; keep_token_ids on, one
# intervention (max_tool_calls) recorded. Regenerate only by running that commit's loop, never this one.
V1 = Path(__file__).parent / "data" / "trajectory_v1.json"
SCRIPT = {"20+20": [CALL % "20+20", "I will compute it with the tool. " + CALL % "20+20", "\\boxed{40}"]}


def v1() -> dict:
    return json.loads(V1.read_text())


def no_clock(d: dict) -> dict:
    d = copy.deepcopy(d)
    for turn in d["turns"]:
        turn["wall_s"] = 0.0
    return d


# ------------------------------------------------------------------ version-1 files
def test_a_version_1_record_loads_and_writes_back_key_for_key():
    old = v1()
    t = Trajectory.from_dict(old)
    assert t.schema_version == SCHEMA_VERSION == 1 and t.task_id == "w2t/calc-7" and t.correct
    assert [type(x) for x in (t.turns[0], t.calls[0], t.decisions[0])] == [Turn, Call, Decision]
    assert [c.status for c in t.calls] == ["rejected", "executed"] and t.calls[1].error_kind is None
    assert [d.decision for d in t.decisions] == [None, "execute", "commit"] and t.max_tool_calls == 1
    assert t.turns[0].token_ids and t.turns[2].kind == "answer"
    # the same JSON text, key order included
    assert json.dumps(t.to_dict(), ensure_ascii=False) == json.dumps(old, ensure_ascii=False)


def test_the_loop_still_writes_exactly_the_version_1_record():
    (t,), _ = run(SCRIPT, [calc_task("w2t/calc-7", "20+20", "40")], mode="force", reasoning=True,
                  keep_token_ids=True, max_tool_calls=1)
    assert isinstance(t, Trajectory)
    assert json.dumps(no_clock(t.to_dict())) == json.dumps(no_clock(v1()))


def test_an_evaluator_cache_file_of_version_1_loads_and_is_rewritten_unchanged(tmp_path):
    """The cache wrote ``{**record, "_task_key": key}``: the key comes back as ``task_key`` and goes out last."""
    path = tmp_path / "arm.jsonl"
    old = [{**v1(), "_task_key": "w2t/calc-7:0123abcd"}, {**v1(), "task_id": 8, "_task_key": "8:89abcdef"}]
    write_jsonl(path, old)
    before = path.read_bytes()
    loaded = list(read_trajectories(path))
    assert [t.task_key for t in loaded] == ["w2t/calc-7:0123abcd", "8:89abcdef"] and loaded[1].task_id == 8
    write_trajectories(path, loaded)
    assert path.read_bytes() == before
    assert list(loaded[0].to_dict())[-1] == "_task_key" and "task_key" not in loaded[0].to_dict()


def test_plain_dict_records_go_through_write_jsonl(tmp_path):
    rows = [{"a": 1, "b": [1, 2]}, {"c": "ü"}]
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert path.read_text(encoding="utf-8") == '{"a": 1, "b": [1, 2]}\n{"c": "ü"}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]      # the temp file was renamed away


# ------------------------------------------------------------------ round trip
def test_round_trip_of_a_hand_made_trajectory(tmp_path):
    t = make_trajectory([make_turn(0, "x " + CALL % "1+1", kind="call"), make_turn(1, "\\boxed{2}")],
                        [make_call(0, args={"expression": "1+1"}, result={"success": True, "result": 2})],
                        decisions=[Decision(hook="pre_call", round=0, call="evaluate_expression", decision="skip")],
                        task_id=3, probe_p=0.25, tool_access="noop", reasoning_check=False).validate()
    assert Trajectory.from_dict(t.to_dict()) == t
    assert list(read_trajectories(write_trajectories(tmp_path / "t.jsonl", [t, t]))) == [t, t]
    d = t.to_dict()
    # set optional fields come last, in declaration order; unset ones (max_tool_calls, _task_key) are left out
    assert list(d)[-4:] == ["token_cost", "tool_access", "reasoning_check", "probe_p"]
    assert "max_tool_calls" not in d and "_task_key" not in d
    assert dataclasses.replace(t, probe_p=None).to_dict().keys() == d.keys() - {"probe_p"}
    assert summarize([t])["accuracy"] == 0.0 and summarize([t])["tokens_per_task"] == 10


# ------------------------------------------------------------------ the validator
@pytest.mark.parametrize("breaks, field, problem", [
    (lambda d: d["turns"][1].pop("decode_tokens"), "turns[1].decode_tokens", "missing"),
    (lambda d: d["turns"][0].update(prefill_tokens=-3), "turns[0].prefill_tokens", "integer >= 0"),
    (lambda d: d["turns"][2].update(kind="maybe"), "turns[2].kind", "one of call, answer, content"),
    (lambda d: d["turns"][0]["logprobs"].__setitem__(1, "x"), "turns[0].logprobs[1]", "a number"),
    (lambda d: d.update(correct="yes"), "correct", "true or false"),
    (lambda d: d.update(turns="nope"), "turns", "a list"),
    (lambda d: d.pop("calls"), "calls", "missing"),
    (lambda d: d.update(colour="red"), "colour", "unknown field"),
    (lambda d: d["turns"][0].update(colour="red"), "turns[0].colour", "unknown field"),
    (lambda d: d["calls"][1].pop("error_kind"), "calls[1].error_kind", "required when status is 'executed'"),
    (lambda d: d["calls"][0].update(status="maybe"), "calls[0].status", "one of executed"),
    (lambda d: d["calls"][1].update(name=7), "calls[1].name", "a string"),
    (lambda d: d["decisions"][1].pop("call"), "decisions[1].call", "a string"),
    (lambda d: d["messages"][2].update(role="robot"), "messages[2].role", "one of system"),
    (lambda d: d.update(rounds=2), "rounds", "has 3 turns"),
    (lambda d: d.update(ended="bored"), "ended", "one of answer"),
])
def test_a_broken_record_names_the_task_and_the_field(breaks, field, problem):
    d = v1()
    breaks(d)
    with pytest.raises(TrajectoryError) as err:
        Trajectory.from_dict(d)
    msg = str(err.value)
    assert "task 'w2t/calc-7'" in msg and f"field '{field}'" in msg and problem in msg, msg
    assert isinstance(err.value, ValueError) and err.value.task == "w2t/calc-7" and err.value.field == field


def test_a_record_without_task_id_says_so():
    d = v1()
    del d["task_id"]
    with pytest.raises(TrajectoryError, match="field 'task_id': missing"):
        Trajectory.from_dict(d)
    with pytest.raises(TrajectoryError, match="must be an object"):
        Trajectory.from_dict([1, 2])


@pytest.mark.parametrize("version, problem", [
    (2, "version 2 is newer than this toolwise reads (1): update toolwise"),
    (0, "version 0 is not a trajectory schema version"),
    ("1", "version '1' is not a trajectory schema version"),
])
def test_other_schema_versions_are_refused_with_the_version(version, problem):
    d = {**v1(), "schema_version": version, "a_field_of_the_future": 1}
    with pytest.raises(TrajectoryError) as err:
        Trajectory.from_dict(d)
    assert problem in str(err.value) and "field 'schema_version'" in str(err.value)
    d.pop("schema_version")
    with pytest.raises(TrajectoryError, match="'schema_version': missing"):
        Trajectory.from_dict(d)


def test_a_bad_line_in_a_file_names_the_file_and_line(tmp_path):
    bad = v1()
    bad["turns"][0]["context_len"] = None
    path = write_jsonl(tmp_path / "trajectories.jsonl", [v1(), bad])
    with pytest.raises(TrajectoryError, match=r"trajectories\.jsonl: line 2: task 'w2t/calc-7': "
                                              r"field 'turns\[0\]\.context_len': must be an integer >= 0"):
        list(read_trajectories(path))


def test_validate_checks_objects_built_in_code():
    t = make_trajectory([make_turn(0, "\\boxed{1}")], task_id=5)
    assert t.validate() is t
    t.turns[0].kind = None                 # the loop sets kind right after generating a turn
    with pytest.raises(TrajectoryError, match=r"task 5: field 'turns\[0\]\.kind'"):
        t.validate()
    rejected = make_call(status="rejected")
    rejected.ok = True
    with pytest.raises(TrajectoryError, match=r"calls\[0\]\.ok.*rejected call"):
        make_trajectory([make_turn()], [rejected]).validate()
