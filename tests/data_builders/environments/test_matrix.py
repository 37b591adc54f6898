"""MatrixEnv: every tool, exact payloads, error messages, float semantics and guards."""
from __future__ import annotations

import random
import sys
import time

import pytest

from data_builders.environments import serialize
from data_builders.environments.matrix import WORK_BUDGET, MatrixEnv


def call(tool, **arguments):
    return MatrixEnv().call(tool, arguments)


def det_ok(result, n):
    return {"success": True, "result": result, "matrix_size": f"{n}x{n}", "method": "cofactor_expansion"}


def fail(message):
    return {"success": False, "message": message}


def reference_det(m):
    """Plain (unmemoised) first-row cofactor recursion, as the original computes it."""
    n = len(m)
    if n == 1:
        return m[0][0]
    if n == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    total = 0
    for c in range(n):
        minor = [[m[r][j] for j in range(n) if j != c] for r in range(1, n)]
        total += ((-1) ** c) * m[0][c] * reference_det(minor)
    return total


def test_determinant_exact_integers():
    assert call("matrix_determinant", matrix=[[7]]) == det_ok(7, 1)
    assert call("matrix_determinant", matrix=[[10, -5], [-1, 3]]) == det_ok(25, 2)
    assert call("matrix_determinant", matrix=[[10, 11, 14], [12, 3, 15], [10, 3, 8]]) == det_ok(468, 3)
    # a When2Tool hard-task matrix (gold 372045)
    m4 = [[-12, 11, -12, -3], [-12, 6, 26, 3], [7, 22, 15, -19], [24, 24, -15, -3]]
    assert call("matrix_determinant", matrix=m4) == det_ok(372045, 4)
    out = call("matrix_determinant", matrix=[[2, 0], [0, 3]])
    assert list(out) == ["success", "result", "matrix_size", "method"] and type(out["result"]) is int
    assert serialize(out) == '{"success": true, "result": 6, "matrix_size": "2x2", "method": "cofactor_expansion"}'


def test_determinant_floats_stay_floats_bit_for_bit():
    assert call("matrix_determinant", matrix=[[1.5, 2], [3, 4]])["result"] == 0.0
    assert type(call("matrix_determinant", matrix=[[1.5, 2], [3, 4]])["result"]) is float
    r = random.Random(7)
    for n in range(3, 8):
        m = [[r.uniform(-9, 9) for _ in range(n)] for _ in range(n)]
        got = call("matrix_determinant", matrix=m)["result"]
        assert repr(got) == repr(reference_det(m))  # memoisation keeps every rounding step


def test_determinant_errors():
    assert call("matrix_determinant", matrix=[]) == fail("Empty matrix.")
    assert call("matrix_determinant", matrix=[[1, 2]]) == fail("Matrix must be square.")
    assert call("matrix_determinant", matrix=[[1, 2], [3]]) == fail("Matrix must be square.")
    assert call("matrix_determinant", matrix={"a": 1}) == fail("Parameter matrix should have type array.")
    assert call("matrix_determinant", matrix="[[1, 2], [3, 4]]") == det_ok(-2, 2)  # JSON-string array


def test_determinant_size_guard():
    # Guard (deviation): plain cofactor expansion is n!/2 2x2 determinants; memoised, 10x10 is instant.
    r = random.Random(3)
    m10 = [[r.randint(-50, 50) for _ in range(10)] for _ in range(10)]
    start = time.perf_counter()
    out = call("matrix_determinant", matrix=m10)
    assert time.perf_counter() - start < 0.5
    assert out["success"] and out["matrix_size"] == "10x10"
    # cross-check against exact Fraction elimination
    from fractions import Fraction
    a = [[Fraction(x) for x in row] for row in m10]
    det = Fraction(1)
    for i in range(10):
        p = next(k for k in range(i, 10) if a[k][i] != 0)
        if p != i:
            a[i], a[p], det = a[p], a[i], -det
        det *= a[i][i]
        for k in range(i + 1, 10):
            f = a[k][i] / a[i][i]
            a[k] = [x - f * y for x, y in zip(a[k], a[i])]
    assert out["result"] == det
    m11 = [[1] * 11 for _ in range(11)]
    assert call("matrix_determinant", matrix=m11) == fail(
        "Matrix too large for cofactor expansion (11x11, max 10x10).")


