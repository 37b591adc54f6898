"""ListManipulationEnv: every operation, quirk and error message."""
from __future__ import annotations

import pytest

from data_builders.environments import ListManipulationEnv, serialize


def call(tool, **arguments):
    return ListManipulationEnv().call(tool, arguments)


def ok(current):
    return {"success": True, "message": "ok", "data": {"current_list": current}}


def fail(message, current):
    return {"success": False, "message": message, "data": {"current_list": current}}


# --- 1-D ----------------------------------------------------------------------------------------

def test_1d_operations():
    assert call("append", values=[1, 2], value=3) == ok([1, 2, 3])
    assert call("append", values=[], value=[4]) == ok([[4]])  # appended values are not coerced
    assert call("insert", values=[1, 2], index=0, value=9) == ok([9, 1, 2])
    assert call("insert", values=[1, 2], index=2, value=9) == ok([1, 2, 9])
    assert call("insert", values=[1, 2], index="1", value="x") == ok([1, "x", 2])
    assert call("insert", values=[1, 2], index=1.9, value=5) == ok([1, 5, 2])  # int() truncates
    assert call("remove", values=[17, 8, 17], value=17) == ok([8, 17])
    assert call("sort", values=[56, 129, 90]) == ok([56, 90, 129])
    assert call("sort", values=[2, 1.5, True]) == ok([True, 1.5, 2])
    assert call("reverse", values=[1, 2, 3]) == ok([3, 2, 1])
    assert call("reverse", values=[]) == ok([])
    assert list(call("reverse", values=[1])) == ["success", "message", "data"]


def test_1d_errors():
    assert call("insert", values=[1, 2], index=3, value=9) == fail("index 3 out of range", [1, 2])
    assert call("insert", values=[1, 2], index=-1, value=9) == fail("index -1 out of range", [1, 2])
    # remove.value is a schema "number": coerced to float, so the message shows 5.0
    assert call("remove", values=[1, 2], value=5) == fail("value 5.0 not found", [1, 2])
    assert call("remove", values=[1, 2]) == fail("value None not found", [1, 2])
    assert call("sort", values=[3, "a", 1]) == fail(
        "sort failed: list contains non-comparable element types", [3, "a", 1])
    for tool, extra in [("append", {"value": 1}), ("sort", {}), ("reverse", {}), ("remove", {"value": 1}),
                        ("insert", {"index": 0, "value": 1})]:
        assert call(tool, values=[1, 2], axis=0, **extra) == fail("axis is only valid for 2D lists", [1, 2])


def test_1d_direct_method_errors_unreachable_through_the_pipeline():
    # The schema requires/coerces index, so these messages only show on direct method calls.
    env = ListManipulationEnv()
    assert env.insert([1], None, 5) == fail("index is required for insert", [1])
    assert env.insert([1], "0", 5) == fail("index must be integer for insert", [1])


def test_remove_float_matches_int_element():
    assert call("remove", values=[1, 2, 3], value="2") == ok([1, 3])
    assert call("remove", values=[1, 2], value="two") == {
        "success": False, "message": "Parameter value should have type number."}


# --- 2-D ----------------------------------------------------------------------------------------

M = [[3, 1, 2], [1, 5, 0], [2, 0, 9]]


def test_2d_sort():
    assert call("sort", values=M, axis=0) == ok([[1, 0, 0], [2, 1, 2], [3, 5, 9]])  # each column
    assert call("sort", values=M, axis=1) == ok([[1, 2, 3], [0, 1, 5], [0, 2, 9]])  # each row
    # NumPy promotion: one float makes every element a float
    out = call("sort", values=[[2, 1], [1.5, 3]], axis=0)
    assert out == ok([[1.5, 1.0], [2.0, 3.0]])
    assert serialize(out) == ('{"success": true, "message": "ok", "data": {"current_list": '
                              '[[1.5, 1.0], [2.0, 3.0]]}}')
    assert all(type(x) is int for row in call("sort", values=M, axis=0)["data"]["current_list"] for x in row)
    assert call("sort", values=[[]], axis=0) == ok([[]])


def test_2d_sort_without_axis_is_axis_error():
    # The benchmark's spot check
    assert call("sort", values=M) == fail("axis must be 0 or 1 for 2D operations", M)
    assert call("sort", values=M, axis=2) == fail("axis must be 0 or 1 for 2D operations", M)
    assert call("reverse", values=M, axis=-1) == fail("axis must be 0 or 1 for 2D operations", M)
    assert call("append", values=M, value=[1, 2, 3]) == fail("axis must be 0 or 1 for 2D operations", M)


def test_2d_reverse():
    assert call("reverse", values=M, axis=0) == ok([[2, 0, 9], [1, 5, 0], [3, 1, 2]])
    assert call("reverse", values=M, axis=1) == ok([[2, 1, 3], [0, 5, 1], [9, 0, 2]])
    assert call("reverse", values=M, axis="1") == ok([[2, 1, 3], [0, 5, 1], [9, 0, 2]])


def test_2d_remove():
    assert call("remove", values=M, axis=0, index=1) == ok([[3, 1, 2], [2, 0, 9]])
    assert call("remove", values=M, axis=1, index=0) == ok([[1, 2], [5, 0], [0, 9]])
    assert call("remove", values=M, axis=0, index=3) == fail("row index 3 out of range", M)
    assert call("remove", values=M, axis=1, index=3) == fail("column index 3 out of range", M)
    assert call("remove", values=M, axis=1, index=-1) == fail("column index -1 out of range", M)
    assert call("remove", values=M, axis=0, value=3) == fail("index(integer) is required for 2D remove", M)


