"""ListManipulationEnv (docs/guide.md#when2tool-environments): stateless list operations; each call receives the
current list.

Every call returns ``{"success", "message", "data": {"current_list"}}``: the list after the
operation, or the list as received (after input normalisation) when the operation fails.

A ``values`` that is not a list (``"5"`` decodes to the int 5) fails with the Python error of the
original's first step, ``arr[:] = ...``: ``[TOOL_RUNTIME_ERROR] TypeError: 'int' object does not
support item assignment``.
"""
from __future__ import annotations

import copy
from typing import Any

from .base import ToolEnvironment

try:  # The original sorts 2-D lists with NumPy; its dtype promotion is part of the observable output.
    import numpy as np
except ImportError:  # pragma: no cover - numpy ships with the torch/transformers stack
    np = None

OK = "ok"


def _normalize(values: Any) -> Any:
    # Some models wrap rows as [{"values": [...]}, ...]; accept that shape as a 2-D list.
    if isinstance(values, list) and values and all(
        isinstance(x, dict) and isinstance(x.get("values"), list) for x in values
    ):
        return [x["values"] for x in values]
    return values


def _is_2d(values: list) -> bool:
    return len(values) > 0 and all(isinstance(x, list) for x in values)


def _python_sort_2d(arr: list, axis: int) -> list:
    """Pure-Python NumPy-like sort, used when NumPy is missing or rejects the input (ragged rows,
    incomparable objects). Errors (TypeError, IndexError) propagate as tool runtime errors."""
    if np is None:
        flat = [x for row in arr for x in row]
        # Mirror NumPy's promotion for the common case: any float among plain numbers -> all floats.
        if all(type(x) in (int, float) for x in flat) and any(type(x) is float for x in flat):
            arr = [[float(x) for x in row] for row in arr]
    if axis == 1:
        return [sorted(row) for row in arr]
    n_cols = len(arr[0])
    out = [list(row) for row in arr]
    for c in range(n_cols):
        col = sorted(row[c] for row in arr)
        for r, x in enumerate(col):
            out[r][c] = x
    return out


def _sort_2d(arr: list, axis: int) -> list:
    if len(arr[0]) == 0:
        return arr  # empty 2-D list: nothing to sort
    if np is not None:
        try:
            return np.sort(np.asarray(arr), axis=axis).tolist()
        except Exception:
            pass
    return _python_sort_2d(arr, axis)


def _op_1d(arr: list, op: str, value: Any, index: Any) -> tuple[bool, str, list]:
    if op == "append":
        return True, OK, arr + [value]
    if op == "insert":
        if index is None:
            return False, "index is required for insert", arr
        if not isinstance(index, int):
            return False, "index must be integer for insert", arr
        if index < 0 or index > len(arr):
            return False, f"index {index} out of range", arr
        return True, OK, arr[:index] + [value] + arr[index:]
    if op == "remove":
        out = list(arr)
        try:
            out.remove(value)
        except ValueError:
            return False, f"value {value} not found", arr
        return True, OK, out
    if op == "sort":
        try:
            # sorted() on a copy: list.sort() can leave a partially sorted list behind on failure.
            return True, OK, sorted(arr)
        except TypeError:
            return False, "sort failed: list contains non-comparable element types", arr
    return True, OK, arr[::-1]  # reverse


def _op_2d(arr: list, op: str, value: Any, index: Any, axis: Any) -> tuple[bool, str, list]:
    if axis not in (0, 1):  # includes a missing axis (None)
        return False, "axis must be 0 or 1 for 2D operations", arr
    if op == "sort":
        return True, OK, _sort_2d(arr, axis)
    if op == "reverse":
        return True, OK, arr[::-1] if axis == 0 else [row[::-1] for row in arr]
    if op == "append":
        if axis == 1:
            return True, OK, [row + [copy.deepcopy(value)] for row in arr]
        if not isinstance(value, list):
            return False, "for axis=0 append, value must be a row list", arr
        if len(value) != len(arr[0]):
            return False, "appended row length mismatch", arr
        return True, OK, arr + [value]
    # remove / insert address a row or column by position.
    if index is None or not isinstance(index, int):
        return False, f"index(integer) is required for 2D {op}", arr
    if op == "remove":
        if axis == 0:
            if index < 0 or index >= len(arr):
                return False, f"row index {index} out of range", arr
            return True, OK, arr[:index] + arr[index + 1:]
        if any(index < 0 or index >= len(row) for row in arr):
            return False, f"column index {index} out of range", arr
        return True, OK, [row[:index] + row[index + 1:] for row in arr]
    # insert
    if axis == 0:
        if not isinstance(value, list):
            return False, "for axis=0 insert, value must be a row list", arr
        if len(value) != len(arr[0]):
            return False, "inserted row length mismatch", arr
        if index < 0 or index > len(arr):
            return False, f"row index {index} out of range", arr
        return True, OK, arr[:index] + [value] + arr[index:]
    if index < 0 or index > len(arr[0]):
        return False, f"column index {index} out of range", arr
    # list.insert clamps, so ragged shorter rows still get the value (as in the original).
    return True, OK, [row[:index] + [copy.deepcopy(value)] + row[index:] for row in arr]


class ListManipulationEnv(ToolEnvironment):
    name = "ListManipulationEnv"

    def _run(self, values: Any, op: str, value: Any = None, index: Any = None, axis: Any = None) -> dict:
        arr = _normalize(values)
        if not isinstance(arr, list):
            # e.g. values="5" JSON-decodes to an int. The original's first step on the list is
            # ``arr[:] = normalise(arr)``; doing the same gives its error text (for an int: "'int'
            # object does not support item assignment"), reported as a tool runtime error.
            arr[:] = arr
            # Only reached where slice assignment works on a non-list (a dict on Python >= 3.12,
            # where slices are hashable); the original would then fail on the dict's missing list
            # method, e.g. "'dict' object has no attribute 'reverse'".
            raise AttributeError(f"'{type(arr).__name__}' object has no attribute '{op}'")
        if _is_2d(arr):
            ok, msg, out = _op_2d(arr, op, value, index, axis)
        elif axis is not None:
            ok, msg, out = False, "axis is only valid for 2D lists", arr
        else:
            ok, msg, out = _op_1d(arr, op, value, index)
        # Deep copy so rows shared between the input and the output (or within the output) never alias.
        return {"success": ok, "message": msg, "data": {"current_list": copy.deepcopy(out)}}

    def append(self, values: list, value: Any, axis: int | None = None) -> dict:
        return self._run(values, "append", value=value, axis=axis)

    def remove(self, values: list, value: float | None = None, index: int | None = None,
               axis: int | None = None) -> dict:
        return self._run(values, "remove", value=value, index=index, axis=axis)

    def insert(self, values: list, index: int, value: Any, axis: int | None = None) -> dict:
        return self._run(values, "insert", value=value, index=index, axis=axis)

    def sort(self, values: list, axis: int | None = None) -> dict:
        return self._run(values, "sort", axis=axis)

    def reverse(self, values: list, axis: int | None = None) -> dict:
        return self._run(values, "reverse", axis=axis)
