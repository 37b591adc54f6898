"""DateTimeEnv (docs/guide.md#when2tool-environments): day differences, day offsets and weekdays on the proleptic
Gregorian calendar."""
from __future__ import annotations

from datetime import datetime, timedelta

from .base import ToolEnvironment

DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_INVALID = {"success": False, "message": "Invalid date format. Use YYYY-MM-DD."}


def parse_date(text: str) -> datetime | None:
    """``strptime("%Y-%m-%d")`` after stripping, or None when it does not parse.

    strptime is what makes ``2024-3-1`` acceptable (and ``2024-03- 1``: ``%d`` allows a leading
    space) while requiring exactly four year digits. Only ValueError means "bad date": a non-string
    argument raises AttributeError, which the runtime reports as a tool error, as the original did.
    """
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d")
    except ValueError:
        return None


def format_date(d: datetime) -> str:
    # The original's strftime("%Y-%m-%d") under glibc: the year is NOT zero-padded (year 999 gives
    # "999-01-01"); spelled out so the output does not depend on the platform's strftime.
    return f"{d.year}-{d.month:02d}-{d.day:02d}"


class DateTimeEnv(ToolEnvironment):
    name = "DateTimeEnv"

    def date_diff(self, date1: str, date2: str) -> dict:
        d1, d2 = parse_date(date1), parse_date(date2)
        if d1 is None or d2 is None:
            return dict(_INVALID)
        return {"success": True, "result": abs((d2 - d1).days)}

    def date_add(self, date: str, days: int) -> dict:
        d = parse_date(date)
        if d is None:
            return dict(_INVALID)
        # |days| > 999999999 (timedelta) or a result outside years 1..9999 raises OverflowError,
        # which the runtime turns into the original's runtime-error payload.
        return {"success": True, "result": format_date(d + timedelta(days=days))}

    def day_of_week(self, date: str) -> dict:
        d = parse_date(date)
        if d is None:
            return dict(_INVALID)
        return {"success": True, "result": DAY_NAMES[d.weekday()]}
