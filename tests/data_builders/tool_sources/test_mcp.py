"""The MCP source against a real server process (mcp_server_fixture.py), over stdio and over streamable HTTP.

Each misbehaviour must come back as a failed ToolResult of the right kind, and the source must keep working
afterwards: a timeout or a crash retires the connection, and the next call opens a new one (for stdio, a new
server process: ``whoami`` answers with another pid).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_builders.tool_sources import CallLimits, MCPSource, source_from_spec
from data_builders.tool_sources.mcp import _content_text

HERE = Path(__file__).resolve().parent
SERVER = HERE / "mcp_server_fixture.py"
TIMEOUT_S = 2.0
SLACK_S = 3.0            # a loaded 2-core CI box; the point is "about timeout_s", not "whenever the tool returns"
LIMITS = CallLimits(timeout_s=TIMEOUT_S, max_output_chars=1000)
TOOL_NAMES = {"convert_units", "lookup", "whoami", "hang", "crash", "flood", "fail"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the HTTP MCP server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the HTTP MCP server did not listen within 60 s")


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def stdio_source():
    # Through the spec, as a task file would give it: a relative script path, resolved against base_dir.
    with source_from_spec({"kind": "mcp", "command": ["python", SERVER.name]}, base_dir=HERE, limits=LIMITS) as src:
        yield src


@pytest.fixture(scope="module")
def http_url():
    port = free_port()
    proc = start_http_server(port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


@pytest.fixture(scope="module")
def http_source(http_url):
    with MCPSource(url=http_url, headers={"X-Toolwise-Test": "1"}, limits=LIMITS) as src:
        yield src


@pytest.fixture(params=["stdio", "http"])
def source(request):
    return request.getfixturevalue(f"{request.param}_source")


def test_tools_are_listed_as_openai_function_schemas(source):
    tools = {t["function"]["name"]: t for t in source.tools()}
    assert set(tools) == TOOL_NAMES
    convert = tools["convert_units"]
    assert convert["type"] == "function"
    assert convert["function"]["description"].startswith("Convert a length")
    params = convert["function"]["parameters"]
    assert params["type"] == "object"
    assert params["properties"]["value"]["type"] == "number"
    assert params["properties"]["from_unit"]["type"] == "string"
    assert set(params["required"]) == {"value", "from_unit", "to_unit"}


def test_calls_return_the_servers_answer(source):
    r = source.call("convert_units", {"value": 2, "from_unit": "km", "to_unit": "m"})
    assert (r.ok, r.error_kind, float(r.content)) == (True, None, 2000.0)
    r = source.call("lookup", {"key": "capital:japan"})
    assert (r.ok, r.content) == (True, "Tokyo")
    assert r.wall_s >= 0


def test_a_tool_error_is_a_failed_result(source):
    r = source.call("fail", {})
    assert (r.ok, r.error_kind) == (False, "tool_error")
    assert "this tool always fails" in r.content and "this tool always fails" in r.error


def test_a_flood_is_cut_at_the_output_cap(source):
    r = source.call("flood", {"n": 50_000})
    assert (r.ok, r.error_kind) == (False, "output_limit")
    assert r.content.startswith("x" * LIMITS.max_output_chars)
    assert "[output truncated: 1000 of 50000 characters shown]" in r.content
    assert source.call("lookup", {"key": "capital:france"}).content == "Paris"


def test_unknown_tools_and_bad_arguments_never_reach_the_server(source):
    r = source.call("delete_everything", {})
    assert (r.ok, r.error_kind) == (False, "unknown_tool")
    r = source.call("convert_units", {"value": "two", "from_unit": "km", "to_unit": "m"})
    assert (r.ok, r.error_kind) == (False, "bad_arguments") and "value" in r.error
    r = source.call("lookup", {})
    assert (r.ok, r.error_kind) == (False, "bad_arguments") and "key" in r.error
    r = source.call("lookup", ["capital:japan"])
    assert (r.ok, r.error_kind) == (False, "bad_arguments")


@pytest.mark.slow
def test_a_hung_call_times_out_and_the_next_call_works(source):
    assert source.call("lookup", {"key": "capital:japan"}).ok     # connected, whatever ran before (or not)
    before = source.connects
    r = source.call("hang", {"seconds": 60})
    assert (r.ok, r.error_kind) == (False, "timeout")
    assert TIMEOUT_S - 0.2 <= r.wall_s <= TIMEOUT_S + SLACK_S
    r = source.call("lookup", {"key": "capital:japan"})
    assert (r.ok, r.content) == (True, "Tokyo")
    assert source.connects == before + 1          # the timed-out connection was replaced


def test_a_crashed_stdio_server_is_restarted_for_the_next_call(stdio_source):
    pid = stdio_source.call("whoami", {}).content
    r = stdio_source.call("crash", {})
    assert (r.ok, r.error_kind) == (False, "crash")
    r = stdio_source.call("whoami", {})
    assert r.ok and r.content != pid                # a new server process
    assert stdio_source.call("convert_units", {"value": 1, "from_unit": "mi", "to_unit": "m"}).content == "1609.344"


@pytest.mark.slow
def test_a_crashed_http_server_fails_calls_until_it_is_back():
    port = free_port()
    proc = start_http_server(port)
    try:
        with MCPSource(url=f"http://127.0.0.1:{port}/mcp", limits=LIMITS) as src:
            first = src.call("whoami", {}).content
            r = src.call("crash", {})
            assert (r.ok, r.error_kind) == (False, "crash")
            proc.wait(10)
            r = src.call("whoami", {})                  # nobody listens: a failed result, not an exception
            assert (r.ok, r.error_kind) == (False, "crash")
            proc = start_http_server(port)
            r = src.call("whoami", {})
            assert r.ok and r.content != first
    finally:
        stop(proc)


def test_a_server_that_cannot_start_is_a_failed_call_and_a_loud_tools(tmp_path):
    (tmp_path / "broken.py").write_text("import sys\nsys.exit(2)\n")
    with MCPSource(command=["python", "broken.py"], base_dir=tmp_path, limits=LIMITS, connect_timeout_s=30) as src:
        r = src.call("lookup", {"key": "x"})
        assert (r.ok, r.error_kind) == (False, "crash")
        with pytest.raises(RuntimeError, match="MCP server"):
            src.tools()


@pytest.mark.slow
def test_a_server_that_never_answers_the_handshake_is_a_connect_timeout():
    silent = ["python", "-c", "import time; time.sleep(60)"]
    with MCPSource(command=silent, limits=LIMITS, connect_timeout_s=1) as src:
        r = src.call("lookup", {"key": "x"})
        assert (r.ok, r.error_kind) == (False, "timeout") and "connect_timeout_s" in r.error


def test_close_is_idempotent_and_a_closed_source_still_answers():
    src = MCPSource(command=[sys.executable, str(SERVER)], limits=LIMITS)
    assert src.call("lookup", {"key": "capital:france"}).content == "Paris"
    src.close()
    src.close()
    r = src.call("lookup", {"key": "capital:france"})
    assert (r.ok, r.error_kind) == (False, "crash")
    assert [t["function"]["name"] for t in src.tools()][:2] == ["convert_units", "lookup"]   # the listing stays


@pytest.mark.parametrize("spec, field", [
    ({"kind": "mcp"}, "command"),
    ({"kind": "mcp", "command": ["python"], "url": "http://127.0.0.1:1/mcp"}, "command"),
    ({"kind": "mcp", "command": []}, "command"),
    ({"kind": "mcp", "url": "ftp://x"}, "url"),
    ({"kind": "mcp", "url": "http://127.0.0.1:1/mcp", "env": {"A": "1"}}, "env"),
    ({"kind": "mcp", "command": ["python"], "headers": {"A": "1"}}, "headers"),
    ({"kind": "mcp", "command": ["python"], "env": {"A": 1}}, "env"),
    ({"kind": "mcp", "command": ["python"], "cwd": "no/such/dir"}, "cwd"),
])
def test_bad_mcp_specs_name_the_field(spec, field, tmp_path):
    with pytest.raises(ValueError, match=f"'{field}'"):
        source_from_spec(spec, base_dir=tmp_path)


def test_result_text_joins_text_parts_and_falls_back_to_structured_content():
    from mcp_types import CallToolResult, ImageContent, TextContent

    both = CallToolResult(content=[TextContent(type="text", text="a"), TextContent(type="text", text="b")],
                          structured_content={"x": 1})
    assert _content_text(both) == "a\nb"              # the text already carries the structured content
    only = CallToolResult(content=[], structured_content={"x": "é"})
    assert json.loads(_content_text(only)) == {"x": "é"} and "é" in _content_text(only)
    image = CallToolResult(content=[ImageContent(type="image", data="QUJD", mime_type="image/png")])
    assert _content_text(image) == "[image (image/png), 4 base64 characters]"
