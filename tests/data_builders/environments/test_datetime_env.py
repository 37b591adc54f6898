"""DateTimeEnv: date_diff, date_add, day_of_week, strptime parsing quirks and overflow."""
from __future__ import annotations

import pytest

from data_builders.environments import ENVIRONMENTS, serialize
from data_builders.environments.datetime_env import DateTimeEnv

INVALID = {"success": False, "message": "Invalid date format. Use YYYY-MM-DD."}


def call(tool, **arguments):
    return DateTimeEnv().call(tool, arguments)


def ok(result):
    return {"success": True, "result": result}


def test_registered_and_exposed_sorted():
    assert ENVIRONMENTS["DateTimeEnv"] is DateTimeEnv
    assert [s["function"]["name"] for s in DateTimeEnv().tool_specs()] == ["date_add", "date_diff", "day_of_week"]


def test_date_diff_is_absolute_days():
    assert call("date_diff", date1="2021-04-04", date2="2021-04-13") == ok(9)
    assert call("date_diff", date1="2021-04-13", date2="2021-04-04") == ok(9)
    assert call("date_diff", date1="2024-02-28", date2="2024-03-01") == ok(2)  # leap year
    assert call("date_diff", date1="2023-02-28", date2="2023-03-01") == ok(1)
    assert call("date_diff", date1="1900-02-28", date2="1900-03-01") == ok(1)  # 1900 is not leap
    assert call("date_diff", date1="2000-02-28", date2="2000-03-01") == ok(2)  # 2000 is
    assert call("date_diff", date1="1992-07-06", date2="2032-12-15") == ok(14772)
    assert call("date_diff", date1="2020-01-01", date2="2020-01-01") == ok(0)
    assert list(call("date_diff", date1="2020-01-01", date2="2020-01-02")) == ["success", "result"]


def test_date_add_forward_backward_and_across_boundaries():
    assert call("date_add", date="2024-12-27", days=10) == ok("2025-01-06")
    assert call("date_add", date="2032-02-25", days=11) == ok("2032-03-07")
    assert call("date_add", date="2023-09-10", days=463) == ok("2024-12-16")
    assert call("date_add", date="2024-03-01", days=-1) == ok("2024-02-29")
    assert call("date_add", date="2024-03-01", days=0) == ok("2024-03-01")
    assert serialize(call("date_add", date="2022-10-12", days=3)) == '{"success": true, "result": "2022-10-15"}'


def test_date_add_days_coercion():
    assert call("date_add", date="2024-01-01", days="10") == ok("2024-01-11")
    assert call("date_add", date="2024-01-01", days=2.9) == ok("2024-01-03")  # int() truncates
    assert call("date_add", date="2024-01-01", days="2.5") == {
        "success": False, "message": "Parameter days should have type integer."}
    assert call("date_add", date="2024-01-01", days=10**16) == {
        "success": False, "message": "Argument 'days' too large (max 1000000000000000)."}


def test_date_add_overflow_is_a_runtime_error():
    assert call("date_add", date="9999-12-31", days=1) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] OverflowError: date value out of range"}
    assert call("date_add", date="0001-01-01", days=-1) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] OverflowError: date value out of range"}
    huge = call("date_add", date="2000-01-01", days=10**12)
    assert huge["success"] is False and huge["message"].startswith("[TOOL_RUNTIME_ERROR] OverflowError: ")


def test_date_add_years_below_1000_are_not_zero_padded():
    # The original's strftime("%Y") on glibc; such an output cannot be parsed back (needs 4 digits).
    assert call("date_add", date="1000-01-01", days=-1) == ok("999-12-31")
    assert call("day_of_week", date="999-12-31") == INVALID


@pytest.mark.parametrize(
    ("date", "name"),
    [("2024-01-01", "Monday"), ("2020-06-08", "Monday"), ("2023-06-23", "Friday"), ("2000-02-29", "Tuesday"),
     ("1900-01-01", "Monday"), ("2100-12-31", "Friday"), ("0001-01-01", "Monday"), ("1582-10-10", "Sunday")],
)
def test_day_of_week_proleptic_gregorian(date, name):
    assert call("day_of_week", date=date) == ok(name)


def test_lenient_strptime_forms_are_accepted():
    assert call("day_of_week", date="2024-3-1") == ok("Friday")
    assert call("day_of_week", date="  2024-03-01\n") == ok("Friday")
    assert call("day_of_week", date="2024-03- 1") == ok("Friday")  # %d allows a leading space
    assert call("date_diff", date1="2024-1-1", date2="2024-01-31") == ok(30)


@pytest.mark.parametrize(
    "bad",
    ["2024/03/01", "24-03-01", "2023-02-29", "2024-13-01", "2024-00-10", "2024-04-31", "March 1, 2024",
     "", "2024-03-01T00:00", "20240301", "12024-01-01", "0000-01-01"],
)
def test_invalid_dates(bad):
    assert call("day_of_week", date=bad) == INVALID
    assert call("date_add", date=bad, days=1) == INVALID
    assert call("date_diff", date1="2024-01-01", date2=bad) == INVALID
    assert call("date_diff", date1=bad, date2="2024-01-01") == INVALID


def test_non_string_dates_and_missing_arguments():
    assert call("day_of_week", date=20240301) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'"}
    assert call("date_add", date="2024-01-01") == {"success": False, "message": "Missing required parameter days."}
    assert call("date_diff", date2="2024-01-01") == {"success": False, "message": "Missing required parameter date1."}
