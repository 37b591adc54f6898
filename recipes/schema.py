"""The config check: every config is a structured config (a dataclass schema stored in Hydra's ConfigStore) and
this module checks a composed one, before any model loads.

Each schema sits beside the code that reads it — the ``model`` and ``backend`` groups in
``data_builders/backends/config.py``, the ``tasks`` group in ``data_builders/tasks/config.py``, the ``agent``,
``pte`` and ``hardware`` groups beside the dataclasses the loop and PTE run on, the data_builders commands' entry
configs in ``data_builders/config.py``, the recipes in ``trainers/{controller,policy}/config.py``, the evaluator's
in ``trainers/evaluate/config.py``, the endpoint's in ``runtime/serve/config.py`` — and stores itself
(:func:`store`) when its module is imported: each command imports its own, and :func:`recipes.compose` the one of
the entry config it composes (:data:`recipes.ENTRY_SCHEMAS`). Every YAML file in ``recipes/`` extends its schema
through its defaults list (``defaults: [<schema>, _self_]``), so a misspelt key or a value of the wrong type fails
when Hydra composes the config.

Where each value lives (every default is written once, as TRL's ``GRPOConfig`` and litgpt's ``TrainArgs`` write
theirs): each field carries its default, a one-line help and the checks its value must pass
(``data_builders.config_fields.param``: ``choices``, bounds; a vocabulary the training code owns is named by
``module:attribute``, :func:`vocabulary`); a YAML file carries only what its option or recipe changes; a field each
option of its group sets has no default (``required``); a dataclass the code already runs on is the truth for its
fields (``data_builders.config_fields.derived``).

:func:`check_config` runs in :func:`recipes.compose` and, through :class:`CheckConfig` in ``hydra/settings.yaml``,
before every Hydra job: it refuses a key no schema declares (Hydra's ``+key=value`` opens a typed node for it), a
value outside its field's checks, and an override of a group or key the chosen recipe does not read (each recipe
schema's ``refusals``).
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import math
import operator
import typing
from typing import Any, Iterable

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf


def store(schemas: Iterable[tuple[str | None, str, type]]) -> None:
    """Store each (group or None for an entry config, name, dataclass) in Hydra's ConfigStore (storing a name again
    replaces it)."""
    cs = ConfigStore.instance()
    for group, name, node in schemas:
        cs.store(group=group, name=name, node=node)


def _where(cfg: DictConfig | ListConfig, key: Any, path: str) -> str:
    return f"{path}[{key}]" if isinstance(cfg, ListConfig) else f"{path}.{key}" if path else str(key)


def unknown_keys(cfg: DictConfig | ListConfig, path: str = "") -> list[str]:
    """Keys of dataclass-typed nodes that their dataclass does not declare (added with Hydra's ``+``), as
    dotted paths. The ``hydra`` node is Hydra's own."""
    node_type = OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None
    declared = {f.name for f in dataclasses.fields(node_type)} if dataclasses.is_dataclass(node_type) else None
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    out = []
    for key, value in items:
        if not path and key == "hydra":
            continue
        where = _where(cfg, key, path)
        if declared is not None and key not in declared:
            out.append(f"{where} (not a field of {node_type.__name__})")
        # a typed None node comes back as a container that holds None (OmegaConf has no public is_none)
        if isinstance(value, (DictConfig, ListConfig)) and not value._is_none():
            out.extend(unknown_keys(value, where))
    return out


_BOUNDS = (("ge", operator.ge, ">="), ("gt", operator.gt, ">"), ("le", operator.le, "<="), ("lt", operator.lt, "<"))


def not_finite(value: Any) -> list[float]:
    """The floats of ``value`` (a scalar, or a list's elements) that are inf or nan. Hydra's override grammar
    reads ``inf`` and ``nan`` as floats, and no bound refuses them all (``inf`` passes ``gt=0``, ``nan`` fails
    every comparison with a message about the bound): a learning rate, a weight decay, a temperature or a τ that
    is not finite would otherwise fail late, inside torch or as silently wrong decisions."""
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, float) and not math.isfinite(v)]


@functools.cache
def _float_fields(node_type: type) -> frozenset[str]:
    """The fields of a schema dataclass typed ``float`` (or ``Optional[float]``, ``List[float]``): checked for
    finiteness even when they carry no other check (the derived groups' fields carry none)."""
    def holds_float(hint: Any) -> bool:
        return hint is float or any(holds_float(arg) for arg in typing.get_args(hint))
    return frozenset(name for name, hint in typing.get_type_hints(node_type).items() if holds_float(hint))


@functools.cache
def _owned_vocabulary(ref: str) -> tuple:
    module, attr = ref.split(":")
    obj = getattr(importlib.import_module(module), attr)
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return tuple(member.value for member in obj)
    return tuple(obj)       # a tuple, or a registry dict's keys


def vocabulary(choices: Any) -> tuple:
    """A field's allowed values: written out, or named by ``module:attribute`` where the code that reads the value
    owns the list (so it is written once)."""
    return _owned_vocabulary(choices) if isinstance(choices, str) else tuple(choices)


