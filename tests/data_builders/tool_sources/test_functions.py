"""The functions source: schemas are transformers' get_json_schema, calls run in a worker process that a hang or a
crash replaces."""
from __future__ import annotations

import inspect
import json
import os
import re
import textwrap
import time

import pytest
from transformers.utils import get_json_schema

from data_builders.tool_sources import CallLimits, FunctionSource, source_from_spec
from tests.data_builders.tool_sources import functions_fixture

MODULE = functions_fixture.__name__
TIMEOUT_S = 2.0
SLACK_S = 3.0
LIMITS = CallLimits(timeout_s=TIMEOUT_S, max_output_chars=500)
PUBLIC = sorted(n for n, f in inspect.getmembers(functions_fixture, inspect.isfunction)
                if f.__module__ == MODULE and not n.startswith("_"))


@pytest.fixture(scope="module")
def source():
    with source_from_spec({"kind": "functions", "module": MODULE}, limits=LIMITS) as src:
        yield src


@pytest.mark.slow
def test_schemas_are_get_json_schemas_own(source):
    assert PUBLIC == ["convert_units", "crash", "describe", "fail", "flood", "hang", "worker_pid"]
    by_name = {t["function"]["name"]: t for t in source.tools()}
    assert sorted(by_name) == PUBLIC                 # no imported function (json.dumps), no private one
    for name in PUBLIC:
        assert by_name[name] == get_json_schema(getattr(functions_fixture, name))
    assert by_name["convert_units"]["type"] == "function"


@pytest.mark.slow
def test_named_functions(tmp_path):
    spec = {"kind": "functions", "functions": [f"{MODULE}:convert_units", f"{MODULE}:describe"]}
    with source_from_spec(spec, limits=LIMITS) as src:
        assert [t["function"]["name"] for t in src.tools()] == ["convert_units", "describe"]
        assert src.call("convert_units", {"value": 3, "from_unit": "km", "to_unit": "m"}).content == "3000.0"


def test_calls_run_in_another_process(source):
    r = source.call("worker_pid", {})
    assert r.ok and int(r.content) != os.getpid()


def test_results_are_json_unless_strings(source):
    r = source.call("describe", {"tags": ["a"], "name": "x"})
    assert (r.ok, r.content) == (True, json.dumps({"name": "x", "tags": ["a"], "note": "café"}, ensure_ascii=False))
    assert source.call("flood", {"n": 3}).content == "yyy"


def test_an_exception_is_a_tool_error(source):
    r = source.call("fail", {"message": "no such city"})
    assert (r.ok, r.error_kind, r.content) == (False, "tool_error", "ValueError: no such city")


def test_arguments_that_do_not_bind_are_bad_arguments(source):
    for args in ({"value": 1, "from_unit": "m"}, {"value": 1, "from_unit": "m", "to_unit": "cm", "extra": 1}):
        r = source.call("convert_units", args)
        assert (r.ok, r.error_kind) == (False, "bad_arguments"), r
    r = source.call("convert_units", "value=1")
    assert (r.ok, r.error_kind) == (False, "bad_arguments")
    r = source.call("nope", {})
    assert (r.ok, r.error_kind) == (False, "unknown_tool")


def test_a_flood_is_cut(source):
    r = source.call("flood", {"n": 10_000})
    assert (r.ok, r.error_kind) == (False, "output_limit")
    assert r.content == "y" * 500 + "\n[output truncated: 500 of 10000 characters shown]"


@pytest.mark.slow
def test_a_hang_times_out_and_the_worker_is_replaced(source):
    pid = source.call("worker_pid", {}).content
    started = source.workers_started
    r = source.call("hang", {"seconds": 60})
    assert (r.ok, r.error_kind) == (False, "timeout")
    assert TIMEOUT_S - 0.2 <= r.wall_s <= TIMEOUT_S + SLACK_S
    r = source.call("worker_pid", {})
    assert r.ok and r.content != pid
    assert source.workers_started == started + 1


def test_a_crash_is_reported_and_the_worker_is_replaced(source):
    pid = source.call("worker_pid", {}).content
    r = source.call("crash", {})
    assert (r.ok, r.error_kind) == (False, "crash") and "exit code 3" in r.error
    r = source.call("worker_pid", {})
    assert r.ok and r.content != pid


@pytest.mark.slow
def test_a_folder_of_the_teams_own_functions(tmp_path):
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "team_tools.py").write_text(textwrap.dedent('''
        def shout(text: str) -> str:
            """Upper-case a text.

            Args:
                text: The text.
            """
            return text.upper()
    '''))
    spec = {"kind": "functions", "module": "team_tools", "path": "team"}
    with source_from_spec(spec, base_dir=tmp_path, limits=LIMITS) as src:
        assert [t["function"]["name"] for t in src.tools()] == ["shout"]
        assert src.call("shout", {"text": "hi"}).content == "HI"


@pytest.mark.parametrize("spec, field", [
    ({"kind": "functions"}, "functions"),
    ({"kind": "functions", "functions": "x:y"}, "functions"),
    ({"kind": "functions", "functions": ["no_colon"]}, "functions[0]"),
    ({"kind": "functions", "functions": [f"{MODULE}:convert_units", f"{MODULE}:missing"]}, "functions[1]"),
    ({"kind": "functions", "module": "no_such_module_here"}, "module"),
    ({"kind": "functions", "module": MODULE, "path": "no/such/folder"}, "path"),
])
def test_bad_function_specs_name_the_field(spec, field, tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"'{field}'")):
        source_from_spec(spec, base_dir=tmp_path)


def test_a_function_get_json_schema_refuses_is_a_spec_error(tmp_path):
    (tmp_path / "nodoc.py").write_text("def f(x):\n    return x\n")
    spec = {"kind": "functions", "functions": ["nodoc:f"], "path": "."}
    with pytest.raises(ValueError, match=r"field 'functions\[0\]'.*no tool schema for 'f'"):
        source_from_spec(spec, base_dir=tmp_path)


@pytest.mark.slow
def test_a_module_that_never_finishes_importing_is_a_startup_timeout(tmp_path):
    (tmp_path / "slow_tools.py").write_text("import time\ntime.sleep(60)\n")
    spec = {"kind": "functions", "module": "slow_tools", "path": ".", "startup_timeout_s": 1}
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="within 1s"):
        source_from_spec(spec, base_dir=tmp_path)
    assert time.monotonic() - started < 1 + SLACK_S


@pytest.mark.slow
def test_close_stops_the_worker():
    src = FunctionSource(functions=[f"{MODULE}:worker_pid"], limits=LIMITS)
    proc = src._proc
    assert proc.is_alive()
    src.close()
    assert src.worker_pid is None
    r = src.call("worker_pid", {})
    assert (r.ok, r.error_kind) == (False, "crash")
