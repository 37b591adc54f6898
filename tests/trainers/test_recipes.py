"""Recipes and sweep specs: every YAML composes, names a real trainer / controller / featurizer, and every
sweep grid expands into overrides that land in the composed config."""
from __future__ import annotations

import itertools
import math
import random
import re
from pathlib import Path

import pytest
from hydra import compose as hydra_compose, initialize_config_dir
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict

import controllers
import recipes
from data_builders.gates import gate_named, gates
from trainers import fit as fit_entry
from trainers import sweep

RECIPE_DIR = Path(recipes.CONFIG_DIR) / "recipe"
SWEEP_DIR = Path(recipes.CONFIG_DIR) / "sweep"
RECIPE_NAMES = sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))
SWEEPS = sorted(SWEEP_DIR.glob("*.yaml"))
EXPERIMENTS = sorted((Path(recipes.CONFIG_DIR) / "experiment").glob("*.yaml"))


def test_every_trainer_has_a_recipe_file_and_vice_versa():
    assert RECIPE_NAMES and set(RECIPE_NAMES) == set(fit_entry.recipes())
    assert {p.stem for p in SWEEPS} <= set(RECIPE_NAMES)
    with pytest.raises(SystemExit, match="unknown recipe 'nope'"):
        fit_entry.resolve("nope")


@pytest.mark.parametrize("name", RECIPE_NAMES)
def test_recipe_composes_and_names_its_trainer(name):
    cfg = recipes.compose("fit", [f"recipe={name}", "logger=none"])
    recipe = cfg.recipe
    assert recipe.name == name and name in fit_entry.recipes()
    assert callable(fit_entry.resolve(name))
    # Hydra reads the package directive only above every other line; the command that runs the recipe follows it
    package, command = (RECIPE_DIR / f"{name}.yaml").read_text().splitlines()[:2]
    assert package == "# @package _global_" and command == f"# python -m trainers.fit recipe={name}"
    assert "model" not in recipe                     # the policy is the model group (cfg.model)
    if "controller" in recipe:                     # the controller recipes: one per gate, named as the gate
        assert fit_entry.recipes()[name] == "trainers.controller.fit:fit" and name in gates()
        assert "kind" not in recipe.points and "type" not in recipe.controller   # the gate's, not settings
        assert recipe.train.optimizer in ("lbfgs", "adamw")
        from trainers.controller.calibration import TAU_METHODS

        assert recipe.calibration.tau_method in TAU_METHODS
        # the controller's own keys are its class's constructor arguments
        params = OmegaConf.to_container(recipe.controller, resolve=True)
        cls = controllers.REGISTRY[gate_named(name).controller]
        import inspect

        assert set(params) <= set(inspect.signature(cls.__init__).parameters), (cls, params)


@pytest.mark.parametrize("override", ["recipe.points.kind=flip", "recipe.controller.type=toolgate_logistic"])
def test_a_controller_recipe_cannot_restate_its_gates_names(override):
    """The decision-point kind and the controller class are the recipe's gate's (data_builders.gates): a key that
    set them would only be able to disagree with it."""
    with pytest.raises(ConfigCompositionException, match=f"Could not override '{override.split('=')[0]}'"):
        recipes.compose("fit", ["recipe=probe_prefill", "logger=none", override])


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_composes_onto_a_recipe(path):
    """An experiment (``+experiment=<name>``: a named release's settings, e.g. tool_sft_v3) is a recipe plus
    overrides; its second line is the command that runs it, and what it sets lands in the composed config."""
    package, command = path.read_text().splitlines()[:2]
    assert package == "# @package _global_" and command == f"# python -m trainers.fit +experiment={path.stem}"
    cfg = recipes.compose("fit", [f"+experiment={path.stem}", "logger=none"])
    assert cfg.recipe.name in fit_entry.recipes() and "model" not in cfg.recipe
    def lands(set_: object, got: object) -> bool:   # every value the file sets is in the config (schema fills the rest)
        if isinstance(set_, dict):
            return all(lands(v, got[k]) for k, v in set_.items())
        if isinstance(set_, list):
            return len(set_) == len(got) and all(lands(a, b) for a, b in zip(set_, got))
        return set_ == got

    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    spec.pop("defaults", None)
    assert lands(spec, OmegaConf.to_container(cfg, resolve=False))


