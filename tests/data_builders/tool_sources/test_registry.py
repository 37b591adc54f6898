"""The registry and source_from_spec: built-in kinds, a source from outside toolwise by dotted path or by
register_source, and spec errors that name the field."""
from __future__ import annotations

import pytest

from data_builders.tool_sources import (SOURCES, CallLimits, FunctionSource, MCPSource, ToolSource, TraceSource,
                                        register_source, source_from_spec)
from tests.data_builders.tool_sources.plugin_fixture import EchoSource

PLUGIN = "tests.data_builders.tool_sources.plugin_fixture:EchoSource"


def test_builtin_kinds():
    assert SOURCES["mcp"] is MCPSource and SOURCES["functions"] is FunctionSource and SOURCES["trace"] is TraceSource
    assert {cls.kind for cls in SOURCES.values()} >= {"mcp", "functions", "trace"}


def test_a_plugin_by_dotted_path_gets_the_rest_of_the_spec_and_the_limits():
    limits = CallLimits(timeout_s=5, max_output_chars=8)
    with source_from_spec({"kind": PLUGIN, "prefix": "> "}, limits=limits) as src:
        assert type(src) is EchoSource and src.prefix == "> " and src.limits == limits
        assert src.tools()[0]["function"]["name"] == "echo"
        assert src.call("echo", {"text": "hi"}).content == "> hi"
        r = src.call("echo", {"text": "a long text"})
        assert (r.ok, r.error_kind) == (False, "output_limit")
    assert src.closed


def test_spec_limits_override_the_callers():
    src = source_from_spec({"kind": PLUGIN, "limits": {"max_output_chars": 3}}, limits=CallLimits(timeout_s=7))
    assert src.limits == CallLimits(timeout_s=7, max_output_chars=3)


def test_register_source_makes_a_short_kind():
    @register_source("echo-for-test")
    class Echo(EchoSource):
        pass

    try:
        assert Echo.kind == "echo-for-test"
        assert type(source_from_spec({"kind": "echo-for-test"})) is Echo
        with pytest.raises(ValueError, match="already registered"):
            register_source("echo-for-test")(EchoSource)
    finally:
        SOURCES.pop("echo-for-test")
    with pytest.raises(TypeError):
        register_source("not-a-source")(dict)


class Abstract(ToolSource):
    kind = "abstract"


@pytest.mark.parametrize("spec, message", [
    ({}, "field 'kind' is required"),
    ({"kind": 7}, "field 'kind' must be a string"),
    ({"kind": "carrier-pigeon"}, "field 'kind': unknown kind 'carrier-pigeon'"),
    ({"kind": "no_such_package.mod:Source"}, "field 'kind': cannot import 'no_such_package.mod'"),
    ({"kind": "tests.data_builders.tool_sources.plugin_fixture:Nope"}, "field 'kind'"),
    ({"kind": "json:JSONDecoder"}, "field 'kind': 'json:JSONDecoder' is not a ToolSource subclass"),
    ({"kind": f"{__name__}:Abstract"}, "field 'kind'"),
    ({"kind": PLUGIN, "prefx": ">"}, "unknown field 'prefx' (accepted: prefix)"),
    ({"kind": PLUGIN, "base_dir": "/"}, "unknown field 'base_dir'"),
    ({"kind": PLUGIN, "limits": {"timeout": 3}}, "unknown field 'limits.timeout'"),
    ({"kind": PLUGIN, "limits": {"max_output_chars": 2.5}}, "field 'limits.max_output_chars'"),
    ({"kind": "trace"}, "field 'path' is required"),
    ({"kind": "mcp", "comand": ["python", "server.py"]}, "unknown field 'comand'"),
])
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(ValueError) as err:
        source_from_spec(spec)
    assert message in str(err.value), str(err.value)


def test_a_spec_must_be_a_mapping():
    with pytest.raises(ValueError, match="mapping"):
        source_from_spec(["mcp"])
