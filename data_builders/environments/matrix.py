"""MatrixEnv (docs/guide.md#when2tool-environments): determinant, product and trace of list-of-lists matrices.

Entries are used exactly as given, with the original's plain Python operations, so whatever the
original computes is computed here too: ints stay exact (any size), floats stay floats, and
non-numbers follow Python (``[["a"]]`` has determinant ``"a"``, ``[[null]]`` has determinant ``null``,
while ``matrix_trace([["a"]])`` fails with ``TypeError: unsupported operand type(s) for +: 'int' and
'str'``). Float results depend on the order of operations, so the determinant follows the original's
recursion exactly: ``m00`` for 1x1, ``m00*m11 - m01*m10`` for 2x2, otherwise ``total += ((-1)**c *
m0c) * det(minor_0c)`` over the first row, from the integer 0; the product sums ``a_ik * b_kj``
left to right from 0.

Guards (each stops only a real hang or memory blow-up, never changes a result the original returns):

* **Determinant size.** Plain cofactor expansion costs n!/2 2x2 determinants: ~10 s at 10x10 and a
  hang from 11x11 in the original. Minors are memoised by their column set, which yields
  bit-identical results (each minor is still computed by the same sequence of operations) in
  O(n·2^n); sizes above :data:`MAX_DET_SIZE` are refused, as the original never answers them.
* **Work.** Instead of a dimension cap, each call's work is estimated before it starts
  (multiplications times the cost of one, which grows with the entries' big-int sizes) and refused
  above :data:`WORK_BUDGET` (several seconds of pure Python). A 120x120 product, 0.33 s in the
  original, runs; a 1000x1000 one (minutes) does not. The estimate is conservative for big ints
  (CPython multiplies them sub-quadratically), so a product that would take a few seconds with
  thousand-digit entries can be refused.
* **Sequence repetition.** ``"ab" * 10**12`` (a string or list entry times an integer) would fill
  memory. Such a repeated sequence can never reach a result: the next step of every tool adds or
  subtracts it (``0 + "…"``, ``"…" - x``), which raises a ``TypeError`` whose text depends only on
  the operand types. A repetition longer than :data:`MAX_REPEAT_ITEMS` is therefore replaced by an
  empty sequence of the same type, and the original's ``TypeError`` follows unchanged.
* **Unprintable integers.** A result integer longer than the interpreter's int->str limit (10,000
  digits in the When2Tool harness) cannot be serialised; the original would fail when its loop
  serialises the payload, here the call fails with Python's own ``ValueError`` text.
"""
from __future__ import annotations

import math
import sys
from functools import lru_cache
from typing import Any, Callable

from .base import ToolEnvironment
from .safe_arith import decimal_digits

MAX_DET_SIZE = 10
# Work units: OP_OVERHEAD per Python-level multiply-add plus one per product of two 30-bit limbs
# (quadratic, so big entries are over- rather than under-estimated). Measured at 1.3-3.4 ns per
# unit: a 120x120 small-int product (0.33 s in the original) costs ~9*10^7 and takes ~0.3 s, a
# 60x60 product of 1000-digit entries ~2.7*10^9 (~2.3 s), a 1000x1000 one ~5*10^10 (minutes).
OP_OVERHEAD = 50
WORK_BUDGET = 3_000_000_000
MAX_REPEAT_ITEMS = 10_000_000


def _limbs(x: Any) -> int:
    return x.bit_length() // 30 + 1 if isinstance(x, int) else 1


def _max_limbs(matrix: list) -> int:
    """Largest entry size in limbs; odd rows are skipped (the tool itself reports them)."""
    return max((_limbs(x) for row in matrix if isinstance(row, list) for x in row), default=1)


def _plain_mul(a: Any, b: Any) -> Any:
    return a * b


def _guarded_mul(a: Any, b: Any) -> Any:
    """``a * b``, except that an over-long sequence repetition yields an empty one of its type."""
    for seq, times in ((a, b), (b, a)):
        if (isinstance(seq, (str, list)) and isinstance(times, int)
                and MAX_REPEAT_ITEMS < len(seq) * times <= sys.maxsize):
            # Beyond sys.maxsize Python itself refuses without allocating (OverflowError or
            # MemoryError); below it the original would allocate the sequence (assumed to succeed).
            return type(seq)()
    return a * b


def _mul_for(*matrices: list) -> Callable[[Any, Any], Any]:
    numeric = all(isinstance(x, (int, float)) for m in matrices for row in m if isinstance(row, list) for x in row)
    return _plain_mul if numeric else _guarded_mul