def test_2d_insert():
    assert call("insert", values=M, axis=0, index=3, value=[7, 7, 7]) == ok(M + [[7, 7, 7]])
    assert call("insert", values=M, axis=0, index=0, value=[7, 7, 7]) == ok([[7, 7, 7]] + M)
    assert call("insert", values=M, axis=1, index=1, value=8) == ok([[3, 8, 1, 2], [1, 8, 5, 0], [2, 8, 0, 9]])
    assert call("insert", values=M, axis=1, index=3, value=8) == ok([r + [8] for r in M])
    assert call("insert", values=M, axis=0, index=1, value=7) == fail("for axis=0 insert, value must be a row list", M)
    assert call("insert", values=M, axis=0, index=1, value=[7]) == fail("inserted row length mismatch", M)
    assert call("insert", values=M, axis=0, index=4, value=[7, 7, 7]) == fail("row index 4 out of range", M)
    assert call("insert", values=M, axis=1, index=4, value=8) == fail("column index 4 out of range", M)
    assert call("insert", values=M, axis=1, index=-1, value=8) == fail("column index -1 out of range", M)
    assert ListManipulationEnv().insert(M, None, 1, axis=0) == fail("index(integer) is required for 2D insert", M)


def test_2d_append():
    assert call("append", values=M, axis=0, value=[4, 5, 6]) == ok(M + [[4, 5, 6]])
    assert call("append", values=M, axis=1, value=0) == ok([r + [0] for r in M])
    assert call("append", values=M, axis=0, value=4) == fail("for axis=0 append, value must be a row list", M)
    assert call("append", values=M, axis=0, value=[4, 5]) == fail("appended row length mismatch", M)


def test_input_normalisation_of_wrapped_rows():
    wrapped = [{"values": [2, 1]}, {"values": [0, 3]}]
    assert call("sort", values=wrapped, axis=1) == ok([[1, 2], [0, 3]])
    # failures report the normalised list
    assert call("sort", values=wrapped) == fail("axis must be 0 or 1 for 2D operations", [[2, 1], [0, 3]])
    # only when every element is such an object
    assert call("reverse", values=[{"values": [1]}, 5]) == ok([5, {"values": [1]}])


def test_mixed_list_is_1d():
    assert call("reverse", values=[[1], 2]) == ok([2, [1]])
    assert call("reverse", values=[[1], 2], axis=0) == fail("axis is only valid for 2D lists", [[1], 2])


def test_input_not_mutated_and_outputs_do_not_alias():
    values = [[1, 2], [3, 4]]
    env = ListManipulationEnv()
    env.call("reverse", {"values": values, "axis": 1})
    env.call("remove", {"values": values, "axis": 1, "index": 0})
    assert values == [[1, 2], [3, 4]]
    out = env.call("insert", {"values": values, "axis": 1, "index": 0, "value": [9]})
    out["data"]["current_list"][0][0].append(1)
    assert out["data"]["current_list"][1][0] == [9]


def test_bad_values_type():
    assert call("reverse", values={"a": 1}) == {"success": False, "message": "Parameter values should have type array."}
    assert call("sort", values='"abc"') == {  # JSON-decodes to a string
        "success": False, "message": "[TOOL_RUNTIME_ERROR] TypeError: 'str' object does not support item assignment"}


class TestOriginalFidelity:
    """The original reports the Python error of its first step, arr[:] = ..."""

    def test_item_13_values_string_5(self):
        for tool, extra in (("reverse", {}), ("append", {"value": 1}), ("insert", {"index": 0, "value": 1}),
                            ("remove", {"value": 5}), ("sort", {})):
            assert call(tool, values="5", **extra) == {  # "5" JSON-decodes to the int 5
                "success": False,
                "message": "[TOOL_RUNTIME_ERROR] TypeError: 'int' object does not support item assignment"}

    def test_item_13_values_null(self):
        assert call("reverse", values="null") == {
            "success": False,
            "message": "[TOOL_RUNTIME_ERROR] TypeError: 'NoneType' object does not support item assignment"}


def test_2d_sort_incomparable_is_runtime_error():
    out = call("sort", values=[[1, None], [2, 3]], axis=0)
    assert out["success"] is False and out["message"].startswith("[TOOL_RUNTIME_ERROR] TypeError")


@pytest.mark.parametrize("n", [1000, 1001])
def test_values_length_limit(n):
    out = call("reverse", values=list(range(n)))
    assert out["success"] is (n == 1000)


def test_2d_sort_without_numpy_keeps_numpy_semantics(monkeypatch):
    from data_builders.environments import list_manipulation

    monkeypatch.setattr(list_manipulation, "np", None)
    assert call("sort", values=M, axis=0) == ok([[1, 0, 0], [2, 1, 2], [3, 5, 9]])
    assert call("sort", values=M, axis=1) == ok([[1, 2, 3], [0, 1, 5], [0, 2, 9]])
    assert call("sort", values=[[2, 1], [1.5, 3]], axis=0) == ok([[1.5, 1.0], [2.0, 3.0]])


def test_2d_sort_ragged_rows_falls_back_to_python():
    # NumPy rejects ragged input; the Python fallback sorts the columns of the first row's width.
    assert call("sort", values=[[3, 1, 7], [1, 2]], axis=1) == ok([[1, 3, 7], [1, 2]])
    out = call("sort", values=[[3, 1, 7], [1, 2]], axis=0)
    assert out == {"success": False, "message": "[TOOL_RUNTIME_ERROR] IndexError: list index out of range"}
