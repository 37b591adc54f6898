"""CalculatorEnv (docs/guide.md#when2tool-environments): exact arithmetic on one expression, with a one-value memory.

Matches the original's payloads, including Python's own errors (a non-string ``expression`` such as
5 gives ``TypeError: compile() arg 1 must be a string, bytes or AST object``, as its ``ast.parse``
does); the only deviations are the guards of :mod:`.safe_arith` (huge powers, complex results).
"""
from __future__ import annotations

import sys
from typing import Any

from .base import ToolEnvironment
from .safe_arith import MAX_INT_DIGITS, ExpressionTooLarge, decimal_digits, evaluate

MAX_RESULT_CHARS = 5000


def _too_large(what: str) -> dict:
    return {"success": False, "message": f"Result too large ({what} digits). Simplify the expression."}


class CalculatorEnv(ToolEnvironment):
    name = "CalculatorEnv"

    def __init__(self, parameters: dict | None = None, tools=None):
        super().__init__(parameters, tools)
        # Episode memory; starts from parameters.last_result (absent in shipped tasks -> empty).
        self.last_result: Any = self.parameters.get("last_result")

    def evaluate_expression(self, expression: str) -> dict:
        try:
            value = evaluate(expression)
        except ExpressionTooLarge:
            # The guard stopped before the exact size was known (the original would hang here).
            return _too_large(f"more than {MAX_INT_DIGITS}")
        if isinstance(value, int):
            # len(str(value)) counted arithmetically, so no int->str limit is involved.
            length = decimal_digits(value) + (value < 0)
            # A result the interpreter's int->str limit cannot print (4300 digits by default; the
            # When2Tool harness sets 10,000) would make the payload unserialisable, so it is
            # reported as too large rather than returned.
            str_limit = sys.get_int_max_str_digits()
            if length > MAX_RESULT_CHARS or (str_limit and decimal_digits(value) > str_limit):
                return _too_large(str(length))
        self.last_result = value
        return {"success": True, "result": value, "expression": expression}

    def get_last_result(self) -> dict:
        if self.last_result is None:
            return {"success": False, "message": "No previous result available."}
        return {"success": True, "data": {"last_result": self.last_result}}

    def clear_last_result(self) -> dict:
        self.last_result = None
        return {"success": True}
