"""The controller recipes' schemas: one per gate of the registry (``recipe=<gate>``), what trainers.controller reads."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, Optional

from data_builders.config_fields import param, required
from data_builders.gates import gates
from recipes import CONFIG_DIR
from recipes.schema import store
from trainers.config import Recipe


# the τ methods calibration.py owns, by name: read when a config is checked (recipes.schema.vocabulary), so this
# module stays light for the entry points that compose a recipe without running it
TAU_METHODS = "trainers.controller.calibration:TAU_METHODS"


@dataclass
class Points:
    """Where a controller recipe's decision points come from. Their kind is the recipe's gate's (data_builders.gates),
    not a setting."""
    root: str = param("outputs/points", "built datasets go to <root>/<kind>/<source>-<hash of the build config>")
    dir: Optional[str] = param(None, "an existing dataset directory (python -m data_builders.build ...) instead")
    # Free-form: keys of the ``build`` entry config set for this recipe; trainers/controller/points.py merges
    # them onto the composed (typed) build config, and check_config checks them against BuildConfig.
    build: Dict[str, Any] = param({}, "data_builders.build keys (recipes/build.yaml) for this recipe's build")
    label: str = param("label", "the column the fit learns from on train and val: label (the build's rule) | "
                                "free_label (gold-free labels of a free_labels=true build); test is always scored "
                                "on label, so a fit on free_label is measured against gold",
                       choices=("label", "free_label"))


@dataclass
class ControllerTrain:
    """The Lightning fit of a controller (trainers/controller/training.py, module.py)."""
    optimizer: str = param("lbfgs", "lbfgs: full-batch L-BFGS to the optimum of a convex loss | adamw",
                           choices=("lbfgs", "adamw"))
    lr: float = param(1.0, "learning rate (L-BFGS: its step size)", gt=0)
    weight_decay: float = param(0.0, "AdamW's decoupled weight decay", ge=0)
    l2: float = param(0.0, "0.5 l2 |W|^2 on the mean balanced loss (scikit-learn's C = 1 / (l2 N))", ge=0)
    batch_size: Optional[int] = param(None, "points per step; null = the full batch", ge=1)
    max_epochs: int = param(3, "passes over the train split", ge=1)
    lbfgs_max_iter: int = param(100, "L-BFGS iterations per step (lbfgs only)", ge=1)
    class_balance: bool = param(True, "weight each class N / (2 n_class)")
    seed: int = param(0, "initialisation and shuffling")


@dataclass
class Calibration:
    """A logit temperature and the operating point τ, both chosen on the validation split."""
    temperature: bool = param(True, "fit a logit temperature on val")
    tau_method: str = param("fixed", "fixed | target_call_rate | max_acc_loss (trainers/controller/calibration.py)",
                            choices=TAU_METHODS)
    tau_value: float = param(0.5, "fixed: τ itself; target_call_rate: the call rate; max_acc_loss: the share of "
                                  "helpful calls that may be missed", ge=0, le=1)


CONTROLLER_UNUSED = {"hardware": "a controller fit prices nothing in PTE (only pte_grpo reads the hardware group)"}


@dataclass
class ControllerRecipe(Recipe):
    """A gate's recipe: one shape but for the controller's own arguments (and the fields a gate adds)."""
    UNUSED: ClassVar[Dict[str, str]] = CONTROLLER_UNUSED
    name: str = required("the recipe (one per gate: trainers.fit.recipes)")
    export_dir: str = required("where the controller is exported")
    points: Points = param(Points(), "decision points")
    controller: Any = required("the controller's constructor arguments")
    train: ControllerTrain = param(ControllerTrain(), "the fit")
    calibration: Calibration = param(Calibration(), "temperature and τ")


def controller_recipe(gate) -> type:
    """The recipe schema of a gate (``recipe=<gate>``): ControllerRecipe with the gate's controller arguments and
    the recipe fields its spec adds (data_builders.gates)."""
    fields = [("name", str, param(gate.name, "the recipe (one per gate: trainers.fit.recipes)")),
              ("export_dir", str, param(f"checkpoints/{gate.name}/${{now:%Y-%m-%d_%H-%M-%S}}",
                                        "where the controller is exported")),
              ("controller", gate.args, param(gate.args(), f"the {gate.controller} controller's arguments")),
              *gate.recipe_fields]
    cls = dataclasses.make_dataclass(f"{gate.args.__name__}Recipe", fields, bases=(ControllerRecipe,))
    cls.__module__ = __name__
    return cls


# what this module adds to Hydra's ConfigStore: each gate's recipe schema, and the recipe itself for a gate without a
# recipe file (one written outside the package runs on its schema's defaults: ``recipe=<gate>``)
SCHEMAS = [("recipe", f"{g.name}_schema", controller_recipe(g)) for g in gates().values()]
SCHEMAS += [("recipe", g.name, controller_recipe(g)) for g in gates().values()
            if not (Path(CONFIG_DIR) / "recipe" / f"{g.name}.yaml").is_file()]
store(SCHEMAS)
