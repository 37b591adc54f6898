"""Bounded evaluation of one arithmetic Python expression (Calculator's ``evaluate_expression``,
docs/guide.md#when2tool-environments).

The expression comes from model output, so it is untrusted. The original benchmark tool evaluated
it with Python semantics and no guard, which lets ``9**9**9`` hang the run. This module keeps the
exact Python semantics for everything the benchmark needs (big ints, ``/`` -> float, floor ``//``,
``%`` with the divisor's sign, numeric literal syntax such as ``1_000``/``0xff``/``1e3``, booleans as
ints) and adds guards so that *any* input finishes within milliseconds:

* only a whitelist of AST nodes is evaluated; anything else is ``ValueError("Unsupported
  expression")`` (complex literals included: they cannot be serialised to JSON);
* the evaluator is iterative (explicit stack), so a long ``1+1+...+1`` chain cannot raise
  ``RecursionError``; if CPython's own parser gives up on deep nesting, that becomes a ``ValueError``;
* every integer (literal, intermediate or final) is limited to :data:`MAX_INT_DIGITS` decimal
  digits, and ``**`` is refused *before* it is computed when its estimated size exceeds that limit;
* a work budget bounds the total cost of big-integer multiplications/divisions, because CPython's
  big-int division is quadratic and a 5000-character chain of 10,000-digit divisions would otherwise
  take around a second.

Digit counts are computed arithmetically (:func:`decimal_digits`) and never via ``str(int)``, so this
module neither needs nor changes ``sys.set_int_max_str_digits``: mutating that interpreter-wide
setting from a library would silently change behaviour for unrelated code.
"""
from __future__ import annotations

import ast
import math
import operator
from typing import Callable, Union

Number = Union[int, float]

# The When2Tool harness raises Python's int->str limit to 10,000 digits; an integer
# above that could never be reported by the original tool, so nothing larger is worth computing.
MAX_INT_DIGITS = 10_000
# Defensive bound for direct callers; the tool pipeline already rejects strings over 5000 chars.
MAX_EXPRESSION_CHARS = 10_000
# Total big-int work allowed per expression, in 30-bit-limb products (~1-2 ns each): ~0.1 s at most.
WORK_BUDGET = 60_000_000

_LOG10_2 = math.log10(2)


class ExpressionTooLarge(ValueError):
    """An integer exceeded :data:`MAX_INT_DIGITS`; the Calculator reports it as "Result too large"."""


def decimal_digits(n: int) -> int:
    """Number of decimal digits of ``|n|`` (``0`` has 1), without ``str()`` and its size limit."""
    n = abs(n)
    if n < 10**18:
        return len(str(n))
    # n lies in [2**(b-1), 2**b), so it has est or est+1 digits; the comparisons below make the
    # count exact even if the float estimate is off by one.
    est = int((n.bit_length() - 1) * _LOG10_2) + 1
    if n >= 10**est:
        return est + 1
    if n < 10 ** (est - 1):
        return est - 1
    return est


def _limbs(x: Number) -> int:
    return x.bit_length() // 30 + 1 if isinstance(x, int) else 1


class _Evaluator:
    def __init__(self) -> None:
        self.work = 0

    def charge(self, cost: int) -> None:
        self.work += cost
        if self.work > WORK_BUDGET:
            raise ValueError("Expression too expensive to evaluate")

    def check(self, value: Number) -> Number:
        if isinstance(value, complex):
            # e.g. (-8) ** 0.5; JSON has no complex numbers.
            raise ValueError("Complex result not supported")
        # Cheap bit-length pre-filter; 10,000 digits need at least 33,216 bits.
        if isinstance(value, int) and value.bit_length() > 33_000 and decimal_digits(value) > MAX_INT_DIGITS:
            raise ExpressionTooLarge(f"Integer exceeds {MAX_INT_DIGITS} digits")
        return value

    def power(self, base: Number, exp: Number) -> Number:
        if isinstance(base, int) and isinstance(exp, int) and exp > 0 and abs(base) > 1:
            # Refuse before computing: the result has about exp*log10|base| digits. Compare in
            # bits first so a gigantic exponent never reaches float conversion.
            if exp.bit_length() > 64:
                raise ExpressionTooLarge(f"Integer exceeds {MAX_INT_DIGITS} digits")
            est_digits = exp * math.log10(abs(base))
            if est_digits > MAX_INT_DIGITS + 1:
                raise ExpressionTooLarge(f"Integer exceeds {MAX_INT_DIGITS} digits")
            result_limbs = int(est_digits / (30 * _LOG10_2)) + 1
            self.charge(result_limbs * result_limbs)
        # Other cases are cheap: float pow is O(1), |base| <= 1 stays small, and a negative int
        # exponent makes Python use float pow (OverflowError on huge operands, as in Python).
        return operator.pow(base, exp)


def _binop(fn: Callable[[Number, Number], Number], quadratic: bool):
    def apply(ev: _Evaluator, a: Number, b: Number) -> Number:
        ev.charge(_limbs(a) * _limbs(b) if quadratic else _limbs(a) + _limbs(b))
        return fn(a, b)

    return apply


_BINOPS = {
    ast.Add: _binop(operator.add, quadratic=False),
    ast.Sub: _binop(operator.sub, quadratic=False),
    ast.Mult: _binop(operator.mul, quadratic=True),
    ast.Div: _binop(operator.truediv, quadratic=True),
    ast.FloorDiv: _binop(operator.floordiv, quadratic=True),
    ast.Mod: _binop(operator.mod, quadratic=True),
    ast.Pow: lambda ev, a, b: ev.power(a, b),
}
_UNARYOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> Number:
    """Evaluate one arithmetic expression with Python semantics, or raise.

    Raises ``ValueError("Unsupported expression")`` for anything outside the whitelist,
    ``SyntaxError`` for bad syntax, ``ZeroDivisionError``/``OverflowError`` as Python would, and
    :class:`ExpressionTooLarge` when an integer would exceed :data:`MAX_INT_DIGITS` digits.
    """
    if not isinstance(expression, str):
        # Python's own error, as the original's ast.parse reports it (for 5: "compile() arg 1 must
        # be a string, bytes or AST object"); only bytes would parse, and JSON never yields them.
        ast.parse(expression, mode="eval")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"Expression too long (max {MAX_EXPRESSION_CHARS} characters)")
    try:
        tree = ast.parse(expression, mode="eval")
    except (RecursionError, MemoryError):
        # CPython's parser recurses per nesting level (e.g. 5000 unary minus signs).
        raise ValueError("Expression too deeply nested") from None

    ev = _Evaluator()
    values: list[Number] = []
    # Post-order traversal with an explicit stack: (node, children_done).
    stack: list[tuple[ast.AST, bool]] = [(tree.body, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise ValueError("Unsupported expression")
            if not done:
                stack.append((node, True))
                stack.append((node.right, False))
                stack.append((node.left, False))
                continue
            right = values.pop()
            left = values.pop()
            values.append(ev.check(op(ev, left, right)))
        elif isinstance(node, ast.UnaryOp):
            op = _UNARYOPS.get(type(node.op))
            if op is None:
                raise ValueError("Unsupported expression")
            if not done:
                stack.append((node, True))
                stack.append((node.operand, False))
                continue
            values.append(ev.check(op(values.pop())))
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            # bool is an int subclass, so True/False pass as 1/0 like in Python; complex does not.
            values.append(ev.check(node.value))
        else:
            raise ValueError("Unsupported expression")
    return values[0]