def problem(value: Any, checks: dict) -> str | None:
    """What is wrong with ``value`` under a field's checks (:func:`param`), or None."""
    if value is None:
        return None
    if checks.get("finite", True):
        bad = not_finite(value)
        if bad:
            return f"{bad}: each must be a finite number" if isinstance(value, list) else "must be a finite number"
    if "choices" in checks and value not in vocabulary(checks["choices"]):
        return f"choose one of {', '.join(map(str, vocabulary(checks['choices'])))}"
    if "items" in checks:
        bad = [v for v in value if v not in vocabulary(checks["items"])]
        if bad:
            return f"{bad} not valid; choose from {', '.join(map(str, vocabulary(checks['items'])))}"
    for key, holds, word in _BOUNDS:
        if key in checks and not holds(value, checks[key]):
            return f"must be {word} {checks[key]}"
    return checks["check"](value) if "check" in checks else None


def value_errors(cfg: DictConfig | ListConfig, path: str = "") -> list[str]:
    """Values of dataclass-typed nodes that their field's checks refuse (an unknown choice, a count below 1, a
    negative rate, an inf or nan float), as ``key=value: reason``."""
    out = []
    node_type = OmegaConf.get_type(cfg) if isinstance(cfg, DictConfig) else None
    if dataclasses.is_dataclass(node_type):
        floats = _float_fields(node_type)
        for f in dataclasses.fields(node_type):
            checks = {k: v for k, v in f.metadata.items() if k not in ("help", "required")}
            if (not checks and f.name not in floats) or f.name not in cfg or OmegaConf.is_missing(cfg, f.name):
                continue
            value = cfg[f.name]
            value = OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) \
                else value
            why = problem(value, checks)
            if why:
                out.append(f"{_where(cfg, f.name, path)}={value!r}: {why}")
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    for key, value in items:
        if not path and key == "hydra":
            continue
        # a missing node (???) holds no value to check: OmegaConf.missing_keys reports it
        if isinstance(value, (DictConfig, ListConfig)) and not value._is_none() and not value._is_missing():
            out.extend(value_errors(value, _where(cfg, key, path)))
    return out


def build_key_errors(cfg: DictConfig) -> list[str]:
    """A controller recipe's ``points.build`` keys checked as ``data_builders.build`` will merge them onto its
    typed config: each a field of :class:`data_builders.config.BuildConfig` with a valid value."""
    recipe = cfg.get("recipe")
    if not isinstance(recipe, DictConfig) or not isinstance(recipe.get("points"), DictConfig):
        return []
    build_schema = OmegaConf.get_type(ConfigStore.instance().load("build_schema.yaml").node)   # data_builders.config
    fields = {f.name: f for f in dataclasses.fields(build_schema)}
    out = []
    for key, value in OmegaConf.to_container(recipe.points.build, resolve=True).items():
        where = f"recipe.points.build.{key}"
        if key not in fields:
            out.append(f"{where} (not a field of BuildConfig)")
            continue
        checks = {k: v for k, v in fields[key].metadata.items() if k not in ("help", "required")}
        why = problem(value, checks)
        if why:
            out.append(f"{where}={value!r}: {why}")
    return out


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The key or group each command-line override sets (``backend=vllm`` -> backend, ``+a.b=1`` -> a.b)."""
    return [o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))]


def refusals(cfg: DictConfig, overrides: Iterable[str]) -> list[str]:
    """Overrides the entry config or its recipe would ignore, and settings they cannot run with, each with the
    reason: the ``refusals`` of the root schema and of the recipe's."""
    keys = override_keys(overrides)
    out = []
    for node in (cfg, cfg.get("recipe")):
        node_type = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if hasattr(node_type, "refusals"):
            out.extend(node_type.refusals(cfg, keys))
    return out


def check_config(cfg: DictConfig, overrides: Iterable[str] = ()) -> DictConfig:
    """``cfg`` itself, or a ConfigCompositionException naming every key no schema declares, every value its
    field's checks refuse, and every override (``overrides``: the command line's) the config would ignore."""
    bad = unknown_keys(cfg)
    if bad:
        raise ConfigCompositionException(f"unknown config key(s): {', '.join(bad)}; each node's schema lists "
                                          f"its fields (a '+' override cannot add one)")
    bad = value_errors(cfg) + build_key_errors(cfg)
    if bad:
        raise ConfigCompositionException(f"invalid config value(s): {'; '.join(bad)} (each field's help and checks are "
                                          f"in its schema's module: recipes/schema.py lists where)")
    bad = refusals(cfg, overrides)
    if bad:
        raise ConfigCompositionException(f"refused: {'; '.join(bad)}")
    return cfg


class CheckConfig(Callback):
    """Hydra callback (``hydra.callbacks`` in ``hydra/settings.yaml``): :func:`check_config` before each job, with
    the job's own overrides.

    Hydra turns an exception raised in a callback into a warning and runs the job anyway, so a bad config ends
    the command with ``SystemExit`` (which it does not catch) and the exception's message instead."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            check_config(config, config.hydra.overrides.task)
        except ConfigCompositionException as e:
            raise SystemExit(f"Error composing the config: {e}") from e
