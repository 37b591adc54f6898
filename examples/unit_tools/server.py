"""An MCP server for the "Bring your own tools" example: unit conversion, a lookup table, a search over a corpus.

    python examples/unit_tools/server.py          # stdio, as the example's task file starts it

Written with the official MCP SDK's ``MCPServer``; toolwise knows nothing of it beyond what the protocol says
(its tools' names, descriptions and input schemas, and their results). The table and the corpus are made up
(``data.json``), so that a model cannot know their answers and must call the tool, while the conversions are
ones a small model may or may not know by heart: exactly the mix a gate has to learn to tell apart.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

DATA = json.loads((Path(__file__).with_name("data.json")).read_text(encoding="utf-8"))
server = MCPServer("toolwise-unit-tools", log_level="WARNING")

# ToolError, not ValueError: the SDK shows the model a ToolError's text and hides any other exception's.
# Factors to one base unit per dimension; temperature is affine and handled apart.
UNITS = {
    "length": {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "mi": 1609.344, "yd": 0.9144, "ft": 0.3048,
               "in": 0.0254},
    "mass": {"kg": 1.0, "g": 0.001, "lb": 0.45359237, "oz": 0.028349523125, "t": 1000.0},
    "volume": {"l": 1.0, "ml": 0.001, "gal": 3.785411784, "qt": 0.946352946, "cup": 0.2365882365},
}
TEMPERATURE = {"C", "F", "K"}


def _to_celsius(value: float, unit: str) -> float:
    return {"C": value, "F": (value - 32) * 5 / 9, "K": value - 273.15}[unit]


def _from_celsius(value: float, unit: str) -> float:
    return {"C": value, "F": value * 9 / 5 + 32, "K": value + 273.15}[unit]


@server.tool()
def convert_units(value: float, from_unit: str, to_unit: str) -> float:
    """Convert a quantity between units of length (m, km, cm, mm, mi, yd, ft, in), mass (kg, g, lb, oz, t),
    volume (l, ml, gal, qt, cup) or temperature (C, F, K). Returns the converted value rounded to 4 decimals."""
    if from_unit in TEMPERATURE and to_unit in TEMPERATURE:
        return round(_from_celsius(_to_celsius(value, from_unit), to_unit), 4)
    for factors in UNITS.values():
        if from_unit in factors and to_unit in factors:
            return round(value * factors[from_unit] / factors[to_unit], 4)
    raise ToolError(f"cannot convert {from_unit!r} to {to_unit!r}")


@server.tool()
def lookup(table: str, key: str) -> str:
    """Look up a key in one of the tables: warehouses (a warehouse code -> its city), parts (a part number ->
    its weight in grams), staff (an employee id -> their name)."""
    rows = DATA["tables"].get(table)
    if rows is None:
        raise ToolError(f"no table {table!r}; tables: {sorted(DATA['tables'])}")
    return str(rows.get(key, "not found"))


@server.tool()
def search(query: str, k: int = 3) -> list[dict]:
    """Search the product notes for a query; returns the k best notes (title and text) by word overlap."""
    words = set(re.findall(r"\w+", query.lower()))
    scored = sorted(DATA["notes"], key=lambda n: -len(words & set(re.findall(r"\w+", (n["title"] + " " +
                                                                                     n["text"]).lower()))))
    return scored[:max(1, min(int(k), 5))]


if __name__ == "__main__":
    server.run()
