"""How a config dataclass declares a field: its default, its one-line help and the checks its value must pass.

Here, below every package that declares configs, so a config dataclass can sit beside the code that reads it (a
gate's recipe arguments in its gate module, the agent's settings in the loop) without importing the Hydra layer;
each config module stores its dataclasses as structured configs, and ``recipes/schema.py`` runs the checks.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from dataclasses import field
from typing import Any, Iterable

from omegaconf import MISSING

CALIBRATED = "calibrated"


def param(default: Any, help: str, **checks: Any) -> Any:
    """A field with its default, its one-line help and the checks its value must pass when a config is
    composed (``recipes.schema.value_errors``): ``choices`` (allowed values), ``items`` (allowed values of a list's
    elements), ``ge``/``gt``/``le``/``lt`` (bounds), ``check`` (a function returning what is wrong, or None).
    Every float must also be finite, whatever the field's other checks; ``finite=False`` lets a field whose meaning
    includes inf take it. None passes every check: a field typed ``Optional`` documents what null means. A list,
    dict or dataclass default is copied for each config."""
    meta = {"help": help, **checks}
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=functools.partial(copy.deepcopy, default), metadata=meta)
    return field(default=default, metadata=meta)


def required(help: str, **checks: Any) -> Any:
    """A field without a default: each option of its group sets it (or the command line does: ``model=hf``'s
    ``model.name``), or, for a group node, the entry config's defaults list selects an option."""
    return field(default=MISSING, metadata={"help": help, "required": True, **checks})


def tau_values(values: Iterable[Any]) -> str | None:
    bad = [v for v in values if v != CALIBRATED and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          and 0 <= v <= 1)]
    return f"{bad}: each τ is a number in [0, 1] or {CALIBRATED}" if bad else None


def derived(cls: type, name: str, exclude: tuple[str, ...] = (), required_help: dict[str, str] | None = None,
            module: str | None = None) -> type:
    """A config dataclass with ``cls``'s fields, types and defaults (so they stay written once, in ``cls``), less
    ``exclude``. Needed because a runtime dataclass cannot be a schema as is: it may be frozen (read-only
    nodes refuse overrides) or carry fields that another group holds. A field of ``cls`` without a default is
    required; ``required_help`` says what each such field holds (the others are documented in ``cls``)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        if f.default_factory is not dataclasses.MISSING:
            default = field(default_factory=f.default_factory)
        elif f.default is not dataclasses.MISSING:
            default = field(default=f.default)
        else:
            default = required((required_help or {})[f.name])
        fields.append((f.name, hints[f.name], default))
    schema = dataclasses.make_dataclass(name, fields)
    schema.__module__ = module or cls.__module__     # (make_dataclass's module= needs Python 3.12)
    return schema


def positive_or_auto(value: Any) -> str | None:
    if value == "auto" or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0):
        return None
    return "must be auto or a positive number"
