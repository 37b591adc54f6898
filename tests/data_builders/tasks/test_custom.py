"""``tasks=custom``: a team's own task file with its own tools (a real MCP server process over stdio, Python
functions in a worker process), loaded, checked, and run by the agent loop with a scripted policy."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from data_builders.agent.loop import Agent, AgentConfig
from data_builders.tasks import load_tasks
from data_builders.tasks.schema import TaskFormatError, task_key
from tests.doubles import ScriptedBackend

FIXTURES = Path(__file__).resolve().parents[1] / "tool_sources"
SOURCES = {
    "units": {"kind": "mcp", "command": [sys.executable, str(FIXTURES / "mcp_server_fixture.py")]},
    "fns": {"kind": "functions", "module": "functions_fixture", "path": str(FIXTURES)},
    "pid": {"kind": "functions", "functions": ["functions_fixture:worker_pid"], "path": str(FIXTURES)},
}


def write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


RECORDS = [
    {"id": "km", "instruction": "How many metres are 2.5 km?", "tools": ["units"], "answer": "2500",
     "scorer": {"kind": "numeric", "tolerance": 0.5}, "split": "test", "difficulty": "easy"},
    {"id": "capital", "instruction": "What is the capital of Japan?", "tools": ["units"], "answer": "tokyo",
     "scorer": "normalized", "split": "test"},
    {"id": "crash", "instruction": "Call crash, then answer 7.", "tools": ["units", "pid"], "answer": "7",
     "split": "test", "category": "robustness"},
    {"id": "direct", "instruction": "What is 2 + 2?", "tools": ["fns"], "answer": "4", "split": "train"},
]


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.mark.slow
def test_a_custom_file_loads_both_splits_with_its_scorers_and_sources(tmp_path):
    path = write(tmp_path, RECORDS)
    test = load_tasks("custom", split="test", path=str(path), sources=SOURCES)
    train = load_tasks("custom", split="train", path=str(path), sources=SOURCES)
    assert sorted(t.id for t in test) == ["capital", "crash", "km"] and [t.id for t in train] == ["direct"]
    km = next(t for t in test if t.id == "km")
    assert km.env.name == "units" and km.env.sources[0]["kind"] == "mcp" and km.scorer["kind"] == "numeric"
    assert next(t for t in test if t.id == "crash").env.name == "units+pid"
    assert train[0].scorer == {"kind": "exact"}           # the default scorer
    # The task's key covers its tools and scorer: a changed server or rule is a new task to the caches.
    other = load_tasks("custom", split="test", path=str(write(tmp_path, [{**RECORDS[0], "scorer": "exact"}])),
                       sources=SOURCES)
    assert task_key(other[0]) != task_key(km)


@pytest.mark.slow
def test_the_agent_runs_on_the_teams_own_tools_and_a_crashing_tool_is_a_recorded_failure(tmp_path):
    tasks = load_tasks("custom", split="test", path=str(write(tmp_path, RECORDS)), sources=SOURCES)
    scripts = {
        "2.5 km": [call("convert_units", {"value": 2.5, "from_unit": "km", "to_unit": "m"}),
                   "It is \\boxed{2500.0 m}"],
        "capital of Japan": [call("lookup", {"key": "capital:japan"}), "\\boxed{Tokyo.}"],
        "Call crash": [call("crash", {}), "\\boxed{7}"],
    }
    backend = ScriptedBackend(scripts)
    trajs = Agent(backend, AgentConfig(mode="default", max_rounds=4)).run(tasks)
    by_id = {t.task_id: t for t in trajs}
    km = by_id["km"]
    assert km.calls[0].status == "executed" and km.calls[0].result == {"success": True, "result": "2500.0"}
    assert km.correct and km.env == "units"
    assert by_id["capital"].correct                          # "Tokyo." normalised against "tokyo"
    crash = by_id["crash"]
    assert crash.calls[0].ok is False and crash.calls[0].error_kind == "crash", crash.calls[0]
    assert crash.ended == "answer" and crash.correct          # the run went on after the tool died
    # The tools the model saw are the sources' own schemas, both sources' for "crash".
    shown = [json.loads(p)["tools"] for p in backend.calls[0]]
    assert ["convert_units", "crash", "fail", "flood", "hang", "lookup", "whoami", "worker_pid"] in shown


@pytest.mark.slow
def test_two_sources_offering_one_tool_name_are_refused_by_name(tmp_path):
    from data_builders.environments import make_environment

    record = {**RECORDS[2], "tools": ["units", "fns"]}
    (task,) = load_tasks("custom", split="test", path=str(write(tmp_path, [record])), sources=SOURCES)
    with pytest.raises(ValueError, match="tool 'convert_units' is offered by two sources of 'units\\+fns'"):
        make_environment(task.env)


@pytest.mark.parametrize("record, field, problem", [
    ({"tools": ["units"], "answer": "1"}, "instruction", "missing or empty"),
    ({"instruction": "q", "answer": "1"}, "tools", "expected a non-empty list"),
    ({"instruction": "q", "tools": ["nope"], "answer": "1"}, "tools[0]", "no tool source named 'nope'"),
    ({"instruction": "q", "tools": [{"command": ["x"]}], "answer": "1"}, "tools[0].kind", "missing"),
    ({"instruction": "q", "tools": [{"kind": "mcp", "comand": ["x"]}], "answer": "1"}, "tools[0]",
     "unknown field 'comand'"),
    ({"instruction": "q", "tools": [{"kind": "no.such.module:Source"}], "answer": "1"}, "tools[0]", "no.such"),
    ({"instruction": "q", "tools": ["units"]}, "answer", "needs a gold answer"),
    ({"instruction": "q", "tools": ["units"], "answer": "1", "scorer": "telepathy"}, "scorer", ""),
    ({"instruction": "q", "tools": ["units"], "answer": "1", "difficulty": "brutal"}, "difficulty", "not in"),
    ({"instruction": "q", "tools": ["units"], "answer": "1", "split": "dev"}, "split", "not in"),
    ({"instruction": "q", "tools": ["units"], "answer": "1", "colour": "red"}, "colour", "unknown field"),
    ("{not json", "<json>", "not valid JSON"),
])
def test_bad_records_name_the_file_line_and_field(tmp_path, record, field, problem):
    path = write(tmp_path, [RECORDS[0], record])
    with pytest.raises(TaskFormatError) as err:
        load_tasks("custom", split="test", path=str(path), sources=SOURCES)
    assert err.value.source == str(path) and str(err.value.record).startswith("line 2")
    assert err.value.field_name == field and problem in err.value.problem, str(err.value)


@pytest.mark.slow
def test_records_without_a_split_are_split_by_id_reproducibly(tmp_path):
    records = [{"id": i, "instruction": f"q{i}", "tools": ["fns"], "answer": str(i)} for i in range(200)]
    path = write(tmp_path, records)
    test = load_tasks("custom", split="test", path=str(path), sources=SOURCES, test_fraction=0.25)
    again = load_tasks("custom", split="test", path=str(path), sources=SOURCES, test_fraction=0.25)
    assert [t.id for t in test] == [t.id for t in again] and 30 <= len(test) <= 70
    # the builder's val split (carved out of train by its own hash of the id) is not empty: the two hashes are
    # independent, so a val fraction below the test fraction still takes its share of the train tasks
    from data_builders.build import split_of

    train = load_tasks("custom", split="train", path=str(path), sources=SOURCES, test_fraction=0.25)
    val = [t for t in train if split_of(t, 0.15, 0) == "val"]
    assert 0.05 * len(train) <= len(val) <= 0.3 * len(train)
    # every existing selection works on them
    assert len(load_tasks("custom", split="test", path=str(path), sources=SOURCES, limit=5)) == 5
    assert len(load_tasks("custom", split="test", path=str(path), sources=SOURCES, per_cell=3)) == 3