def _check_printable(value: Any) -> None:
    """Raise Python's own error for an int the payload's serialisation could not print."""
    limit = sys.get_int_max_str_digits()
    # More than `limit` digits needs more than 3.32*limit bits: the bit test skips every normal int.
    if isinstance(value, int) and limit and value.bit_length() > limit * 3 and decimal_digits(value) > limit:
        raise ValueError(f"Exceeds the limit ({limit} digits) for integer string conversion; "
                         "use sys.set_int_max_str_digits() to increase the limit")


def determinant(matrix: list[list[Any]], mul: Callable[[Any, Any], Any] = _plain_mul) -> Any:
    """Cofactor expansion along the first row, with minors memoised by (remaining columns)."""
    n = len(matrix)

    @lru_cache(maxsize=None)
    def det(cols: tuple[int, ...]) -> Any:
        # The minor made of the last len(cols) rows and the given columns (ascending, as the
        # original builds its sub-matrices).
        top = n - len(cols)
        if len(cols) == 1:
            return matrix[top][cols[0]]
        if len(cols) == 2:
            a, b = matrix[top][cols[0]], matrix[top][cols[1]]
            c, d = matrix[top + 1][cols[0]], matrix[top + 1][cols[1]]
            return mul(a, d) - mul(b, c)
        total: Any = 0
        for i, col in enumerate(cols):
            total += mul(mul((-1) ** i, matrix[top][col]), det(cols[:i] + cols[i + 1:]))
        return total

    return det(tuple(range(n)))


def determinant_work(n: int, limbs: int) -> int:
    """Estimated work of :func:`determinant`: each k-minor (C(n,k) of them) takes k products of an
    entry with a (k-1)-minor, whose size is at most (k-1) entries' worth of limbs."""
    return sum(math.comb(n, k) * k * (OP_OVERHEAD + limbs * (k - 1) * limbs) for k in range(2, n + 1))


def _square_error(matrix: list) -> dict | None:
    n = len(matrix)
    for row in matrix:
        if len(row) != n:  # a non-sized row raises TypeError: a tool runtime error, as in the original
            return {"success": False, "message": "Matrix must be square."}
    return None


class MatrixEnv(ToolEnvironment):
    name = "MatrixEnv"

    def matrix_determinant(self, matrix: list) -> dict:
        n = len(matrix)
        if n == 0:
            return {"success": False, "message": "Empty matrix."}
        err = _square_error(matrix)
        if err:
            return err
        if n > MAX_DET_SIZE:
            return {"success": False, "message": f"Matrix too large for cofactor expansion ({n}x{n}, "
                                                 f"max {MAX_DET_SIZE}x{MAX_DET_SIZE})."}
        if determinant_work(n, _max_limbs(matrix)) > WORK_BUDGET:
            return {"success": False, "message": f"Matrix entries too large for cofactor expansion "
                                                 f"({n}x{n}, estimated work over {WORK_BUDGET})."}
        result = determinant(matrix, _mul_for(matrix))
        _check_printable(result)
        return {"success": True, "result": result, "matrix_size": f"{n}x{n}", "method": "cofactor_expansion"}

    def matrix_multiply(self, matrix_a: list, matrix_b: list) -> dict:
        # Column counts come from the first row (ragged later rows raise IndexError when used).
        ra, ca = len(matrix_a), (len(matrix_a[0]) if matrix_a else 0)
        rb, cb = len(matrix_b), (len(matrix_b[0]) if matrix_b else 0)
        if ca != rb:
            return {"success": False, "message": f"Incompatible dimensions: {ra}x{ca} and {rb}x{cb}."}
        work = ra * ca * cb * (OP_OVERHEAD + _max_limbs(matrix_a) * _max_limbs(matrix_b)) + ra * cb
        if work > WORK_BUDGET:
            return {"success": False, "message": f"Matrix product too large ({ra}x{ca} * {rb}x{cb}, "
                                                 f"estimated work over {WORK_BUDGET})."}
        mul = _mul_for(matrix_a, matrix_b)
        result = []
        for i in range(ra):
            row = []
            for j in range(cb):
                val: Any = 0  # left-to-right from the integer 0, like sum()
                for k in range(ca):
                    val = val + mul(matrix_a[i][k], matrix_b[k][j])
                row.append(val)
            result.append(row)
        for row in result:
            for x in row:
                _check_printable(x)
        return {"success": True, "result": result, "dimensions": f"{ra}x{ca} * {rb}x{cb} = {ra}x{cb}"}

    def matrix_trace(self, matrix: list) -> dict:
        # Additions only: linear in the input, no work estimate needed.
        n = len(matrix)
        err = _square_error(matrix)
        if err:
            return err
        diag = [matrix[i][i] for i in range(n)]
        total: Any = 0
        for x in diag:
            total = total + x
        _check_printable(total)
        return {"success": True, "result": total, "diagonal_elements": diag, "matrix_size": f"{n}x{n}"}