@pytest.mark.parametrize("spec_path", SWEEPS, ids=lambda p: p.stem)
def test_sweep_spec_is_a_wandb_command_for_its_recipe(spec_path):
    spec = sweep.load_spec(spec_path)
    assert sweep.load_spec(spec_path.stem) == spec          # a bare name resolves in recipes/sweep/
    assert "${args_no_hyphens}" in spec["command"]
    assert f"recipe={spec_path.stem}" in spec["command"]
    assert sweep.recipe_override(spec) == f"recipe={spec_path.stem}"
    split, metric = spec["metric"]["name"].split("/", 1)
    assert split == "val" and spec["metric"]["goal"] in ("maximize", "minimize")   # never selects on test
    assert metric in ("auroc", "accuracy", "ece", "brier", "missed", "action_rate")


def _spec_value(spec: dict, key: str, text: str):
    """The spec value of ``key`` whose override spelling is ``text``."""
    p = spec["parameters"][key]
    values = p["values"] if "values" in p else [p["value"]]
    hits = [v for v in values if sweep._fmt(v) == text]
    assert len(hits) == 1, (key, text, values)
    return hits[0]


def _sample_point(spec: dict, seed: int) -> list[str]:
    """One point of the grid as ``trainers.fit`` overrides, as a W&B agent passes them (``${args_no_hyphens}``)."""
    rng = random.Random(seed)
    return [sweep.recipe_override(spec)] + [f"{k}={sweep._fmt(rng.choice(sweep._values(k, p)))}"
                                            for k, p in spec["parameters"].items()]


@pytest.mark.parametrize("spec_path", SWEEPS, ids=lambda p: p.stem)
def test_sampled_points_compose_and_land_in_the_config(spec_path):
    spec = sweep.load_spec(spec_path)
    for seed in range(3):
        point = _sample_point(spec, seed)
        assert point[0] == f"recipe={spec_path.stem}" and len(point) == 1 + len(spec["parameters"])
        cfg = recipes.compose("fit", point)
        assert cfg.recipe.name == spec_path.stem
        for override in point[1:]:
            key, text = override.split("=", 1)
            want = _spec_value(spec, key, text)
            got = OmegaConf.select(cfg, key, throw_on_missing=True)
            assert got == want and type(got) is type(want), (key, got, want)


@pytest.mark.parametrize("spec_path", SWEEPS, ids=lambda p: p.stem)
def test_multirun_overrides_parse_into_the_grid(spec_path):
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    spec = sweep.load_spec(spec_path)
    overrides = sweep.multirun_overrides(spec)
    assert overrides[0] == f"recipe={spec_path.stem}"
    parsed = OverridesParser.create().parse_overrides(overrides)
    grid = {}
    for o, text in zip(parsed[1:], overrides[1:]):
        p = spec["parameters"][o.key_or_group]
        want = list(p["values"]) if "values" in p else [p["value"]]
        got = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
        assert o.is_sweep_override() == (len(want) > 1), text
        assert got == want and [type(g) for g in got] == [type(w) for w in want], (text, got, want)
        grid[o.key_or_group] = want
    # Hydra's basic sweeper expands the grid into one job per combination; the corners compose
    jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    assert len(jobs) == math.prod(len(v) for v in grid.values())
    assert len({tuple(j) for j in jobs}) == len(jobs)
    for job in (jobs[0], jobs[-1]):
        cfg = recipes.compose("fit", job)
        combo = {k: OmegaConf.select(cfg, k) for k in grid}
        assert combo in [dict(zip(grid, c)) for c in itertools.product(*grid.values())]