def test_entries_follow_python():
    # No entry check: Python's own errors, as in the original.
    assert call("matrix_determinant", matrix=[5]) == fail(
        "[TOOL_RUNTIME_ERROR] TypeError: object of type 'int' has no len()")
    assert call("matrix_determinant", matrix=[[True, 0], [0, 2]]) == det_ok(2, 2)  # bools are ints
    assert call("matrix_multiply", matrix_a=[[1.5]], matrix_b=[["a"]]) == fail(
        "[TOOL_RUNTIME_ERROR] TypeError: can't multiply sequence by non-int of type 'float'")


def test_multiply():
    out = call("matrix_multiply", matrix_a=[[1, 2], [3, 4]], matrix_b=[[5, 6], [7, 8]])
    assert out == {"success": True, "result": [[19, 22], [43, 50]], "dimensions": "2x2 * 2x2 = 2x2"}
    assert list(out) == ["success", "result", "dimensions"]
    out = call("matrix_multiply", matrix_a=[[1, 2, 3]], matrix_b=[[1], [0.5], [2]])
    assert out == {"success": True, "result": [[8.0]], "dimensions": "1x3 * 3x1 = 1x1"}
    assert call("matrix_multiply", matrix_a=[], matrix_b=[]) == {"success": True, "result": [],
                                                                 "dimensions": "0x0 * 0x0 = 0x0"}


def test_multiply_errors():
    assert call("matrix_multiply", matrix_a=[[1, 2]], matrix_b=[[1, 2]]) == fail(
        "Incompatible dimensions: 1x2 and 1x2.")
    assert call("matrix_multiply", matrix_a=[[1, 2], [3, 4], [5, 6]], matrix_b=[[1, 2, 3]]) == fail(
        "Incompatible dimensions: 3x2 and 1x3.")
    # column counts come from the first row; a short later row fails when it is used
    assert call("matrix_multiply", matrix_a=[[1, 2], [3]], matrix_b=[[1], [1]]) == fail(
        "[TOOL_RUNTIME_ERROR] IndexError: list index out of range")
    assert call("matrix_multiply", matrix_a=[[1]]) == fail("Missing required parameter matrix_b.")


def test_multiply_work_guard():
    # Guard (deviation): a 1000x1000 product would take minutes in pure Python; refused up front.
    # Timed on the method: the runtime's deep copy of 2x10^6 arguments is not the tool's cost.
    big = [[1] * 1000 for _ in range(1000)]
    start = time.perf_counter()
    assert MatrixEnv().matrix_multiply(big, big) == fail(
        f"Matrix product too large (1000x1000 * 1000x1000, estimated work over {WORK_BUDGET}).")
    assert time.perf_counter() - start < 0.5
    # the estimate grows with the entries' size: 40x40 products of 20,000-bit entries are refused
    huge = [[2**20_000] * 40 for _ in range(40)]
    assert MatrixEnv().matrix_multiply(huge, huge)["message"].startswith("Matrix product too large (40x40")


def test_determinant_work_guard():
    huge = [[3**(60_000 + i + j) for j in range(10)] for i in range(10)]  # ~29,000-digit entries
    assert MatrixEnv().matrix_determinant(huge) == fail(
        f"Matrix entries too large for cofactor expansion (10x10, estimated work over {WORK_BUDGET}).")


