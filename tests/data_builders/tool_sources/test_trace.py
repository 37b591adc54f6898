"""The trace source: a recorded conversation replays the same results for the same calls; what it lacks is a
counted miss; a malformed file names its line and field."""
from __future__ import annotations

import json

import pytest

from data_builders.tool_sources import CallLimits, TraceSource, source_from_spec

TOOLS = [{"type": "function", "function": {
    "name": "convert_units", "description": "Convert a length between units.",
    "parameters": {"type": "object", "properties": {"value": {"type": "number"}, "from_unit": {"type": "string"},
                                                   "to_unit": {"type": "string"}}}}}]


def call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATION = [
    {"role": "user", "content": "How many metres in 2 km, and what is the capital of Japan?"},
    {"role": "assistant", "content": None, "tool_calls": [
        call("c1", "convert_units", '{"value": 2, "from_unit": "km", "to_unit": "m"}'),
        call("c2", "lookup", '{"key": "capital:japan"}')]},
    {"role": "tool", "tool_call_id": "c2", "content": "Tokyo"},          # answers may come in any order
    {"role": "tool", "tool_call_id": "c1", "content": "2000.0"},
    {"role": "assistant", "content": "2000 m; Tokyo.", "tool_calls": [call("c3", "lookup", '{"key": "unanswered"}')]},
]


def write(tmp_path, *lines, name="trace.jsonl") -> str:
    (tmp_path / name).write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return name


def test_replay_gives_the_recorded_results_whatever_the_key_order(tmp_path):
    path = write(tmp_path, {"messages": CONVERSATION, "tools": TOOLS})
    src = source_from_spec({"kind": "trace", "path": path}, base_dir=tmp_path)
    r = src.call("convert_units", {"to_unit": "m", "value": 2, "from_unit": "km"})
    assert (r.ok, r.error_kind, r.content) == (True, None, "2000.0")
    assert src.call("lookup", {"key": "capital:japan"}).content == "Tokyo"
    assert src.hits == {"convert_units": 1, "lookup": 1}


@pytest.mark.slow
def test_a_recorded_live_run_replays_the_same_results(tmp_path):
    """Record what a live source answered as a chat conversation, then replay it."""
    from data_builders.tool_sources import FunctionSource

    module = "tests.data_builders.tool_sources.functions_fixture"
    calls = [("convert_units", {"value": 5, "from_unit": "cm", "to_unit": "m"}),
             ("describe", {"name": "Zoë", "tags": ["b", "a"]}), ("fail", {"message": "recorded failure"})]
    with FunctionSource(functions=[f"{module}:{n}" for n in ("convert_units", "describe", "fail")]) as live:
        tools = live.tools()
        messages = [{"role": "user", "content": "go"}]
        answers = []
        for i, (name, args) in enumerate(calls):
            result = live.call(name, args)
            answers.append(result.content)
            messages.append({"role": "assistant", "tool_calls": [call(f"call_{i}", name, json.dumps(args))]})
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result.content})
    replay = TraceSource(write(tmp_path, {"messages": messages, "tools": tools}), base_dir=tmp_path)
    assert replay.tools() == tools
    for (name, args), answer in zip(calls, answers):
        reordered = dict(reversed(list(args.items())))
        assert replay.call(name, reordered).content == answer
    assert not replay.misses


def test_a_call_the_trace_lacks_is_a_counted_miss(tmp_path):
    src = TraceSource(write(tmp_path, CONVERSATION), base_dir=tmp_path)
    for _ in range(2):
        r = src.call("lookup", {"key": "capital:france"})
        assert (r.ok, r.error_kind) == (False, "trace_miss")
    assert src.call("lookup", {"key": "unanswered"}).error_kind == "trace_miss"   # called, never answered
    assert src.call("convert_units", {"value": 2.0, "from_unit": "km", "to_unit": "m"}).error_kind == "trace_miss"
    assert src.misses == {"lookup": 3, "convert_units": 1}
    r = src.call("weather", {})
    assert (r.ok, r.error_kind) == (False, "unknown_tool")
    r = src.call("lookup", "capital:japan")
    assert (r.ok, r.error_kind) == (False, "bad_arguments")


