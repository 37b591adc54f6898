"""The gate registry: a gate is one module exporting one :class:`Gate` spec, and this package finds them.

A gate (a learned controller at one decision moment of the agent loop) is everything the framework needs to build
its points, fit it, evaluate it as an arm and serve it, written once in its spec:

* its **name**: the controller recipe (``python -m trainers.fit recipe=<name>``), its checkpoints
  (``checkpoints/<name>/``), its evaluator arm (``arms.<name>``) and its runtime-API / endpoint gate
  (``Gates.load(<name>=...)``, ``gates.<name>=...``, ``gates.taus.<name>``);
* its decision-point **kind** (``python -m data_builders.build kind=<kind>``), the **featurizer** that computes its
  input at build time and at run time, and the **labeler** that builds its points;
* the **controller** class the recipe fits (a ``controllers.REGISTRY`` name) and the recipe's constructor-args
  dataclass (``recipe.controller``);
* the **moment** it decides at (a :class:`~data_builders.agent.hooks.Hooks` method, :data:`MOMENTS`), how its
  run-time input is read from that moment's state, and its **actions** at p >= τ and below;
* **on_error**: what a server applies when the gate itself fails, for each of :data:`ON_ERROR_MODES`.

Gates are found as the environments and task generators are: every module of this package that exports ``GATE``,
then every module named by the ``toolwise.gates`` entry-point group of installed distributions and by the
``TOOLWISE_GATES`` environment variable (comma-separated dotted module paths), so a gate written outside the
package is registered by naming its module, with nothing inside the package edited
(docs/architecture.md#add-a-controller). Only names and light callables live in a spec: the labeler is a
``module:function`` path imported when a build asks for it (it loads the agent loop), and the controller class is
resolved through ``controllers`` by the layers above (this package imports neither ``controllers`` nor
``trainers``).
"""
from __future__ import annotations

import os
import pkgutil
from importlib import import_module
from importlib.metadata import entry_points

from .spec import MOMENTS, ON_ERROR_MODES, Gate

__all__ = ["Gate", "MOMENTS", "ON_ERROR_MODES", "GATES_ENV", "ENTRY_POINT_GROUP", "gates", "reload", "gate_named",
           "gate_of_kind", "gates_at"]

#: the environment variable naming gate modules outside the package (comma-separated dotted paths)
GATES_ENV = "TOOLWISE_GATES"
#: the entry-point group an installed distribution registers its gate modules under
ENTRY_POINT_GROUP = "toolwise.gates"


def _modules() -> list[str]:
    """Every module that may export a gate: this package's, then entry points, then ``TOOLWISE_GATES``."""
    names = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)]
    names += [ep.value.split(":")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)]
    names += [m.strip() for m in os.environ.get(GATES_ENV, "").split(",") if m.strip()]
    return names


_registry: dict[str, Gate] | None = None
_partial: dict[str, Gate] | None = None      # the gates found so far, while discovery runs


def gates() -> dict[str, Gate]:
    """Name -> gate, by moment in the loop's order, then in discovery order (the package's own first, alphabetically,
    then entry points, then ``TOOLWISE_GATES``). Found once per process: a
    ``TOOLWISE_GATES`` set after the first call is not read (:func:`reload` re-discovers)."""
    global _registry, _partial
    if _registry is None:
        if _partial is not None:
            # a gate module that reads the registry as it is imported (e.g. to extend a built-in gate's spec) sees
            # the gates found before it: the package's own come first
            return _partial
        found: dict[str, Gate] = {}
        _partial = found
        try:
            _discover(found)
        finally:
            _partial = None
        # in the order the agent loop meets their moments (a cascade asks, a report lists them so), stable within one
        order = list(MOMENTS)
        _registry = dict(sorted(found.items(), key=lambda item: order.index(item[1].moment)))
    return _registry


def _discover(found: dict[str, Gate]) -> None:
    for module in _modules():
        try:
            gate = getattr(import_module(module), "GATE", None)
        except ImportError as e:
            raise ImportError(f"gate module {module!r} (from {GATES_ENV} or the {ENTRY_POINT_GROUP!r} entry "
                              f"points) cannot be imported: {e}") from e
        if gate is None:
            if not module.startswith(__name__ + "."):
                raise ValueError(f"gate module {module!r} exports no GATE (a data_builders.gates.Gate)")
            continue
        for other in found.values():
            if gate.name == other.name or gate.kind == other.kind:
                raise ValueError(f"gate module {module!r}: name {gate.name!r} / kind {gate.kind!r} is already "
                                 f"the gate {other.name!r}'s")
        found[gate.name] = gate


def reload() -> dict[str, Gate]:
    """Discover the gates again (after ``TOOLWISE_GATES`` changed)."""
    global _registry
    _registry = None
    return gates()


def gate_named(name: str) -> Gate:
    """The gate named ``name`` (a recipe, arm or runtime gate name), refused with the known names otherwise."""
    if name not in gates():
        raise ValueError(f"unknown gate {name!r}; gates: {sorted(gates())}")
    return gates()[name]


def gate_of_kind(kind: str) -> Gate:
    """The gate whose decision points are of ``kind``."""
    for gate in gates().values():
        if gate.kind == kind:
            return gate
    raise ValueError(f"unknown decision-point kind {kind!r}; kinds: {sorted(g.kind for g in gates().values())}")


def gates_at(moment: str) -> list[Gate]:
    """The gates that decide at ``moment``, in registry order (a cascade asks them in this order)."""
    return [g for g in gates().values() if g.moment == moment]
