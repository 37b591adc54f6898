"""Flip labels made offline from a recorded trace equal those of the live run it was recorded from, bitwise.

The live run calls a team's own tools (Python functions in a worker process); its trajectories are written as a
trace (``record_trace``); the same tasks pointed at the trace instead of the live tools are labelled again. The
scripted policy's answers depend on the tool results it read, so a replay that returned anything else would move
the labels and the point texts.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from data_builders.agent.loop import Agent
from data_builders.environments import make_environment
from data_builders.points.labelers import agent_config, label_flip
from data_builders.tasks import load_tasks
from data_builders.tool_sources.trace import record_trace
from tests.doubles import ScriptedBackend

FIXTURES = Path(__file__).resolve().parents[1] / "tool_sources"
LIVE = {"kind": "functions", "functions": ["functions_fixture:convert_units"], "path": str(FIXTURES)}
CFG = OmegaConf.create({"max_rounds": 3, "max_new_tokens": 64, "call_format": "xml", "forced_answer_tokens": 8})


class ReadingBackend(ScriptedBackend):
    """Calls the tool first; afterwards answers with the number the tool returned, if it saw one."""

    def _reply(self, prompt):
        for value in ("2500.0", "150.0", "0.3"):
            if f'\\"result\\": \\"{value}\\"' in prompt:
                return f"\\boxed{{{value}}}" if not prompt.rstrip().endswith("boxed{") else f"{value}}}"
        if prompt.rstrip().endswith("boxed{"):
            return "1}"        # a forced answer before any result: a guess
        return super()._reply(prompt)


def call(value, src, dst):
    return ('<tool_call>\n' + json.dumps({"name": "convert_units", "arguments": {"value": value, "from_unit": src,
                                                                                "to_unit": dst}}) + '\n</tool_call>')


def tasks_with(tmp_path, spec, name):
    records = [{"id": "a", "instruction": "How many metres are 2.5 km?", "answer": "2500"},
               {"id": "b", "instruction": "How many cm are 1.5 m?", "answer": "150"},
               {"id": "c", "instruction": "How many km are 300 m?", "answer": "0.3"}]
    path = tmp_path / f"{name}.jsonl"
    # the same source name live and replayed: a trace stands in for the live tools under their name
    path.write_text("".join(json.dumps({**r, "tools": [{**spec, "name": "units"}], "scorer": "numeric",
                                        "split": "train"}) + "\n"
                            for r in records))
    return load_tasks("custom", split="train", path=str(path))


SCRIPTS = {"2.5 km": [call(2.5, "km", "m"), "done"], "1.5 m": [call(1.5, "m", "cm"), "done"],
           "300 m": [call(300, "m", "km"), "done"]}


@pytest.mark.slow
def test_a_trace_reproduces_the_live_flip_labels_bitwise(tmp_path):
    live_tasks = tasks_with(tmp_path, LIVE, "live")
    rows_live, tensors_live = label_flip(ReadingBackend(SCRIPTS), live_tasks, ["train"] * 3, CFG)
    trajectories = Agent(ReadingBackend(SCRIPTS), agent_config(CFG, "default", 3)).run(live_tasks)
    assert [t.tool_calls for t in trajectories] == [1, 1, 1] and all(t.correct for t in trajectories)
    trace = tmp_path / "trace.jsonl"
    assert record_trace(trace, trajectories, tools=make_environment(live_tasks[0].env).tool_specs()) == 3

    replay_tasks = tasks_with(tmp_path, {"kind": "trace", "path": str(trace)}, "replay")
    rows_replay, tensors_replay = label_flip(ReadingBackend(SCRIPTS), replay_tasks, ["train"] * 3, CFG)
    assert [r["flip_class"] for r in rows_live] == ["helpful"] * 3        # the labels mean something here
    drop = {"task_id"}       # the same ids; everything else must be identical
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows_replay] == \
        [{k: v for k, v in r.items() if k not in drop} for r in rows_live]
    for key in tensors_live:
        assert np.array_equal(tensors_live[key].numpy(), tensors_replay[key].numpy()), key


@pytest.mark.slow
def test_a_call_the_trace_lacks_is_a_counted_miss(tmp_path):
    live_tasks = tasks_with(tmp_path, LIVE, "live")
    trajectories = Agent(ReadingBackend(SCRIPTS), agent_config(CFG, "default", 3)).run(live_tasks[:1])
    trace = tmp_path / "partial.jsonl"
    record_trace(trace, trajectories, tools=make_environment(live_tasks[0].env).tool_specs())
    replay = tasks_with(tmp_path, {"kind": "trace", "path": str(trace)}, "replay")
    (second,) = Agent(ReadingBackend(SCRIPTS), agent_config(CFG, "default", 1)).run(replay[1:2])
    assert second.calls[0].ok is False and second.calls[0].error_kind == "trace_miss"
    assert dataclasses.asdict(second.calls[0])["status"] == "executed"
