"""MatrixEnv: the matrix literal in the instruction, ``matrix_trace`` for "trace" questions and
``matrix_determinant`` otherwise; the integer result is the answer."""
from __future__ import annotations

import ast
import re

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_MATRIX = re.compile(r"\[\[[-\d., \[\]]*\]\]")


def solve(task: Task, call: CallFn) -> str:
    m = _MATRIX.search(task.instruction)
    if m is None:
        raise OracleParseError("no matrix literal in the instruction")
    if re.search(r"\btrace\b", task.instruction):
        tool = "matrix_trace"
    elif re.search(r"\bdeterminant\b", task.instruction):
        tool = "matrix_determinant"
    else:
        raise OracleParseError("neither a trace nor a determinant question")
    out = call(tool, {"matrix": ast.literal_eval(m.group(0))})
    return str(out["result"])


SOLVERS = {("MatrixEnv", False): solve}
