"""MatrixEnv (SPEC §3.4): determinant, product and trace of list-of-lists matrices.

Entries are used as given (ints stay exact ints, floats stay floats), so the float results depend
on the order of operations; the determinant therefore follows the original's recursion exactly:
``m00`` for 1x1, ``m00*m11 - m01*m10`` for 2x2, otherwise a sum, starting from the integer 0, of
``((-1)**c * m0c) * det(minor_0c)`` over the first row.

Deviations from the original (guards; none changes a result the original could return in
reasonable time):

* **Determinant size.** Plain cofactor expansion costs n!/2 2x2 determinants (about 10 s at
  10x10 in Python). Minors are memoised by their column set, which yields bit-identical results
  (each minor is still computed by the same sequence of operations) in O(n·2^n), and sizes above
  :data:`MAX_DET_SIZE` are refused with a clear message.
* **Product size.** A 1000x1000 by 1000x1000 product would take minutes; products needing more
  than :data:`MAX_PRODUCT_OPS` multiplications are refused.
* **Entries.** Only real numbers are accepted. In the original a string or list entry almost
  always ends in a ``TypeError`` anyway, but ``"x" * 10**15`` (string repetition) would exhaust
  memory first. Integer entries are capped at 10^15 in magnitude, like top-level integer
  arguments (SPEC §2.2), which keeps every result far below the int->str limit.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from .base import MAX_INT_ARG, ToolEnvironment

MAX_DET_SIZE = 10
MAX_PRODUCT_OPS = 1_000_000


def _check_entries(name: str, matrix: list) -> None:
    """Raise (a tool runtime error) unless every entry is a real number of bounded size."""
    for row in matrix:
        if not isinstance(row, list):
            raise TypeError(f"{name} rows must be lists, got {type(row).__name__}")
        for x in row:
            if not isinstance(x, (int, float)):  # bool is an int, as in Python arithmetic
                raise TypeError(f"{name} entries must be numbers, got {type(x).__name__}")
            if isinstance(x, int) and abs(x) > MAX_INT_ARG:
                raise ValueError(f"{name} entry too large (max {MAX_INT_ARG}).")


def determinant(matrix: list[list[Any]]) -> Any:
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
            return a * d - b * c
        total: Any = 0
        for i, col in enumerate(cols):
            total += ((-1) ** i) * matrix[top][col] * det(cols[:i] + cols[i + 1:])
        return total

    return det(tuple(range(n)))


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
        _check_entries("matrix", matrix)
        return {"success": True, "result": determinant(matrix), "matrix_size": f"{n}x{n}",
                "method": "cofactor_expansion"}

    def matrix_multiply(self, matrix_a: list, matrix_b: list) -> dict:
        # Column counts come from the first row (ragged later rows raise IndexError when used).
        ra, ca = len(matrix_a), (len(matrix_a[0]) if matrix_a else 0)
        rb, cb = len(matrix_b), (len(matrix_b[0]) if matrix_b else 0)
        if ca != rb:
            return {"success": False, "message": f"Incompatible dimensions: {ra}x{ca} and {rb}x{cb}."}
        if ra * ca * cb > MAX_PRODUCT_OPS:
            return {"success": False, "message": f"Matrix product too large ({ra}x{ca} * {rb}x{cb}, "
                                                 f"max {MAX_PRODUCT_OPS} multiplications)."}
        _check_entries("matrix_a", matrix_a)
        _check_entries("matrix_b", matrix_b)
        result = []
        for i in range(ra):
            row = []
            for j in range(cb):
                val: Any = 0  # left-to-right from the integer 0, like sum()
                for k in range(ca):
                    val = val + matrix_a[i][k] * matrix_b[k][j]
                row.append(val)
            result.append(row)
        return {"success": True, "result": result, "dimensions": f"{ra}x{ca} * {rb}x{cb} = {ra}x{cb}"}

    def matrix_trace(self, matrix: list) -> dict:
        n = len(matrix)
        err = _square_error(matrix)
        if err:
            return err
        _check_entries("matrix", matrix)
        diag = [matrix[i][i] for i in range(n)]
        total: Any = 0
        for x in diag:
            total = total + x
        return {"success": True, "result": total, "diagonal_elements": diag, "matrix_size": f"{n}x{n}"}
