"""A small MCP server for the tool-source tests, written with the SDK's MCPServer and run as a real process.

    python mcp_server_fixture.py                      # stdio
    python mcp_server_fixture.py --http PORT          # streamable HTTP on 127.0.0.1:PORT, path /mcp

Besides two ordinary tools it has the misbehaviours a source must survive: a call that hangs, a process that
dies mid-call, an answer too long to show, and a tool that raises.
"""
from __future__ import annotations

import os
import sys
import time

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

# WARNING: the SDK logs each failing call at INFO, which would only clutter the test output.
server = MCPServer("toolwise-fixture", log_level="WARNING")

_FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mi": 1609.344, "ft": 0.3048}
_TABLE = {"capital:france": "Paris", "capital:japan": "Tokyo"}


@server.tool()
def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a length between units (m, km, cm, mi, ft)."""
    return round(value * _FACTORS[from_unit] / _FACTORS[to_unit], 6)


@server.tool()
def lookup(key: str) -> str:
    """Look a key up in a small fact table."""
    return _TABLE.get(key, "not found")


@server.tool()
def whoami() -> str:
    """The server's process id (the tests check that a reconnect started a new process)."""
    return str(os.getpid())


@server.tool()
def hang(seconds: float) -> str:
    """Block for the given number of seconds."""
    time.sleep(seconds)
    return "woke up"


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(1)


@server.tool()
def flood(n: int) -> str:
    """Return a string of n characters."""
    return "x" * n


@server.tool()
def fail() -> str:
    """Fail the way a tool reports an error to the model (the SDK hides the text of any other exception)."""
    raise ToolError("this tool always fails")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
