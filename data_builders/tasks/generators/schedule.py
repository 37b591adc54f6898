"""ScheduleEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): free-slot counts and lists, and overlap
checks, over a day of back-to-back meetings shaped like When2Tool's.

Meetings are laid out left to right: the first starts up to an hour after the day starts, each
lasts 30/45/60/90 minutes, the next one starts 0-60 minutes after the previous one ends, and a
meeting that would run past the end of the day is cut at it. So meetings never overlap (the easy
overlap question is always ``False``, as in When2Tool) but may touch.

The gold is computed on a minute grid (every minute of the window marked busy or free, then runs
of free minutes counted), independently of the environment's sort-merge-sweep.
"""
from __future__ import annotations

import random

from .common import Draw, EnvGenerator

TOOLS = ("find_free_slots", "check_conflict")
DURATIONS = (30, 45, 60, 90)

# Per difficulty: (meeting-count range, meeting window, questions). A question is
# (kind, min_duration, window); the window of a question may be wider than the meetings' (as in
# When2Tool's medium 45-minute question, asked over 08:00-18:00 for a 09:00-17:00 day).
_CELLS = {
    "easy": ((2, 3), ("09:00", "17:00"), (("overlap", 0, None), ("count", 60, ("09:00", "17:00")),
                                           ("count", 30, ("09:00", "17:00")))),
    "medium": ((4, 7), ("09:00", "17:00"), (("list", 30, ("09:00", "17:00")), ("count", 60, ("09:00", "17:00")),
                                             ("count", 45, ("08:00", "18:00")))),
    "hard": ((6, 11), ("08:00", "20:00"), (("list", 30, ("08:00", "20:00")), ("count", 60, ("08:00", "20:00")),
                                            ("count", 30, ("08:00", "20:00")))),
}


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


def _hhmm(minutes: int) -> str:
    return "%02d:%02d" % divmod(minutes, 60)


def _meetings(r: random.Random, count_range: tuple[int, int], window: tuple[str, str]) -> list[list[str]]:
    day_start, day_end = _minutes(window[0]), _minutes(window[1])
    want = r.randint(*count_range)
    out: list[list[str]] = []
    cursor = day_start + r.randint(0, 60)
    while len(out) < want and cursor <= day_end - 30:
        end = min(cursor + r.choice(DURATIONS), day_end)
        out.append([_hhmm(cursor), _hhmm(end)])
        cursor = end + r.randint(0, 60)
    return out


def free_gaps(meetings: list[list[str]], window: tuple[str, str], min_duration: int) -> list[list[str]]:
    """Maximal free runs of the window at least ``min_duration`` minutes long, on a minute grid."""
    start, end = _minutes(window[0]), _minutes(window[1])
    busy = [False] * (end - start)
    for s, e in meetings:
        for minute in range(max(_minutes(s), start), min(_minutes(e), end)):
            busy[minute - start] = True
    gaps, run_start = [], None
    for i, taken in enumerate(busy + [True]):  # a sentinel closes a run at the end of the window
        if not taken and run_start is None:
            run_start = i
        elif taken and run_start is not None:
            if i - run_start >= min_duration:
                gaps.append([_hhmm(start + run_start), _hhmm(start + i)])
            run_start = None
    return gaps


def _any_overlap(meetings: list[list[str]]) -> bool:
    spans = [(_minutes(s), _minutes(e)) for s, e in meetings]
    return any(a < d and c < b for i, (a, b) in enumerate(spans) for c, d in spans[i + 1:])


def _slot_phrase(minutes: int) -> str:
    return "1-hour" if minutes == 60 else f"{minutes}-minute"


def make(difficulty: str, r: random.Random) -> Draw:
    count_range, day, questions = _CELLS[difficulty]
    meetings = _meetings(r, count_range, day)
    kind, minutes, window = r.choice(questions)
    if kind == "overlap":
        instruction = f"Do any of these meetings overlap? {meetings}. Answer with only true or false."
        return instruction, str(_any_overlap(meetings)), {}
    gaps = free_gaps(meetings, window, minutes)
    if kind == "count":
        instruction = (f"Given these meetings: {meetings}. How many free {_slot_phrase(minutes)} slots are available "
                       f"between {window[0]} and {window[1]}? Answer with only the number.")
        return instruction, str(len(gaps)), {}
    instruction = (f"Given these meetings: {meetings}. List all free slots of at least {minutes} minutes between "
                   f"{window[0]} and {window[1]}. Answer with a list of [start, end] pairs in HH:MM format.")
    return instruction, str(gaps), {}


GENERATOR = EnvGenerator("ScheduleEnv", "schedule", tools=lambda difficulty: TOOLS, make=make)
