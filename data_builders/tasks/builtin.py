"""Built-in, deterministic When2Tool-style task generators for three environments.

A fresh clone has no copy of the When2Tool task files, so these generators let the project
train and test end to end on its own. They follow the When2Tool schema and gold formats
(SPEC §1.2, §1.3) for CalculatorEnv, HistoricalYearEnv and ListManipulationEnv, but the
tasks are generated here, never copied from the benchmark.

Guarantees:

* **Deterministic.** Every (environment, difficulty, split, seed) cell draws from its own
  ``random.Random`` seeded from a SHA-256 digest, so results do not depend on Python's salted
  ``hash()``, on the order of cells, or on which other environments were requested. A smaller
  ``n_per_cell`` yields a prefix of a larger one.
* **Train and test are disjoint for every pair of seeds.** Calculator and ListManipulation
  instructions belong to the split chosen by a hash of their text, and a cell keeps only
  its own split's instructions. HistoricalYear events are split by their position in the
  fact table (even positions train, odd positions test), so no event is asked in both splits.
  New events must therefore be *appended* to a fact file; inserting one in the middle would
  move later events to the other split.
"""
from __future__ import annotations

import ast
import hashlib
import json
import random
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Callable, Sequence

from .schema import DIFFICULTIES, ENV_CATEGORY, SPLITS, Task

__all__ = ["BUILTIN_ENVS", "HistoricalFact", "generate_builtin", "load_historical_facts"]

BUILTIN_ENVS = ("CalculatorEnv", "HistoricalYearEnv", "ListManipulationEnv")

# Tool lists exactly as When2Tool's task files give them (order included, SPEC §1.2).
_CALC_TOOLS = ("evaluate_expression", "get_last_result", "clear_last_result")
_HIST_TOOLS = ("lookup_year",)
_LIST_TOOLS = ("append", "remove", "insert", "sort", "reverse")
_LIST_TOOLS_EASY = ("append", "remove", "insert", "reverse")  # When2Tool hides `sort` on easy

_ENV_TAG = {"CalculatorEnv": "calculator", "HistoricalYearEnv": "historical_year", "ListManipulationEnv": "list"}

_SOURCE = "toolwise builtin generator"


# --------------------------------------------------------------------------- randomness


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode("utf-8")).digest()


def _cell_rng(env: str, difficulty: str, split: str, seed: int) -> random.Random:
    # Keyed by the cell only (not by n_per_cell), so larger requests extend smaller ones.
    return random.Random(int.from_bytes(_digest("toolwise.builtin", env, difficulty, split, seed)[:8], "big"))


def _owner_split(instruction: str) -> str:
    """The split an instruction may appear in; a fixed function of its text, independent of seed."""
    return SPLITS[_digest("toolwise.builtin.split", instruction)[0] & 1]


# --------------------------------------------------------------------------- Calculator


def _eval_int(expr: str) -> int:
    """Exact integer value of a generated expression, without ``eval``.

    Only integer literals and ``+ - * // % **`` are accepted, so a generator bug that produced
    anything else (a float, a name, true division) fails here instead of yielding a wrong gold.
    """
    ops: dict[type, Callable[[int, int], int]] = {
        ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b,
    }

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError(f"division by zero in generated expression {expr!r}")
            if isinstance(node.op, ast.Pow) and not 0 <= right <= 3:
                raise ValueError(f"unexpected exponent in generated expression {expr!r}")
            return ops[type(node.op)](left, right)
        raise ValueError(f"unsupported syntax in generated expression {expr!r}")

    return walk(ast.parse(expr, mode="eval").body)


def _calc_easy(r: random.Random) -> str:
    # When2Tool's five easy shapes; small operands, results never negative.
    shape = r.randrange(5)
    if shape == 0:
        return f"{r.randint(2, 40)}+{r.randint(2, 40)}"
    if shape == 1:
        a = r.randint(10, 60)
        return f"{a}-{r.randint(2, a - 1)}"
    if shape == 2:
        return f"{r.randint(3, 15)}*{r.randint(3, 15)}"
    if shape == 3:
        a, b = r.randint(2, 40), r.randint(2, 35)
        return f"({a}+{b})-{r.randint(1, min(25, a + b - 1))}"
    return f"({r.randint(2, 15)}*{r.randint(2, 15)})+{r.randint(1, 30)}"


