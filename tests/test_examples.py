"""The worked example in examples/unit_tools: its files are what its generator writes, its task file loads, and its
MCP server (a real process, started as the task file says) answers each of its tools."""
from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

from data_builders.environments import make_environment
from data_builders.tasks import load_tasks

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "unit_tools"


def test_the_example_files_are_what_the_generator_writes(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "make_tasks.py"), str(tmp_path)], check=True, capture_output=True)
    for name in ("tasks.jsonl", "data.json"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name


def test_the_example_tasks_load_and_the_server_answers():
    tasks = [t for split in ("train", "test") for t in load_tasks("custom", split=split,
                                                                  path=str(EXAMPLE / "tasks.jsonl"))]
    assert len(tasks) == 160 and collections.Counter(t.category for t in tasks) == \
        {"known": 40, "conversion": 40, "lookup": 40, "search": 40}
    env = make_environment(tasks[0].env)
    assert [s["function"]["name"] for s in env.tool_specs()] == ["convert_units", "lookup", "search"]
    assert env.call("convert_units", {"value": 37.4, "from_unit": "mi", "to_unit": "km"}) == \
        {"success": True, "result": "60.1895"}
    assert env.call("convert_units", {"value": 212, "from_unit": "F", "to_unit": "C"})["result"] == "100.0"
    lookup = next(t for t in tasks if t.id == "lookup-000")
    table = {"In which city": "warehouses", "How many grams": "parts", "What is the name": "staff"}
    key = lookup.instruction.rstrip("?").split()[-1]
    name = next(v for k, v in table.items() if lookup.instruction.startswith(k))
    assert env.call("lookup", {"table": name, "key": key})["result"] == lookup.answer
    found = env.call("search", {"query": "Zephyr X2 headset battery life", "k": 1})
    assert found["success"] and "Zephyr X2 headset" in found["result"]
    failed = env.call("convert_units", {"value": 1, "from_unit": "mi", "to_unit": "kg"})
    assert failed["success"] is False and failed["error_kind"] == "tool_error" and "cannot convert" in failed["message"]