def test_load_spec_requires_command_parameters_and_metric(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("command: [python, -m, trainers.fit, recipe=g_step]\nparameters: {}\n")
    with pytest.raises(ValueError, match="sweep spec has no 'metric'"):
        sweep.load_spec(bad)
    two = {"command": ["recipe=g_step", "recipe=toolgate"], "parameters": {}, "metric": {}}
    with pytest.raises(ValueError, match="exactly one recipe="):
        sweep.recipe_override(two)
    with pytest.raises(ValueError, match="needs 'values' or 'value'"):
        sweep.multirun_overrides({"command": ["recipe=g_step"], "parameters": {"x": {"min": 0, "max": 1}}})


def test_fit_records_each_multirun_objective_and_the_sweep_ranks_them(tmp_path):
    """fit.yaml's RecordObjective callback appends what each multirun job returned; ranked_runs orders it."""
    recipes.register()     # the schemas, as a command's own imports store them
    with initialize_config_dir(config_dir=recipes.CONFIG_DIR, version_base="1.3"):
        cfg = hydra_compose("fit", ["recipe=g_step"], return_hydra_config=True)
    record = next(c for c in map(instantiate, cfg.hydra.callbacks.values()) if isinstance(c, sweep.RecordObjective))
    with open_dict(cfg):
        cfg.hydra.sweep.dir = str(tmp_path)
        cfg.hydra.mode = RunMode.MULTIRUN
        for num, (status, value, lr) in enumerate([(JobStatus.COMPLETED, 0.71, "0.001"),
                                                   (JobStatus.COMPLETED, 0.93, "0.003"),
                                                   (JobStatus.COMPLETED, float("nan"), "0.01"),  # no val AUROC
                                                   (JobStatus.FAILED, RuntimeError("died"), "0.1")]):
            cfg.hydra.job.num = num
            job = JobReturn(overrides=["recipe=g_step", f"recipe.train.lr={lr}"], status=status, _return_value=value)
            record.on_job_end(config=cfg, job_return=job)
    best_first = sweep.ranked_runs(tmp_path, "maximize")
    assert [label for _, label in best_first] == [f"recipe=g_step recipe.train.lr={lr}" for lr in
                                                  ("0.003", "0.001", "0.01")]     # the failed job: not listed
    assert best_first[:2] == [(0.93, "recipe=g_step recipe.train.lr=0.003"),
                              (0.71, "recipe=g_step recipe.train.lr=0.001")] and math.isnan(best_first[2][0])
    assert [v for v, _ in sweep.ranked_runs(tmp_path, "minimize")][:2] == [0.71, 0.93]
    assert sweep.ranked_runs(tmp_path / "nothing", "maximize") == []


@pytest.mark.parametrize("override, owner", [
    ("recipe=probe_prefill recipe.calibration.tau_method=nope", "trainers.controller.calibration:TAU_METHODS"),
    ("recipe=pte_grpo recipe.reward.kind=nope", "trainers.policy.rewards:REWARDS"),
    ("recipe=tool_sft recipe.train.lr_scheduler_type=nope", "transformers.trainer_utils:SchedulerType"),
    ("recipe=g_step model.dtype=nope", None)])
def test_a_value_outside_the_owning_codes_list_is_refused_naming_that_list(override, owner):
    """Values the training code owns are checked against the code's own list (named by module:attribute, read when
    the config is checked), so the schema holds no copy that could drift."""
    from data_builders.backends import DTYPES
    from recipes.schema import vocabulary

    allowed = ("auto", *DTYPES) if owner is None else vocabulary(owner)
    assert "nope" not in allowed and len(allowed) >= 2
    with pytest.raises(ConfigCompositionException, match="choose one of " + re.escape(", ".join(map(str, allowed)))):
        recipes.compose("fit", ["logger=none", *override.split()])