def test_tools_are_the_recorded_ones_else_inferred(tmp_path):
    src = TraceSource(write(tmp_path, {"messages": CONVERSATION, "tools": TOOLS}), base_dir=tmp_path)
    tools = src.tools()
    assert tools[0] == TOOLS[0]                        # recorded: kept as it was
    assert tools[1] == {"type": "function", "function": {     # called but not declared: inferred
        "name": "lookup", "description": "", "parameters": {"type": "object", "properties": {}}}}
    assert src.inferred_tools == ["lookup"]
    bare = TraceSource(write(tmp_path, CONVERSATION, name="bare.jsonl"), base_dir=tmp_path)
    assert [t["function"]["name"] for t in bare.tools()] == ["convert_units", "lookup"]
    assert bare.inferred_tools == ["convert_units", "lookup"]


def test_conflicting_recordings_keep_the_first_and_are_counted(tmp_path):
    later = [{"role": "assistant", "tool_calls": [call("a", "lookup", '{"key":"capital:japan"}')]},
             {"role": "tool", "tool_call_id": "a", "content": "Kyoto"}]
    same = [{"role": "assistant", "tool_calls": [call("a", "lookup", '{"key":"capital:japan"}')]},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "Tokyo"}]}]
    src = TraceSource(write(tmp_path, CONVERSATION, "", later, same), base_dir=tmp_path)
    assert src.call("lookup", {"key": "capital:japan"}).content == "Tokyo"
    assert src.conflicts == {"lookup": 1}


def test_output_cap_applies_to_replayed_text(tmp_path):
    long = [{"role": "assistant", "tool_calls": [call("a", "flood", "{}")]},
            {"role": "tool", "tool_call_id": "a", "content": "z" * 100}]
    src = TraceSource(write(tmp_path, long), base_dir=tmp_path, limits=CallLimits(max_output_chars=10))
    r = src.call("flood", {})
    assert (r.ok, r.error_kind) == (False, "output_limit") and r.content.startswith("z" * 10 + "\n[output truncated")


@pytest.mark.parametrize("line, where", [
    ('{"messages": [', "line 2: not JSON"),
    ('{"conversation": []}', "line 2, field 'messages'"),
    ('[{"content": "no role"}]', "line 2, field 'messages[0].role'"),
    ('[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]',
     "line 2, field 'messages[0].tool_calls[0].id'"),
    ('[{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{oops"}}]}]',
     "line 2, field 'messages[0].tool_calls[0].function.arguments'"),
    ('[{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "[1]"}}]}]',
     "line 2, field 'messages[0].tool_calls[0].function.arguments'"),
    ('[{"role": "tool", "tool_call_id": "zz", "content": "x"}]', "line 2, field 'messages[0].tool_call_id'"),
    ('[{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]}, '
     '{"role": "tool", "tool_call_id": "a", "content": 5}]', "line 2, field 'messages[1].content'"),
    ('{"messages": [], "tools": [{"type": "function"}]}', "line 2, field 'tools[0].function.name'"),
])
def test_bad_files_name_file_line_and_field(tmp_path, line, where):
    path = write(tmp_path, CONVERSATION, line)
    with pytest.raises(ValueError) as err:
        TraceSource(path, base_dir=tmp_path)
    assert str(tmp_path / path) in str(err.value) and where in str(err.value), str(err.value)


def test_bad_trace_specs_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="'path'"):
        source_from_spec({"kind": "trace", "path": "missing.jsonl"}, base_dir=tmp_path)
    with pytest.raises(ValueError, match="'path'"):
        source_from_spec({"kind": "trace", "path": []}, base_dir=tmp_path)
