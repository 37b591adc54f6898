"""ScheduleEnv (docs/guide.md#when2tool-environments): free-slot search and pairwise conflict check over HH:MM
intervals.

Times are ``H:MM``/``HH:MM`` strings turned into minutes. Malformed input raises, and the runtime
reports it as ``[TOOL_RUNTIME_ERROR] <Class>: <message>``, as the original does for a malformed time.
The error texts match the original's because the same Python operations run in the same
order: a time is ``t.strip().split(":")`` unpacked into two parts and ``int()``-ed, and an interval
is read as ``iv[0]``/``iv[1]``. So an interval with extra elements uses its first two (as the
original), and e.g. a non-string time gives ``'int' object has no attribute 'strip'``, a one-element
interval ``list index out of range``, a number as interval ``'int' object is not subscriptable``, an
object as interval ``KeyError: 0``. ``day_start`` and ``day_end`` are converted before the busy list, the
original's order (its ``ScheduleEnv`` in the benchmark's public repository, github.com/Trustworthy-ML-Lab/when2tool):
with a malformed day and a malformed interval, the error is the day's.
"""
from __future__ import annotations

from typing import Any

from .base import ToolEnvironment


def to_minutes(t: Any) -> int:
    # strip() first, as the original: a non-string fails on it ("'int' object has no attribute 'strip'").
    hours, minutes = t.strip().split(":")  # ValueError unless exactly one colon
    return int(hours) * 60 + int(minutes)


def to_hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _pair(interval: Any) -> tuple[int, int]:
    # Indexed, not unpacked, as the original: extra elements are ignored, and the errors are those of
    # indexing (IndexError for one element, TypeError for a number, KeyError for an object).
    return to_minutes(interval[0]), to_minutes(interval[1])


def merge_busy(busy: list) -> list[list[int]]:
    """Sort by (start, end) and merge; ``start <= previous end`` merges, so touching blocks join."""
    merged: list[list[int]] = []
    for start, end in sorted(_pair(b) for b in busy):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


class ScheduleEnv(ToolEnvironment):
    name = "ScheduleEnv"

    def find_free_slots(self, busy: list, day_start: str, day_end: str, min_duration: int) -> dict:
        cursor, end_of_day = to_minutes(day_start), to_minutes(day_end)     # before busy: the original's order
        merged = merge_busy(busy)
        slots: list[list[str]] = []
        for start, end in merged:
            if start > cursor and start - cursor >= min_duration:
                slots.append([to_hhmm(cursor), to_hhmm(start)])
            cursor = max(cursor, end)
        # As in the original, blocks starting after day_end are not clipped (never arises in tasks).
        if end_of_day - cursor >= min_duration and end_of_day > cursor:
            slots.append([to_hhmm(cursor), to_hhmm(end_of_day)])
        return {
            "success": True,
            "result": slots,
            "total_free_slots": len(slots),
            "search_window": [day_start, day_end],
            "min_duration_minutes": min_duration,
            "busy_intervals": len(busy),
            "merged_busy_intervals": len(merged),
        }

    def check_conflict(self, intervals: list) -> dict:
        spans = [_pair(iv) for iv in intervals]
        conflicts = []
        # O(n^2) pairs; the runtime caps a list at 1000 elements, so at most ~500k comparisons.
        for i, (s1, e1) in enumerate(spans):
            for j in range(i + 1, len(spans)):
                s2, e2 = spans[j]
                if s1 < e2 and s2 < e1:  # strict: touching intervals do not conflict
                    conflicts.append([intervals[i], intervals[j]])
        return {
            "success": True,
            "result": {"has_conflict": bool(conflicts), "conflicts": conflicts},
            "total_intervals": len(intervals),
            "total_conflicts": len(conflicts),
        }
