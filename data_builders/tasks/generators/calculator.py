"""CalculatorEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): exact integer arithmetic, When2Tool's
expression shapes per difficulty."""
from __future__ import annotations

import ast
import random
from typing import Callable

from .common import Draw, EnvGenerator

TOOLS = ("evaluate_expression", "get_last_result", "clear_last_result")


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


def make(difficulty: str, r: random.Random) -> Draw:
    prefix, draw = _CALC[difficulty]
    expr = draw(r)
    return prefix + expr, str(_eval_int(expr)), {}


GENERATOR = EnvGenerator("CalculatorEnv", "calculator", tools=lambda difficulty: TOOLS, make=make)


# --------------------------------------------------------------------------- multi-hop (When2Tool env 16)

MULTIHOP_PREFIX = "Three-step computation: "


def _step(r: random.Random, difficulty: str, var: str) -> str:
    """One follow-up step on ``var`` with an operand sized per difficulty, as the benchmark's multi-hop
    chains are."""
    if difficulty == "easy":
        op = r.choice("+-*")
        return f"{var}{op}{r.randint(2, 20) if op != '*' else r.randint(2, 10)}"
    if difficulty == "medium":
        op = r.choice(("+", "-", "*", "//", "%"))
        operand = {"+": r.randint(10, 350), "-": r.randint(10, 300), "*": r.randint(2, 25),
                   "//": r.randint(2, 300), "%": r.randint(3, 150)}[op]
        return f"{var}{op}{operand}"
    op = r.choice(("+", "-", "*", "//", "%"))
    operand = {"+": r.randint(10 ** 8, 10 ** 11), "-": r.randint(10 ** 6, 10 ** 9), "*": r.randint(10 ** 5, 10 ** 8),
               "//": r.randint(3, 19), "%": r.randint(10 ** 6, 10 ** 8)}[op]
    return f"{var}{op}{operand}"


def _first(r: random.Random, difficulty: str) -> str:
    if difficulty == "easy":
        a, b = r.randint(3, 40), r.randint(2, 15)
        return r.choice((f"{a}+{b}", f"{max(a, b + 1)}-{b}", f"{r.randint(3, 15)}*{r.randint(3, 15)}"))
    if difficulty == "medium":
        return r.choice((f"{r.randint(100, 999)}+{r.randint(100, 400)}", f"{r.randint(150, 999)}*{r.randint(5, 45)}",
                         f"{r.randint(400, 999)}-{r.randint(100, 399)}"))
    big = lambda lo, hi: r.randint(10 ** lo, 10 ** hi)  # noqa: E731 - local shorthand
    return r.choice((f"{big(10, 11)}+{big(9, 10)}", f"{big(10, 11)}*{big(11, 12)}", f"({big(8, 9)}**2)",
                     f"{big(10, 12)}-{big(9, 11)}"))


def make_multihop(difficulty: str, r: random.Random) -> Draw:
    e1, e2, e3 = _first(r, difficulty), _step(r, difficulty, "x"), _step(r, difficulty, "y")
    x = _eval_int(e1)
    y = _eval_int(e2.replace("x", f"({x})"))
    z = _eval_int(e3.replace("y", f"({y})"))
    instruction = (f"{MULTIHOP_PREFIX}First compute x = {e1}. Then compute y = {e2}. Finally compute z = {e3}. "
                   "Return only z.")
    return instruction, str(z), {}, [str(x), str(y), str(z)]


MULTIHOP_GENERATOR = EnvGenerator("CalculatorEnv", "calculator", tools=lambda difficulty: TOOLS, make=make_multihop,
                                  multi_hop=True)
