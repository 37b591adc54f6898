"""The recipe interface: what ``python -m trainers.fit`` passes a recipe's ``fit(recipe, cfg, run)`` and what the
recipe returns.

It lives apart from the launcher so that a recipe module never imports its own entry point: under
``python -m trainers.fit`` the launcher runs as ``__main__``, and a recipe importing ``trainers.fit`` would load
it a second time under its module name."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunInfo:
    """Run state a recipe needs and the config does not hold (the config stays what the user composed)."""

    dir: Path                              # Hydra's job directory: logs, trainer state, recipe.yaml
    command: str                           # the command line that reproduces the run (model cards)
    report_to: tuple[str, ...] = ()        # TRL's report_to: ("wandb",) when the logger is W&B
    multirun: bool = False                 # a sweep job: exports stay in its job directory

    def export_dir(self, configured: str | Path) -> Path:
        """Where the run exports: the recipe's directory, or the job's own one inside a sweep (sweep
        candidates are not releases)."""
        return self.dir / "export" if self.multirun else Path(configured)


@dataclass
class Fitted:
    """What a recipe returns: where it exported, and the validation objective a sweeper ranks runs by."""

    export_dir: Path
    objective: float                       # higher is better unless ``objective_name`` says loss
    objective_name: str
    metrics: dict = field(default_factory=dict)
