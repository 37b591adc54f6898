"""ListManipulationEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): one operation on a 1-D or 2-D integer
list."""
from __future__ import annotations

import random
from typing import Any

from .common import Draw, EnvGenerator

TOOLS = ("append", "remove", "insert", "sort", "reverse")
TOOLS_EASY = ("append", "remove", "insert", "reverse")  # When2Tool hides `sort` on easy


def _apply_list_op(values: list, op: str, *, value: Any = None, index: int | None = None,
                   axis: int | None = None) -> list:
    """Result of one ListManipulationEnv operation (docs/guide.md#when2tool-environments) on int lists, as a new list.

    Only the success paths are needed for gold answers; invalid requests raise ``ValueError``
    with the environment's message so a generator bug cannot silently produce a wrong gold.
    """
    is_2d = bool(values) and all(isinstance(row, list) for row in values)
    out = [list(row) for row in values] if is_2d else list(values)
    if not is_2d:
        if axis is not None:
            raise ValueError("axis is only valid for 2D lists")
        if op == "append":
            out.append(value)
        elif op == "insert":
            if not 0 <= index <= len(out):
                raise ValueError(f"index {index} out of range")
            out.insert(index, value)
        elif op == "remove":
            if value not in out:
                raise ValueError(f"value {float(value)} not found")
            out.remove(value)
        elif op == "sort":
            out.sort()
        elif op == "reverse":
            out.reverse()
        else:
            raise ValueError(f"unknown operation {op!r}")
        return out

    if axis not in (0, 1):
        raise ValueError("axis must be 0 or 1 for 2D operations")
    width = len(out[0])
    if op == "sort":
        if axis == 1:
            return [sorted(row) for row in out]
        # axis=0 sorts every column on its own, like numpy.sort(axis=0).
        columns = [sorted(col) for col in zip(*out)]
        return [list(row) for row in zip(*columns)]
    if op == "reverse":
        return out[::-1] if axis == 0 else [row[::-1] for row in out]
    if op == "remove":
        if axis == 0:
            if not 0 <= index < len(out):
                raise ValueError(f"row index {index} out of range")
            del out[index]
        else:
            if not 0 <= index < width:
                raise ValueError(f"column index {index} out of range")
            for row in out:
                del row[index]
        return out
    if op in ("insert", "append"):
        if axis == 0:
            if not isinstance(value, list):
                raise ValueError(f"for axis=0 {op}, value must be a row list")
            if len(value) != width:
                raise ValueError(f"{op}ed row length mismatch")
            pos = len(out) if op == "append" else index
            if not 0 <= pos <= len(out):
                raise ValueError(f"row index {pos} out of range")
            out.insert(pos, list(value))
        else:
            pos = width if op == "append" else index
            if not 0 <= pos <= width:
                raise ValueError(f"column index {pos} out of range")
            for row in out:
                row.insert(pos, value)
        return out
    raise ValueError(f"unknown operation {op!r}")


# Operation mixes roughly follow When2Tool's per-difficulty frequencies.
_LIST_OPS = {
    "easy": (("remove", "insert", "append", "reverse"), (27, 22, 13, 8)),
    "medium": (("append", "remove", "sort", "reverse", "insert"), (18, 17, 15, 11, 9)),
    "hard": (("sort", "reverse", "remove", "insert", "append"), (23, 22, 11, 8, 6)),
}
_LIST_RANGES = {"easy": ((3, 4), (1, 40)), "medium": ((6, 8), (40, 260)), "hard": ((10, 13), (300, 5000))}


def make(difficulty: str, r: random.Random) -> Draw:
    (len_lo, len_hi), (lo, hi) = _LIST_RANGES[difficulty]
    names, weights = _LIST_OPS[difficulty]
    op = r.choices(names, weights)[0]
    if difficulty != "hard":
        values = [r.randint(lo, hi) for _ in range(r.randint(len_lo, len_hi))]
        if op == "remove":
            arg = r.choice(values)
            result, call = _apply_list_op(values, op, value=arg), f"remove({arg})"
        elif op == "insert":
            idx, arg = r.randint(0, len(values)), r.randint(lo, hi)
            result, call = _apply_list_op(values, op, index=idx, value=arg), f"insert(index={idx},value={arg})"
        elif op == "append":
            arg = r.randint(lo, hi)
            result, call = _apply_list_op(values, op, value=arg), f"append({arg})"
        else:
            result, call = _apply_list_op(values, op), f"{op}()"
        instruction = f"Single operation only. Initial {values}. Apply {call}. Return final list."
        return instruction, str(result), {}

    rows, cols = r.randint(len_lo, len_hi), r.randint(len_lo, len_hi)
    grid = [[r.randint(lo, hi) for _ in range(cols)] for _ in range(rows)]
    axis = r.randint(0, 1)
    if op in ("sort", "reverse"):
        result, call = _apply_list_op(grid, op, axis=axis), f"{op}(axis={axis})"
    elif op == "remove":
        idx = r.randrange(rows if axis == 0 else cols)
        result, call = _apply_list_op(grid, op, axis=axis, index=idx), f"remove(axis={axis},index={idx})"
    else:
        arg: Any = [r.randint(lo, hi) for _ in range(cols)] if axis == 0 else r.randint(lo, hi)
        if op == "insert":
            idx = r.randint(0, rows if axis == 0 else cols)
            result = _apply_list_op(grid, op, axis=axis, index=idx, value=arg)
            call = f"insert(axis={axis},index={idx},value={arg})"
        else:
            result, call = _apply_list_op(grid, op, axis=axis, value=arg), f"append(axis={axis},value={arg})"
    instruction = f"Single operation only on 2D list. Initial {grid}. Apply {call}. Return final 2D list."
    return instruction, str(result), {}


GENERATOR = EnvGenerator("ListManipulationEnv", "list",
                         tools=lambda difficulty: TOOLS_EASY if difficulty == "easy" else TOOLS, make=make)