def _calc_medium(r: random.Random) -> str:
    # 3-digit working numbers; divisors and moduli are drawn from ranges that exclude 0.
    shape = r.randrange(5)
    if shape == 0:
        return f"({r.randint(100, 999)}*{r.randint(5, 150)})-{r.randint(20, 300)}+{r.randint(10, 300)}"
    if shape == 1:
        return f"(({r.randint(100, 999)}+{r.randint(10, 150)})*{r.randint(3, 25)})-{r.randint(20, 300)}"
    if shape == 2:
        return (f"({r.randint(300, 3999)}//{r.randint(3, 30)})+({r.randint(10, 300)}*{r.randint(20, 150)})"
                f"-{r.randint(10, 300)}")
    if shape == 3:
        return f"({r.randint(500, 6999)}%{r.randint(15, 250)})*{r.randint(5, 35)}+{r.randint(20, 300)}"
    return f"(({r.randint(200, 999)}*{r.randint(200, 999)})+{r.randint(10, 300)})//{r.randint(3, 30)}"


def _calc_hard(r: random.Random) -> str:
    # Operands in 10^5..10^12, except the exponent 2 and a small floor divisor, as in When2Tool.
    big = lambda lo, hi: r.randint(10 ** lo, 10 ** hi)  # noqa: E731 - local shorthand
    shape = r.randrange(5)
    if shape == 0:
        return f"({big(9, 11)}*{big(10, 12)})-{big(7, 9)}"
    if shape == 1:
        return f"({big(8, 9)}**2)+{big(10, 11)}"
    if shape == 2:
        return f"(({big(10, 12)}*{big(10, 12)})//{r.randint(3, 19)})-{big(7, 9)}"
    if shape == 3:
        return f"(({big(10, 12)}+{big(9, 11)})*{big(9, 11)})%{big(6, 8)}"
    return f"(({big(9, 11)}*{big(11, 12)})+({big(5, 7)}*{big(5, 7)})-{big(8, 9)})"


_CALC = {"easy": ("Answer with only the number: ", _calc_easy),
         "medium": ("Compute exactly and return only number: ", _calc_medium),
         "hard": ("Compute exactly and return only number: ", _calc_hard)}


def _make_calculator(difficulty: str, r: random.Random) -> tuple[str, str, dict[str, Any]]:
    prefix, draw = _CALC[difficulty]
    expr = draw(r)
    return prefix + expr, str(_eval_int(expr)), {}


# --------------------------------------------------------------------------- ListManipulation


