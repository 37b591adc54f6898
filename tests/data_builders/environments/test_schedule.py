"""ScheduleEnv: free-slot sweep (touching blocks merge) and strict pairwise conflicts."""
from __future__ import annotations

from data_builders.environments import serialize
from data_builders.environments.schedule import ScheduleEnv


def call(tool, **arguments):
    return ScheduleEnv().call(tool, arguments)


def slots(busy, day_start="09:00", day_end="17:00", min_duration=30):
    return call("find_free_slots", busy=busy, day_start=day_start, day_end=day_end,
                min_duration=min_duration)["result"]


def test_benchmark_spot_check_full_payload():
    out = call("find_free_slots", busy=[["09:00", "10:00"], ["10:00", "10:30"], ["11:00", "12:00"]],
               day_start="09:00", day_end="13:00", min_duration=30)
    assert out == {
        "success": True,
        "result": [["10:30", "11:00"], ["12:00", "13:00"]],
        "total_free_slots": 2,
        "search_window": ["09:00", "13:00"],
        "min_duration_minutes": 30,
        "busy_intervals": 3,
        "merged_busy_intervals": 2,  # touching blocks merged
    }
    assert list(out) == ["success", "result", "total_free_slots", "search_window", "min_duration_minutes",
                         "busy_intervals", "merged_busy_intervals"]
    assert serialize(out).startswith('{"success": true, "result": [["10:30", "11:00"], ["12:00", "13:00"]], ')


def test_sorting_merging_and_thresholds():
    # unsorted, overlapping and nested blocks
    busy = [["13:00", "14:00"], ["09:30", "11:00"], ["10:00", "10:15"], ["10:45", "12:00"]]
    out = call("find_free_slots", busy=busy, day_start="09:00", day_end="17:00", min_duration=30)
    assert out["result"] == [["09:00", "09:30"], ["12:00", "13:00"], ["14:00", "17:00"]]
    assert (out["busy_intervals"], out["merged_busy_intervals"]) == (4, 2)
    # a gap of exactly min_duration counts, one minute less does not
    assert slots([["09:30", "10:00"], ["10:29", "11:00"]], day_end="11:30") == [["09:00", "09:30"], ["11:00", "11:30"]]
    assert slots([["09:00", "16:30"]]) == [["16:30", "17:00"]]
    assert slots([["09:00", "16:31"]]) == []
    # blocks before the window only move the cursor; a block covering the end leaves no tail slot
    assert slots([["07:00", "09:45"], ["16:00", "18:00"]]) == [["09:45", "16:00"]]
    # minimum 0: empty gaps are still not slots (s > cursor, day_end > cursor)
    assert slots([["09:00", "10:00"], ["10:00", "17:00"]], min_duration=0) == []


def test_time_formats_and_coercion():
    # H:MM accepted, output zero-padded; search_window echoes the input strings
    out = call("find_free_slots", busy=[["9:00", "9:30"]], day_start="8:00", day_end="10:00", min_duration="45")
    assert out["result"] == [["08:00", "09:00"]]
    assert out["search_window"] == ["8:00", "10:00"] and out["min_duration_minutes"] == 45
    # array parameters given as JSON strings are decoded (the runtime's type coercion)
    assert call("find_free_slots", busy='[["09:00", "16:00"]]', day_start="09:00", day_end="17:00",
                min_duration=60)["result"] == [["16:00", "17:00"]]
    assert slots([]) == [["09:00", "17:00"]]


def test_unclipped_blocks_after_day_end_quirk():
    # As in the original, blocks beginning after day_end are not clipped, so the gap before one runs past day_end.
    assert slots([["18:00", "19:00"]]) == [["09:00", "18:00"]]


def test_find_free_slots_errors():
    assert call("find_free_slots", busy=[], day_start="09:00", day_end="17:00") == {
        "success": False, "message": "Missing required parameter min_duration."}
    assert call("find_free_slots", busy=5, day_start="09:00", day_end="17:00", min_duration=30) == {
        "success": False, "message": "Parameter busy should have type array."}
    assert call("find_free_slots", busy=[], day_start="09:00", day_end="17:00", min_duration="half") == {
        "success": False, "message": "Parameter min_duration should have type integer."}
    assert call("find_free_slots", busy=[["9am", "10am"]], day_start="09:00", day_end="17:00", min_duration=30) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] ValueError: not enough values to unpack (expected 2, got 1)"}
    bad_minutes = call("find_free_slots", busy=[], day_start="09:xx", day_end="17:00", min_duration=30)
    assert bad_minutes["message"].startswith("[TOOL_RUNTIME_ERROR] ValueError: invalid literal for int()")
    too_many_colons = call("find_free_slots", busy=[["09:00:00", "10:00"]], day_start="09:00", day_end="17:00",
                           min_duration=30)
    assert too_many_colons["message"] == "[TOOL_RUNTIME_ERROR] ValueError: too many values to unpack (expected 2)"


