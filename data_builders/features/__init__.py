"""The featurizers: the only code that turns a decision moment into a controller input
(docs/architecture.md#dependency-direction).

The labelers call them at build time and the agent hooks at run time, so a controller always sees features
computed by the same function on the same state. One per decision-point kind, named by its gate's spec
(``data_builders.gates``, the gate registry); the built-in ones:

==========  ==========================  =====================================================================
kind        featurizer                  input at the decision moment
==========  ==========================  =====================================================================
probe       ``last_token_hidden`` v1    hidden states of the first prompt's last token, every layer (When2Tool, arXiv 2605.09252)
flip        ``toolgate_minilm`` v3      MiniLM embedding of the pending call and the question + structural (arXiv 2606.03054)
commit      ``gstep`` v2                fixed-length vector of trajectory/answer/log-prob statistics (arXiv 2605.00136)
==========  ==========================  =====================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Featurizer:
    kind: str
    module: str                             # a module of ``package``
    # None: ``module`` is a full dotted path (a gate's featurizer written outside this package)
    package: str | None = __name__

    @property
    def _mod(self):
        return import_module(f"{self.package}.{self.module}" if self.package else self.module)

    @property
    def name(self) -> str:
        return self._mod.FEATURIZER_NAME

    @property
    def version(self) -> int:
        return self._mod.FEATURIZER_VERSION

    @property
    def id(self) -> dict:
        return {"name": self.name, "version": self.version}

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        """The named feature columns (``FEATURE_NAMES``: ToolGate's structural features, G-STEP's vector), which a
        checkpoint records and the contract check compares; None for a featurizer without named columns (the
        probe's hidden states)."""
        names = getattr(self._mod, "FEATURE_NAMES", None)
        return tuple(names) if names is not None else None

    def controller_input(self, tensors: dict):
        """The controller's input tensor from the named feature tensors this featurizer produced (a dataset
        shard's tensors at training time, the hook's at run time): one assembly rule for both."""
        return self._mod.controller_input(tensors)

