"""DateTimeEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): day differences, "N days after" and weekdays.

Easy stays inside one month; medium crosses a month or a year end, or leap-year February; hard
spans decades between 1900 and 2100. Dates are written "Month D, YYYY" as in When2Tool; gold is
computed with ``datetime.date`` here, independently of the environment's string parsing.
"""
from __future__ import annotations

import calendar
import random
from datetime import date, timedelta

from .common import Draw, EnvGenerator

TOOLS = ("date_diff", "date_add", "day_of_week")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_DIFF = "How many days are between {a} and {b}? Answer with only the number."
_ADD = "What date is {n} days after {d}?{note} Answer in YYYY-MM-DD format only."
_DOW = "What day of the week is {d}? Answer with only the day name (e.g. Monday)."


def _md(d: date) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}"


def _mdy(d: date) -> str:
    return f"{_md(d)}, {d.year}"


def _random_date(r: random.Random, first_year: int, last_year: int) -> date:
    start, end = date(first_year, 1, 1).toordinal(), date(last_year, 12, 31).toordinal()
    return date.fromordinal(r.randint(start, end))


def _diff(a: date, b: date, *, same_year: bool) -> Draw:
    # Within one year When2Tool names the year once: "between April 4 and April 13, 2021".
    first = _md(a) if same_year else _mdy(a)
    return _DIFF.format(a=first, b=_mdy(b)), str(abs((b - a).days)), {}


def _add(d: date, n: int, note: str = "") -> Draw:
    return _ADD.format(n=n, d=_mdy(d), note=note), (d + timedelta(days=n)).isoformat(), {}


def _dow(d: date) -> Draw:
    return _DOW.format(d=_mdy(d)), WEEKDAYS[d.weekday()], {}


def _easy(r: random.Random) -> Draw:
    kind = r.randrange(3)
    year, month = r.randint(2020, 2026), r.randint(1, 12)
    last = calendar.monthrange(year, month)[1]
    if kind == 0:
        day = r.randint(1, 15)
        other = r.randint(day + 2, min(last, day + 22))
        return _diff(date(year, month, day), date(year, month, other), same_year=True)
    if kind == 1:
        day = r.randint(1, 20)
        return _add(date(year, month, day), r.randint(1, min(7, last - day)))
    return _dow(_random_date(r, 2020, 2026))


def _medium(r: random.Random) -> Draw:
    kind = r.randrange(3)
    if kind == 0:  # across one or two month boundaries, same year
        year, month = r.randint(2020, 2028), r.randint(1, 11)
        start = date(year, month, r.randint(20, 28))
        end_month = min(12, month + r.choice((1, 1, 2)))
        return _diff(start, date(year, end_month, r.randint(1, 15)), same_year=True)
    if kind == 1:  # across the year end
        return _add(date(r.randint(2020, 2027), 12, r.randint(24, 31)), r.randint(6, 30))
    # Across leap-year February, with When2Tool's explicit note.
    year = r.choice([y for y in range(2020, 2041) if calendar.isleap(y)])
    day = r.randint(23, 27)
    return _add(date(year, 2, day), r.randint(30 - day, 15), note=f" (Note: {year} is a leap year.)")


def _hard(r: random.Random) -> Draw:
    kind = r.randrange(3)
    if kind == 0:  # multi-decade span
        return _diff(_random_date(r, 1950, 2000), _random_date(r, 2020, 2050), same_year=False)
    if kind == 1:
        return _add(_random_date(r, 2020, 2030), r.randint(400, 3600))
    return _dow(_random_date(r, 1900, 2100))


_MAKERS = {"easy": _easy, "medium": _medium, "hard": _hard}


def make(difficulty: str, r: random.Random) -> Draw:
    return _MAKERS[difficulty](r)


GENERATOR = EnvGenerator("DateTimeEnv", "datetime", tools=lambda difficulty: TOOLS, make=make)