def test_check_conflict_strict_and_pairwise():
    iv = [["09:00", "10:00"], ["10:00", "11:00"], ["09:30", "10:30"], ["12:00", "13:00"], ["12:15", "12:45"]]
    out = call("check_conflict", intervals=iv)
    assert out == {
        "success": True,
        "result": {"has_conflict": True, "conflicts": [
            [["09:00", "10:00"], ["09:30", "10:30"]],
            [["10:00", "11:00"], ["09:30", "10:30"]],  # pairs in (i, j) order, intervals as given
            [["12:00", "13:00"], ["12:15", "12:45"]],
        ]},
        "total_intervals": 5,
        "total_conflicts": 3,
    }
    assert list(out) == ["success", "result", "total_intervals", "total_conflicts"]
    assert list(out["result"]) == ["has_conflict", "conflicts"]
    # touching intervals do not conflict
    assert call("check_conflict", intervals=[["09:00", "10:00"], ["10:00", "11:00"]]) == {
        "success": True, "result": {"has_conflict": False, "conflicts": []}, "total_intervals": 2,
        "total_conflicts": 0}
    assert call("check_conflict", intervals=[])["result"] == {"has_conflict": False, "conflicts": []}


def test_check_conflict_errors():
    assert call("check_conflict") == {"success": False, "message": "Missing required parameter intervals."}
    assert call("check_conflict", intervals=[["09:00", 10]])["message"] == (
        "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'")


def err(message):
    return {"success": False, "message": f"[TOOL_RUNTIME_ERROR] {message}"}


class TestOriginalFidelity:
    """The original reads an interval as iv[0]/iv[1] and a time as
    t.strip().split(":"), so its payloads are those of these Python operations."""

    def test_item_11_three_element_interval_uses_first_two(self):
        assert call("find_free_slots", busy=[["09:00", "10:00", "x"]], day_start="09:00", day_end="12:00",
                    min_duration=30) == {
            "success": True, "result": [["10:00", "12:00"]], "total_free_slots": 1,
            "search_window": ["09:00", "12:00"], "min_duration_minutes": 30, "busy_intervals": 1,
            "merged_busy_intervals": 1}
        assert call("check_conflict", intervals=[["09:00", "10:00", "x"], ["09:30", "11:00"]]) == {
            "success": True,
            "result": {"has_conflict": True, "conflicts": [[["09:00", "10:00", "x"], ["09:30", "11:00"]]]},
            "total_intervals": 2, "total_conflicts": 1}

    def test_item_11_integer_times(self):
        assert call("check_conflict", intervals=[[900, 1000]]) == err(
            "AttributeError: 'int' object has no attribute 'strip'")
        assert call("find_free_slots", busy=[[900, 1000]], day_start="09:00", day_end="17:00",
                    min_duration=30) == err("AttributeError: 'int' object has no attribute 'strip'")

    def test_item_11_non_string_times(self):
        assert call("check_conflict", intervals=[[9.5, "10:00"]]) == err(
            "AttributeError: 'float' object has no attribute 'strip'")
        assert call("check_conflict", intervals=[[None, "10:00"]]) == err(
            "AttributeError: 'NoneType' object has no attribute 'strip'")
        assert call("check_conflict", intervals=[[["09:00"], "10:00"]]) == err(
            "AttributeError: 'list' object has no attribute 'strip'")
        assert call("find_free_slots", busy=[], day_start=900, day_end="17:00", min_duration=30) == err(
            "AttributeError: 'int' object has no attribute 'strip'")
        assert call("find_free_slots", busy=[], day_start="09:00", day_end=1700, min_duration=30) == err(
            "AttributeError: 'int' object has no attribute 'strip'")

    def test_item_11_the_days_are_read_before_the_busy_list(self):
        # both malformed: the original fails on day_start first (toolwise read busy first and named the 'int')
        assert call("find_free_slots", busy=[[900, 1000]], day_start=None, day_end="17:00", min_duration=30) == err(
            "AttributeError: 'NoneType' object has no attribute 'strip'")
        assert call("find_free_slots", busy=[["09:00"]], day_start="09:00", day_end=1700, min_duration=30) == err(
            "AttributeError: 'int' object has no attribute 'strip'")
        assert call("find_free_slots", busy=[["9"]], day_start="9", day_end=[], min_duration=30) == err(
            "ValueError: not enough values to unpack (expected 2, got 1)")

    def test_item_11_interval_shapes(self):
        assert call("check_conflict", intervals=[["09:00"]]) == err("IndexError: list index out of range")
        assert call("check_conflict", intervals=[[]]) == err("IndexError: list index out of range")
        assert call("check_conflict", intervals=[900]) == err("TypeError: 'int' object is not subscriptable")
        assert call("check_conflict", intervals=[None]) == err("TypeError: 'NoneType' object is not subscriptable")
        assert call("check_conflict", intervals=[{"start": "09:00", "end": "10:00"}]) == err("KeyError: 0")
        # a string interval is indexed character by character: "0" has no colon
        assert call("check_conflict", intervals=["09:00-10:00"]) == err(
            "ValueError: not enough values to unpack (expected 2, got 1)")
        assert call("find_free_slots", busy=[["09:00"]], day_start="09:00", day_end="17:00",
                    min_duration=30) == err("IndexError: list index out of range")

    def test_item_11_padded_times_are_stripped(self):
        assert call("check_conflict", intervals=[[" 09:00 ", "10:00\n"], ["09:30", "11:00"]])["total_conflicts"] == 1