def test_unprintable_result_is_pythons_error():
    limit = sys.get_int_max_str_digits()
    entry = 10 ** (limit // 2 + 10)
    out = MatrixEnv().call("matrix_multiply", {"matrix_a": [[entry]], "matrix_b": [[entry]]})
    assert out == fail(f"[TOOL_RUNTIME_ERROR] ValueError: Exceeds the limit ({limit} digits) for integer "
                       "string conversion; use sys.set_int_max_str_digits() to increase the limit")


def test_huge_sequence_repetition_keeps_the_originals_error():
    # "ab" * 10**12 would need 2 TB; the original's next step (0 + str) fails either way.
    start = time.perf_counter()
    assert call("matrix_multiply", matrix_a=[["ab"]], matrix_b=[[10**12]]) == fail(
        "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +: 'int' and 'str'")
    assert call("matrix_determinant", matrix=[["x", 1], [1, 10**15]]) == fail(
        "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for -: 'str' and 'int'")
    assert call("matrix_determinant", matrix=[[[1], 0, 0], [0, 1, 0], [0, 0, 10**15]]) == fail(
        "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +=: 'int' and 'list'")
    assert time.perf_counter() - start < 0.5
    # beyond sys.maxsize Python refuses by itself, as in the original
    assert call("matrix_determinant", matrix=[["ab", 1], [1, 2**63]])["message"].startswith(
        "[TOOL_RUNTIME_ERROR] OverflowError")


class TestOriginalFidelity:
    """The original computes these with plain Python operations."""

    def test_item_12_string_entry(self):
        assert call("matrix_determinant", matrix=[["a"]]) == det_ok("a", 1)
        assert call("matrix_trace", matrix=[["a"]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +: 'int' and 'str'")
        assert call("matrix_multiply", matrix_a=[["a"]], matrix_b=[[3]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +: 'int' and 'str'")
        assert call("matrix_determinant", matrix=[[2, "ab"], [3, "cd"]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for -: 'str' and 'str'")

    def test_item_12_null_entry(self):
        assert call("matrix_determinant", matrix=[[None]]) == det_ok(None, 1)
        assert serialize(call("matrix_determinant", matrix=[[None]])) == (
            '{"success": true, "result": null, "matrix_size": "1x1", "method": "cofactor_expansion"}')
        assert call("matrix_trace", matrix=[[None]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'")
        assert call("matrix_multiply", matrix_a=[[1]], matrix_b=[[None]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for *: 'int' and 'NoneType'")

    def test_item_12_nested_list_entry(self):
        assert call("matrix_determinant", matrix=[[[1, 2]]]) == det_ok([1, 2], 1)
        assert call("matrix_trace", matrix=[[[1]]]) == fail(
            "[TOOL_RUNTIME_ERROR] TypeError: unsupported operand type(s) for +: 'int' and 'list'")

    def test_item_12_entries_above_10_to_15(self):
        assert call("matrix_determinant", matrix=[[10**15 + 1]]) == det_ok(10**15 + 1, 1)
        assert call("matrix_determinant", matrix=[[10**16, 1], [1, 10**16]]) == det_ok(10**32 - 1, 2)
        assert call("matrix_trace", matrix=[[10**20, 0], [0, 1]]) == {
            "success": True, "result": 100000000000000000001, "diagonal_elements": [10**20, 1],
            "matrix_size": "2x2"}
        assert call("matrix_multiply", matrix_a=[[10**18]], matrix_b=[[10**18]]) == {
            "success": True, "result": [[10**36]], "dimensions": "1x1 * 1x1 = 1x1"}

    def test_item_12_120x120_product_is_computed(self):
        m = [[(i * 7 + j) % 11 - 5 for j in range(120)] for i in range(120)]
        out = MatrixEnv().matrix_multiply(m, m)
        assert out["success"] is True and out["dimensions"] == "120x120 * 120x120 = 120x120"
        assert out["result"][3][4] == sum(m[3][k] * m[k][4] for k in range(120))

    def test_item_12_11x11_determinant_stays_refused(self):
        assert call("matrix_determinant", matrix=[[1] * 11 for _ in range(11)]) == fail(
            "Matrix too large for cofactor expansion (11x11, max 10x10).")


def test_trace():
    out = call("matrix_trace", matrix=[[-4, 2], [1, 1]])
    assert out == {"success": True, "result": -3, "diagonal_elements": [-4, 1], "matrix_size": "2x2"}
    assert list(out) == ["success", "result", "diagonal_elements", "matrix_size"]
    assert call("matrix_trace", matrix=[[1.0, 2], [3, 4]])["result"] == 5.0
    assert type(call("matrix_trace", matrix=[[1.0, 2], [3, 4]])["result"]) is float
    assert call("matrix_trace", matrix=[]) == {"success": True, "result": 0, "diagonal_elements": [],
                                               "matrix_size": "0x0"}
    assert call("matrix_trace", matrix=[[1, 2, 3], [4, 5, 6]]) == fail("Matrix must be square.")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_random_integer_determinants(n):
    r = random.Random(n)
    for _ in range(10):
        m = [[r.randint(-50, 50) for _ in range(n)] for _ in range(n)]
        assert call("matrix_determinant", matrix=m)["result"] == reference_det(m)