def _apply_list_op(values: list, op: str, *, value: Any = None, index: int | None = None,
                   axis: int | None = None) -> list:
    """Result of one ListManipulationEnv operation (SPEC §3.10) on int lists, as a new list.

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


def _make_list(difficulty: str, r: random.Random) -> tuple[str, str, dict[str, Any]]:
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


# --------------------------------------------------------------------------- HistoricalYear


@dataclass(frozen=True)
class HistoricalFact:
    event: str      # corpus key and the phrase asked about
    year: int       # gold answer
    paragraph: str  # corpus value; contains the year verbatim


HIST_INSTRUCTION = "In what year was {event}? Answer with only the year as a number."


@lru_cache(maxsize=None)
def load_historical_facts(difficulty: str) -> tuple[HistoricalFact, ...]:
    """The HistoricalYear fact table of one difficulty, in its fixed (corpus) order.

    easy: well-known real events; medium: less-known real events; hard: fictional events.
    """
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty {difficulty!r} not in {DIFFICULTIES}")
    name = f"historical_{difficulty}.json"
    package = __name__.rpartition(".")[0]
    text = resources.files(package).joinpath("facts").joinpath(name).read_text(encoding="utf-8")
    facts, seen = [], set()
    for i, rec in enumerate(json.loads(text)):
        where = f"facts/{name}: entry {i}"
        event, year, paragraph = rec.get("event"), rec.get("year"), rec.get("paragraph")
        if not isinstance(event, str) or not event.strip():
            raise ValueError(f"{where}: 'event' must be a non-empty string")
        if type(year) is not int or year <= 0:
            raise ValueError(f"{where}: 'year' must be a positive integer (BC years as bare numbers)")
        if not isinstance(paragraph, str) or str(year) not in paragraph:
            raise ValueError(f"{where}: 'paragraph' must contain the year {year} verbatim")
        if event.lower() in seen:
            raise ValueError(f"{where}: duplicate event {event!r}")
        seen.add(event.lower())
        facts.append(HistoricalFact(event, year, paragraph))
    return tuple(facts)


def _historical_cell(difficulty: str, split: str, r: random.Random, n: int) -> list[tuple[str, str, dict[str, Any]]]:
    pool = load_historical_facts(difficulty)
    mine = [f for i, f in enumerate(pool) if SPLITS[i % 2] == split]
    out: list[tuple[str, str, dict[str, Any]]] = []
    # More tasks than events: walk fresh permutations, so repeats stay inside this split.
    while len(out) < n:
        order = list(mine)
        r.shuffle(order)
        for fact in order[: n - len(out)]:
            # Each task owns its corpus dict (the whole pool, fixed order) so mutating one task
            # cannot leak into another.
            corpus = {f.event: f.paragraph for f in pool}
            out.append((HIST_INSTRUCTION.format(event=fact.event), str(fact.year), {"corpus": corpus}))
    return out


# --------------------------------------------------------------------------- assembly


_MAKERS: dict[str, Callable[[str, random.Random], tuple[str, str, dict[str, Any]]]] = {
    "CalculatorEnv": _make_calculator,
    "ListManipulationEnv": _make_list,
}


def _sampled_cell(env: str, difficulty: str, split: str, r: random.Random, n: int) -> list[tuple[str, str, dict[str, Any]]]:
    make = _MAKERS[env]
    out, seen = [], set()
    budget = 100 * n + 1000  # half the draws belong to the other split; exhaustion means n is unreasonably large
    while len(out) < n:
        budget -= 1
        if budget < 0:
            raise ValueError(f"{env}/{difficulty}: could only generate {len(out)} distinct {split} tasks, "
                             f"asked for {n}")
        instruction, answer, params = make(difficulty, r)
        if instruction in seen or _owner_split(instruction) != split:
            continue
        seen.add(instruction)
        out.append((instruction, answer, params))
    return out


def _tools(env: str, difficulty: str) -> tuple[str, ...]:
    if env == "CalculatorEnv":
        return _CALC_TOOLS
    if env == "HistoricalYearEnv":
        return _HIST_TOOLS
    return _LIST_TOOLS_EASY if difficulty == "easy" else _LIST_TOOLS


def generate_builtin(split: str, *, n_per_cell: int = 20, seed: int = 0,
                     envs: Sequence[str] | None = None) -> list[Task]:
    """Generate ``n_per_cell`` single-hop tasks per (environment, difficulty) for ``split``.

    Tasks come in ``BUILTIN_ENVS`` order, then easy/medium/hard, then index; ids look like
    ``"builtin/calculator/easy/test/0007"`` so they never collide with When2Tool's integer ids.
    For HistoricalYear, a request larger than the split's share of a fact table repeats events
    (within the same split only).
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} not in {SPLITS}")
    if type(n_per_cell) is not int or n_per_cell < 0:
        raise ValueError(f"n_per_cell must be a non-negative integer, got {n_per_cell!r}")
    if type(seed) is not int:
        raise ValueError(f"seed must be an integer, got {seed!r}")
    wanted = BUILTIN_ENVS if envs is None else tuple(envs)
    unknown = sorted(set(wanted) - set(BUILTIN_ENVS))
    if unknown:
        raise ValueError(f"no built-in generator for {unknown}; available: {list(BUILTIN_ENVS)}")

    tasks: list[Task] = []
    for env in (e for e in BUILTIN_ENVS if e in wanted):
        tag = _ENV_TAG[env]
        for difficulty in DIFFICULTIES:
            r = _cell_rng(env, difficulty, split, seed)
            if env == "HistoricalYearEnv":
                cell = _historical_cell(difficulty, split, r, n_per_cell)
            else:
                cell = _sampled_cell(env, difficulty, split, r, n_per_cell)
            for i, (instruction, answer, params) in enumerate(cell):
                record = {
                    "id": f"builtin/{tag}/{difficulty}/{split}/{i:04d}",
                    "instruction": instruction,
                    "environments": [{"name": env, "tools": list(_tools(env, difficulty)), "parameters": params}],
                    "expected": {"answer": answer},
                    "difficulty": difficulty,
                    "multi_step": False,
                    "tags": [tag, "single_round"],
                    "category": ENV_CATEGORY[env],
                    "split": split,
                }
                tasks.append(Task.from_dict(record, source=_SOURCE, index=i))
    return tasks
