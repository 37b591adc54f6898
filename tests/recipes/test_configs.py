"""The Hydra config root against its structured configs (recipes/S.py): every entry config composes with
every option of every group it selects, every node is typed by a dataclass (bar the declared free-form ones),
unknown keys, wrong types, values outside a field's checks and overrides a recipe would ignore fail at compose
time, and each default is written once: on its schema field, never again in a YAML file. No model, no torch."""
from __future__ import annotations

import dataclasses
import importlib
import json
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra import compose as hydra_compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

import recipes
from data_builders.gates import gate_named
from data_builders.agent.loop import AgentConfig
from data_builders.metrics import hardware
from data_builders.metrics.pte import PTEConfig
from recipes import schema

# every config module's schemas and names, as one namespace (each module stores its own: recipes.ENTRY_SCHEMAS)
recipes.register()
CONFIG_MODULES = sorted({m for ms in recipes.ENTRY_SCHEMAS.values() for m in ms} |
                        {"data_builders.backends.config", "data_builders.tasks.config", "data_builders.metrics.config",
                         "data_builders.agent.config"})
S = SimpleNamespace(**{k: v for m in CONFIG_MODULES for k, v in vars(importlib.import_module(m)).items()
                       if not k.startswith("_") and k != "SCHEMAS"},
                    SCHEMAS=[s for m in CONFIG_MODULES for s in importlib.import_module(m).SCHEMAS],
                    CheckConfig=schema.CheckConfig)

ROOT = Path(recipes.CONFIG_DIR)
REPO = ROOT.parent


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / group).glob("*.yaml"))


# The groups each entry config selects (its defaults list), and what it needs to compose at all.
ENTRY_GROUPS = {
    "fit": ["recipe", "model", "backend", "tasks", "logger", "hardware", "checkpoints", "trainer"],
    "build": ["model", "backend", "tasks", "checkpoints", "executor"],
    "rollout": ["model", "backend", "tasks", "agent", "checkpoints", "executor"],
    "evaluate": ["model", "backend", "tasks", "agent", "pte", "hardware", "logger", "checkpoints", "executor"],
    "factorized": ["model", "backend", "tasks", "agent", "pte", "hardware", "logger", "checkpoints"],
    "oracle": ["tasks"],
    "sft_data": ["tasks"],
    "serve": ["upstream", "model", "backend", "checkpoints"],
}
BASE = {"fit": ["recipe=g_step"]}                     # fit has no default recipe
# A group option composed with a recipe that reads it: only pte_grpo prices episodes on a hardware profile.
GROUP_BASE = {("fit", "hardware"): ["recipe=pte_grpo"]}
NEEDS = {"model=hf": ["model.name=/some/dir"]}       # hf's model.name is mandatory
# Options an entry config refuses (test_an_override_a_config_would_ignore_is_refused_naming_it checks why).
REFUSED = {("factorized", "tasks", name) for name in options("tasks") if name != "gsm8k"}
# Nodes typed as free-form on purpose (recipes/S.py says why), with everything under them.
FREE_FORM = ("recipe.points.build", "backend.engine_kwargs", "arms.policies[", "tasks.sources")

CASES = [(entry, [*GROUP_BASE.get((entry, group), BASE.get(entry, [])), f"{group}={name}",
                  *NEEDS.get(f"{group}={name}", [])])
         for entry, groups in ENTRY_GROUPS.items() for group in groups for name in options(group)
         if (entry, group, name) not in REFUSED]
CASES += [("fit", [f"+experiment={p.stem}"]) for p in sorted((ROOT / "experiment").glob("*.yaml"))]


def untyped_nodes(cfg: DictConfig | ListConfig, path: str = "") -> list[str]:
    """Paths of DictConfig nodes whose type is not a dataclass, outside FREE_FORM."""
    out = []
    items = cfg.items_ex(resolve=False) if isinstance(cfg, DictConfig) else enumerate(cfg)
    for key, value in items:
        where = f"{path}[{key}]" if isinstance(cfg, ListConfig) else f"{path}.{key}" if path else str(key)
        if not isinstance(value, (DictConfig, ListConfig)) or value._is_none() or where.startswith(FREE_FORM):
            continue
        if isinstance(value, DictConfig) and not dataclasses.is_dataclass(OmegaConf.get_type(value)):
            out.append(where)
        out.extend(untyped_nodes(value, where))
    return out


def test_every_group_option_is_composed_below():
    # W&B specs; Hydra's own; `accelerate launch` configs (not Hydra configs); experiments (global overrides added
    # with +experiment=, composed below and in tests/trainers/test_recipes.py)
    groups = {p.parent.name for p in ROOT.glob("*/*.yaml")} - {"sweep", "hydra", "accelerate", "experiment"}
    assert groups == {g for gs in ENTRY_GROUPS.values() for g in gs}
    assert {(None, f"{e}_schema") for e in ENTRY_GROUPS} <= {(g, n) for g, n, _ in S.SCHEMAS}


@pytest.mark.slow
@pytest.mark.parametrize("entry,overrides", CASES, ids=[f"{e}:{o[-1] if e != 'fit' else ' '.join(o)}"
                                                        for e, o in CASES])
def test_entry_config_composes_fully_typed(entry, overrides):
    cfg = recipes.compose(entry, overrides)
    assert dataclasses.is_dataclass(OmegaConf.get_type(cfg))
    assert untyped_nodes(cfg) == []
    assert not OmegaConf.missing_keys(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "out_dir"]))
    for group in ENTRY_GROUPS[entry]:
        assert dataclasses.is_dataclass(OmegaConf.get_type(cfg[group])), group


def test_the_free_form_nodes_are_the_declared_ones():
    cfg = recipes.compose("evaluate", ["arms.policies=[{name: bare, model: {name: smollm2, adapter: null}}]"])
    assert OmegaConf.to_container(cfg.arms.policies[0]) == {"name": "bare", "model": {"name": "smollm2",
                                                                                        "adapter": None}}
    assert untyped_nodes(cfg) == []
    assert untyped_nodes(OmegaConf.create({"a": {"b": 1}})) == ["a"]      # the walker sees untyped nodes
    build = recipes.compose("fit", ["recipe=g_step"]).recipe.points.build
    assert OmegaConf.get_type(build) is dict and build.limit == 32


@pytest.mark.parametrize("entry,override,error", [
    ("fit", "recipe.train.lrr=1", "Could not override 'recipe.train.lrr'"),
    ("fit", "+model.new_key=1", r"model.new_key \(not a field of ModelConfig\)"),
    ("fit", "+recipe.train.lrr=1", r"recipe.train.lrr \(not a field of ControllerTrain\)"),
    ("fit", "model.max_batch_size=abc", "model.max_batch_size=abc"),
    ("fit", "recipe.calibration.temperature=maybe", "recipe.calibration.temperature"),
    ("evaluate", "agent.max_rounds=four", "agent.max_rounds"),
    ("evaluate", "agent.reasoning=true", "agent.reasoning"),          # chosen per arm, not an agent setting
    ("evaluate", "+pte.hardware=h100_sxm_dense", r"pte.hardware \(not a field of PTESettings\)"),
    ("rollout", "+tasks.n_per_cel=3", r"tasks.n_per_cel \(not a field of BuiltinTasksConfig\)"),
    ("build", "+bogus=1", r"bogus \(not a field of BuildConfig\)"),
])
def test_unknown_keys_and_wrong_types_fail_at_compose_time(entry, override, error):
    overrides = [*BASE.get(entry, []), override]
    with pytest.raises(ConfigCompositionException, match=error):
        recipes.compose(entry, overrides)


def test_a_typo_in_a_yaml_file_fails_at_compose_time(tmp_path):
    bad = tmp_path / "recipes"
    shutil.copytree(ROOT, bad, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    text = (bad / "recipe" / "g_step.yaml").read_text()
    (bad / "recipe" / "g_step.yaml").write_text(text.replace("    lr: 1.0e-3", "    lrr: 1.0e-3"))
    with initialize_config_dir(config_dir=str(bad), version_base="1.3"):
        with pytest.raises(ConfigCompositionException, match="lrr"):
            hydra_compose("fit", ["recipe=g_step"])


def test_every_hydra_job_checks_keys_before_it_runs():
    """hydra/settings.yaml's callback ends a job whose config has a key no schema declares (Hydra's own
    callback runner would only warn about an exception)."""
    for entry, groups in ENTRY_GROUPS.items():
        group = "tasks" if "tasks" in groups else "model"
        with initialize_config_dir(config_dir=recipes.CONFIG_DIR, version_base="1.3"):
            cfg = hydra_compose(entry, [*BASE.get(entry, []), f"+{group}.bogus=1"], return_hydra_config=True)
        callbacks = [instantiate(c) for c in cfg.hydra.callbacks.values()]
        assert any(isinstance(c, schema.CheckConfig) for c in callbacks), entry
        check = next(c for c in callbacks if isinstance(c, schema.CheckConfig))
        with pytest.raises(SystemExit, match=rf"{group}.bogus \(not a field of"):
            check.on_job_start(config=cfg, task_function=None)


@pytest.mark.parametrize("entry", ENTRY_GROUPS)
def test_one_hydra_settings_file(entry):
    with initialize_config_dir(config_dir=recipes.CONFIG_DIR, version_base="1.3"):
        cfg = hydra_compose(entry, BASE.get(entry, []), return_hydra_config=True)
    assert cfg.hydra.job.chdir is False
    run_dir = OmegaConf.to_container(cfg.hydra.run, resolve=False)["dir"]
    assert run_dir.startswith("outputs/fit/${recipe.name}/" if entry == "fit" else "outputs/${hydra.job.config_name}/")
    # the settings live in hydra/settings.yaml; fit.yaml changes only its run directories and adds a callback
    assert not re.search(r"^hydra:", (ROOT / f"{entry}.yaml").read_text(), re.M) or entry == "fit"


# ------------------------------------------------------------------------------------------- the policy
@pytest.mark.parametrize("name", ["tool_sft", "pte_grpo"])
def test_policy_recipes_read_their_policy_from_the_model_group(name):
    cfg = recipes.compose("fit", [f"recipe={name}"])
    assert "model" not in cfg.recipe and "start_adapter" not in cfg.recipe
    other = recipes.compose("fit", [f"recipe={name}", "model=hf", "model.name=/some/dir"])
    assert other.model.name == "/some/dir" and other.model.adapter is None


def test_tool_sft_starts_from_the_bare_base_and_pte_grpo_from_the_tool_sft_policy():
    sft = recipes.compose("fit", ["recipe=tool_sft"])
    assert sft.model.name == "smollm2" and sft.model.adapter is None
    grpo = recipes.compose("fit", ["recipe=pte_grpo"])
    assert grpo.model.name == "smollm2" and grpo.model.adapter == grpo.checkpoints.tool_sft
    assert (REPO / grpo.model.adapter / "adapter_config.json").is_file()
    # the command line wins over a recipe's own choice
    chosen = recipes.compose("fit", ["recipe=tool_sft", "model=smollm2_tool_sft"])
    assert chosen.model.adapter == sft.checkpoints.tool_sft


def test_every_entry_config_defaults_to_the_tool_sft_policy():
    for entry in ("build", "rollout", "evaluate", "factorized"):
        cfg = recipes.compose(entry)
        assert OmegaConf.get_type(cfg.model) is S.ModelConfig
        assert (cfg.model.name, cfg.model.adapter) == ("smollm2", cfg.checkpoints.tool_sft), entry
    for controller in ("g_step", "probe_prefill", "toolgate"):
        cfg = recipes.compose("fit", [f"recipe={controller}"])
        assert cfg.model.adapter == cfg.checkpoints.tool_sft


def test_committed_checkpoints_are_written_once_and_exist():
    cfg = recipes.compose("evaluate")
    paths = OmegaConf.to_container(cfg.checkpoints, resolve=True)
    assert set(paths) == {f.name for f in dataclasses.fields(S.CheckpointsConfig)}
    # the default policy is one of the versioned tool_sft releases, named by key, not a path written twice
    assert OmegaConf.to_container(cfg.checkpoints)["tool_sft"] == "${checkpoints.tool_sft_v3}"
    for name, path in paths.items():     # under its recipe's export directory (tool_sft_v2: recipe=tool_sft)
        recipe = re.sub(r"_v\d+$", "", name)
        assert path.startswith(f"checkpoints/{recipe}/") and (REPO / path).is_dir(), path
    assert [cfg.arms.probe_prefill.checkpoint, cfg.arms.toolgate.checkpoint, cfg.arms.g_step.checkpoint] == \
        [paths["probe_prefill"], paths["toolgate"], paths["g_step"]]
    for path in ROOT.rglob("*.yaml"):                    # no other file spells a committed path out
        if path.name != "reference.yaml":
            assert not any(p in path.read_text() for p in paths.values()), path


# ------------------------------------------------------------------------------------------- defaults once
def agent_defaults() -> dict:
    return {f.name: f.default for f in dataclasses.fields(AgentConfig) if f.name not in ("mode", "reasoning")}


def test_the_agent_group_is_agent_config():
    rollout = recipes.compose("rollout")
    assert OmegaConf.to_container(rollout.agent) == agent_defaults()   # rollout changes nothing
    evaluate = OmegaConf.to_container(recipes.compose("evaluate").agent)
    assert {k: v for k, v in evaluate.items() if v != agent_defaults()[k]} == {"max_rounds": 4,
                                                                               "max_new_tokens": 192}
    factorized = OmegaConf.to_container(recipes.compose("factorized").agent)
    assert {k: v for k, v in factorized.items() if v != agent_defaults()[k]} == {
        "max_rounds": 4, "max_new_tokens": 512, "logprobs": False, "reasoning_check": False}
    for cfg in (rollout.agent, evaluate, factorized):
        AgentConfig(mode="force", **cfg)                                 # every key is a runtime field


def test_the_pte_group_is_pte_config():
    for entry in ("evaluate", "factorized"):
        cfg = recipes.compose(entry, ["hardware=h200_nvl_paper"])
        node = OmegaConf.to_container(cfg.pte)
        assert node == {f.name: f.default for f in dataclasses.fields(PTEConfig) if f.name != "hardware"}
        pte_cfg = PTEConfig(hardware=OmegaConf.to_container(cfg.hardware), **node)
        assert pte_cfg.profile == hardware.PROFILES["h200_nvl_paper"]


@pytest.mark.slow
def test_the_cache_key_of_the_shipped_configs_is_what_it_was():
    """The decoding that keys cached trajectories (trainers/evaluate/run.py) is exactly the agent block
    evaluate.yaml and factorized.yaml had before the agent group, so caches written then still hit."""
    from trainers.evaluate.run import decoding_key

    before = {"call_format": "auto", "max_rounds": 4, "max_new_tokens": 192, "temperature": 0.0, "top_p": 1.0,
              "seed": 0, "max_in_flight": 32, "max_continues": 1, "verify_rounds": 2, "logprobs": True}
    evaluate = decoding_key(OmegaConf.to_container(recipes.compose("evaluate").agent))
    assert evaluate == before and [type(v) for v in evaluate.values()] == [type(v) for v in before.values()]
    factorized = decoding_key(OmegaConf.to_container(recipes.compose("factorized").agent))
    assert factorized == {**before, "max_new_tokens": 512, "logprobs": False, "reasoning_check": False}
    changed = decoding_key(OmegaConf.to_container(recipes.compose("evaluate", ["agent.max_tool_calls=1"]).agent))
    assert changed == {**before, "max_tool_calls": 1}                     # a new setting enters the key


@pytest.mark.parametrize("entry", ["fit", "evaluate", "factorized"])
@pytest.mark.parametrize("name", options("hardware"))
def test_hardware_override_selects_a_profile_on_every_entry_pricing_pte(entry, name):
    cfg = recipes.compose(entry, [*GROUP_BASE.get((entry, "hardware"), BASE.get(entry, [])), f"hardware={name}"])
    assert hardware.get_profile(cfg.hardware) == hardware.PROFILES[name]
    assert (ROOT / "hardware" / f"{name}.yaml").read_text().startswith(f"# hardware={name} ")


@pytest.mark.slow
def test_hardware_profiles_are_the_yaml_files(tmp_path):
    assert hardware.hardware_dir() == ROOT / "hardware" and set(hardware.PROFILES) == set(options("hardware"))
    for name, profile in hardware.PROFILES.items():
        assert profile == hardware.get_profile(recipes.compose("evaluate", [f"hardware={name}"]).hardware)
    copy = tmp_path / "hardware"
    shutil.copytree(ROOT / "hardware", copy)
    edited = copy / "h100_pcie_dense.yaml"
    edited.write_text(edited.read_text().replace("hoi: 378.25", "hoi: 37.825"))
    with pytest.raises(ValueError, match=r"h100_pcie_dense.yaml: hardware profile 'h100_pcie_dense': hoi 37.825"):
        hardware.load_profiles(copy)
    edited.write_text((ROOT / "hardware" / "h100_pcie_dense.yaml").read_text())
    edited.rename(copy / "h100_pcie_other.yaml")
    with pytest.raises(ValueError, match=r"name 'h100_pcie_dense' must be the file's name"):
        hardware.load_profiles(copy)



# ------------------------------------------------------------------------------------------- defaults written once
# Derived from a runtime dataclass (recipes/S.py: derived): their defaults and help live in that class.
DERIVED = {S.HardwareConfig, S.AgentSettings, S.PTESettings, S.AgentLoopConfig}
SCHEMA_BY_NAME = {(group, name): cls for group, name, cls in S.SCHEMAS}


def _dataclasses_in(hint) -> list[type]:
    if dataclasses.is_dataclass(hint):
        return [hint]
    return [c for arg in typing.get_args(hint) for c in _dataclasses_in(arg)]


def schema_classes() -> set[type]:
    """Every dataclass the stored schemas are made of (nested nodes, list elements, optional nodes)."""
    seen, todo = set(), [cls for _, _, cls in S.SCHEMAS]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            todo += [c for hint in typing.get_type_hints(cls).values() for c in _dataclasses_in(hint)]
    return seen


def test_every_schema_field_has_a_default_or_is_documented_as_required():
    classes = schema_classes()
    assert {S.SFTDirectRule, gate_named("g_step").args, S.ServeGates, S.HardwareConfig} <= classes
    for cls in classes:
        for f in dataclasses.fields(cls):
            where = f"{cls.__name__}.{f.name}"
            has_default = f.default_factory is not dataclasses.MISSING or f.default not in (dataclasses.MISSING,
                                                                                             MISSING)
            assert has_default != bool(f.metadata.get("required")), f"{where}: a default, or required (not both)"
            if cls not in DERIVED or not has_default:     # a derived default is documented where it is written
                assert f.metadata.get("help"), f"{where} has no help"


def node_defaults(cls: type) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cls), resolve=False)


def option_schema(group: str, name: str) -> type:
    """The schema a group option extends: its defaults list names the schema, or another option of the group."""
    for entry in OmegaConf.load(ROOT / group / f"{name}.yaml").get("defaults", []):
        if isinstance(entry, str) and entry != "_self_":
            base = entry.split("@")[0]
            return SCHEMA_BY_NAME.get((group, base)) or option_schema(group, base)
    raise AssertionError(f"{group}/{name}.yaml extends no schema")


def node_schemas(path: Path) -> dict[str, type]:
    """package ("" = the file's own node) -> the schema that types it, for one YAML file of the config root."""
    if path.parent == ROOT:                                           # an entry config
        return {"": SCHEMA_BY_NAME[(None, f"{path.stem}_schema")]}
    if not path.read_text().startswith("# @package _global_"):     # a group option
        return {"": option_schema(path.parent.name, path.stem)}
    out = {"": S.FitConfig}                                    # a recipe or an experiment: fit's groups
    for entry in OmegaConf.load(path).defaults:
        if isinstance(entry, str) and "@" in entry:                  # <recipe>_schema@recipe
            name, package = entry.split("@")
            out[package] = SCHEMA_BY_NAME[(package, name)]
        elif not isinstance(entry, str):                             # override /<group>: <option>
            (key, option), = entry.items()
            group = key.split("/")[-1]
            out[group] = (node_schemas(ROOT / "recipe" / f"{option}.yaml")["recipe"] if group == "recipe"
                          else option_schema(group, option))
    return out


def restated(spec, default, path: str = "") -> list[str]:
    """Keys of ``spec`` (a YAML file's node) whose value is the schema ``default`` node's own."""
    out = []
    for key, value in spec.items():
        where = f"{path}.{key}" if path else str(key)
        if where.endswith("points.build"):        # free-form, merged onto the build entry config
            out += restated(value, node_defaults(S.BuildConfig), where)
            continue
        known = default.get(key, MISSING) if isinstance(default, dict) else MISSING
        if known == MISSING:
            continue
        if isinstance(value, dict) and isinstance(known, dict):
            out += restated(value, known, where)
        elif value == known:
            out.append(where)
    return out


def yaml_files() -> list[Path]:
    # W&B sweep specs, Hydra's own settings and `accelerate launch` configs are not schema-typed
    return sorted(p for p in ROOT.rglob("*.yaml") if p.parent.name not in ("sweep", "hydra", "accelerate"))


def test_no_yaml_file_restates_a_schema_default():
    assert restated({"shard_size": 32, "limit": 5, "kind": "flip"}, node_defaults(S.BuildConfig)) == ["shard_size"]
    assert restated({"recipe": {"points": {"build": {"shard_size": 32}}}},
                    node_defaults(S.controller_recipe(gate_named("g_step"))), "") == []   # free-form keys: the next line
    assert restated({"build": {"shard_size": 32, "limit": 32}}, {"build": {}}, "points") == ["points.build.shard_size"]
    found = []
    for path in yaml_files():
        spec = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        spec.pop("defaults", None)
        schemas = node_schemas(path)
        for key, value in spec.items():
            if key in schemas and key:
                found += [f"{path.relative_to(ROOT)}: {k}" for k in
                          restated(value, node_defaults(schemas[key]), key)]
            else:
                found += [f"{path.relative_to(ROOT)}: {k}" for k in
                          restated({key: value}, node_defaults(schemas[""]))]
    assert found == []


# ------------------------------------------------------------------------------------------- values checked early
@pytest.mark.parametrize("entry,overrides,error", [
    ("build", ["shard_size=-1"], r"shard_size=-1: must be >= 1"),
    ("build", ["kind=probes"], r"kind='probes': choose one of probe, flip, commit"),
    ("build", ["val_fraction=1.5"], r"val_fraction=1.5: must be < 1"),
    ("fit", ["recipe=g_step", "recipe.train.optimizer=adamww"], r"recipe.train.optimizer='adamww': choose one of "
                                                                r"lbfgs, adamw"),
    ("fit", ["recipe=g_step", "recipe.train.lr=-1"], r"recipe.train.lr=-1.0: must be > 0"),
    ("fit", ["recipe=g_step", "+recipe.points.build.shard_size=0"], r"recipe.points.build.shard_size=0: must be >= 1"),
    ("fit", ["recipe=g_step", "+recipe.points.build.shard_sise=8"], r"recipe.points.build.shard_sise \(not a field "
                                                                    r"of BuildConfig\)"),
    ("fit", ["recipe=toolgate", "recipe.calibration.tau_method=median"], r"tau_method='median': choose one of fixed"),
    ("fit", ["recipe=tool_sft", "recipe.train.learning_rate=0"], r"recipe.train.learning_rate=0.0: must be > 0"),
    ("fit", ["recipe=tool_sft", "recipe.train.lr_scheduler_type=cosin"], r"lr_scheduler_type='cosin': choose one"),
    ("fit", ["recipe=tool_sft", "recipe.data.direct.0.fraction=2"], r"recipe.data.direct\[0\].fraction=2.0: must "
                                                                    r"be <= 1"),
    ("fit", ["recipe=pte_grpo", "recipe.generation.vllm_mode=remote"], r"vllm_mode='remote': choose one of colocate"),
    ("fit", ["recipe=pte_grpo", "recipe.generation.num_generations=1"], r"num_generations=1: must be >= 2"),
    ("fit", ["recipe=pte_grpo", "recipe.reward.normaliser=-2"], r"normaliser=-2: must be auto or a positive"),
    ("fit", ["recipe=pte_grpo", "recipe.reward.kind=ptee"], r"kind='ptee': choose one of pte, otc"),
    ("fit", ["recipe=g_step", "model.dtype=fp8"], r"model.dtype='fp8': choose one of auto, float32"),
    ("evaluate", ["arms.probe_prefill.taus=[0.5,1.5]"], r"arms.probe_prefill.taus=\[0.5, 1.5\]: \[1.5\]: each τ is a number in"),
    ("evaluate", ["executor=ray", "executor.workers=0"], r"executor.workers=0: must be >= 1"),
    ("rollout", ["backend=vllm", "backend.gpu_memory_utilization=1.2"], r"gpu_memory_utilization=1.2: must be <= 1"),
    # inf passes a gt=0 bound and nan fails every bound with a message about the bound: both are refused as such
    ("fit", ["recipe=g_step", "recipe.train.lr=inf"], r"recipe.train.lr=inf: must be a finite number"),
    ("fit", ["recipe=g_step", "recipe.train.weight_decay=nan"], r"recipe.train.weight_decay=nan: must be a finite"),
    ("fit", ["recipe=g_step", "recipe.train.l2=inf"], r"recipe.train.l2=inf: must be a finite number"),
    ("fit", ["recipe=g_step", "recipe.calibration.tau_value=nan"], r"recipe.calibration.tau_value=nan: must be a "
                                                                   r"finite number"),
    ("fit", ["recipe=tool_sft", "recipe.train.learning_rate=inf"], r"recipe.train.learning_rate=inf: must be a "
                                                                   r"finite number"),
    ("fit", ["recipe=pte_grpo", "recipe.generation.temperature=inf"], r"recipe.generation.temperature=inf: must be"),
    ("fit", ["recipe=pte_grpo", "recipe.reward.normaliser=inf"], r"recipe.reward.normaliser=inf: must be a finite"),
    ("fit", ["recipe=g_step", "+recipe.points.build.val_fraction=nan"], r"recipe.points.build.val_fraction=nan: "
                                                                        r"must be a finite number"),
    ("evaluate", ["agent.temperature=nan"], r"agent.temperature=nan: must be a finite number"),   # a derived group
    ("evaluate", ["arms.toolgate.taus=[0.5,inf]"], r"arms.toolgate.taus=\[0.5, inf\]: \[inf\]: each must be a "
                                                   r"finite number"),
    ("serve", ["gates.taus.g_step=-inf"], r"gates.taus.g_step=-inf: must be a finite number"),
])
def test_a_value_outside_its_fields_checks_fails_at_compose_time_naming_the_key(entry, overrides, error):
    with pytest.raises(ConfigCompositionException, match=error):
        recipes.compose(entry, overrides)


def float_fields() -> list[tuple[type, str]]:
    """(schema, field) for every field of every schema typed float, Optional[float] or a list of floats."""
    def holds_float(hint) -> bool:
        return hint is float or any(holds_float(a) for a in typing.get_args(hint))
    return sorted(((cls, name) for cls in schema_classes() for name, hint in typing.get_type_hints(cls).items()
                   if name in {f.name for f in dataclasses.fields(cls)} and holds_float(hint)),
                  key=lambda cf: (cf[0].__name__, cf[1]))


def test_every_float_field_refuses_inf_and_nan_naming_the_field_and_the_value():
    """The finiteness check is general, not written per field: every float of every schema (its own fields and the
    derived groups', which carry no checks of their own) refuses inf, -inf and nan with one message."""
    fields = float_fields()
    assert {(S.ControllerTrain, "lr"), (S.ControllerTrain, "weight_decay"), (S.ControllerTrain, "l2"),
            (S.Calibration, "tau_value"), (S.GRPOGeneration, "temperature"), (S.ServeTaus, "toolgate"),
            (S.SFTTrain, "learning_rate"), (S.AgentSettings, "temperature"),
            (S.HardwareConfig, "peak_flops")} <= set(fields)
    for cls, name in fields:
        for value in (float("inf"), float("-inf"), float("nan")):
            node = OmegaConf.structured(cls)
            node[name] = value
            assert schema.value_errors(node, "x") == [f"x.{name}={value!r}: must be a finite number"], \
                f"{cls.__name__}.{name}"
            node[name] = 0.5       # a finite value passes the finiteness check (any bound of the field aside)
            assert not [e for e in schema.value_errors(node, "x") if "finite" in e]


@pytest.mark.slow
def test_a_bad_value_ends_the_command_before_any_model_loads(tmp_path):
    """Before, ``shard_size=-1`` loaded the model and failed on a missing parquet column, leaving a manifest with no
    shards; ``recipe.train.optimizer=adamww`` failed after the decision points were built."""
    out = tmp_path / "points"
    for cmd, says in (
            (["data_builders.build", "shard_size=-1", "limit=1", f"out_dir={out}"], "shard_size=-1: must be >= 1"),
            (["trainers.fit", "recipe=g_step", "recipe.train.optimizer=adamww", "logger=none",
              f"recipe.points.root={out}"], "recipe.train.optimizer='adamww': choose one of lbfgs, adamw")):
        proc = subprocess.run([sys.executable, "-m", *cmd, f"hydra.run.dir={tmp_path / 'run'}"], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0 and says in proc.stderr, proc.stderr[-2000:]
        assert "building" not in proc.stdout and not out.exists()


# ------------------------------------------------------------------------------------------- groups honoured or refused
@pytest.mark.parametrize("entry,overrides,error", [
    ("fit", ["recipe=tool_sft", "backend=vllm"], r"backend \(recipe=tool_sft does not read backend: TRL trains"),
    ("fit", ["recipe=pte_grpo", "backend.name=hf"], r"backend.name \(recipe=pte_grpo does not read backend"),
    ("fit", ["recipe=tool_sft", "trainer.devices=2"], r"trainer.devices \(recipe=tool_sft does not read trainer"),
    ("fit", ["recipe=pte_grpo", "trainer=default"], r"trainer \(recipe=pte_grpo does not read trainer"),
    ("fit", ["recipe=tool_sft", "hardware=h200_nvl_paper"], r"hardware \(recipe=tool_sft does not read hardware"),
    ("fit", ["recipe=g_step", "hardware=h200_nvl_paper"], r"hardware \(recipe=g_step does not read hardware"),
    ("fit", ["recipe=tool_sft", "model.max_batch_size=8"], r"model.max_batch_size \(recipe=tool_sft does not read"),
    ("fit", ["recipe=pte_grpo", "recipe.lora.r=8"], r"recipe.lora.r \(model.adapter=checkpoints/tool_sft/\S+ is "
                                                    r"trained further"),
    ("fit", ["recipe=tool_sft", "logger=csv"], r"logger=csv \(recipe=tool_sft reports through TRL"),
    ("factorized", ["tasks=builtin"], r"tasks=builtin \(the factorized framework runs on GSM8K problems"),
    ("factorized", ["tasks.distractor=hedged"], r"tasks.distractor \(each setting of `distractors` chooses"),
])
def test_an_override_a_config_would_ignore_is_refused_naming_it(entry, overrides, error):
    with pytest.raises(ConfigCompositionException, match=error):
        recipes.compose(entry, overrides)


@pytest.mark.parametrize("overrides", [
    ["recipe=g_step", "backend=vllm", "trainer.devices=2", "tasks=when2tool", "logger=csv"],   # a controller reads them
    ["recipe=pte_grpo", "hardware=h200_nvl_paper", "model.max_batch_size=8"],   # γ and generation batches
    ["recipe=tool_sft", "model=smollm2_base", "recipe.lora.r=8", "tasks=when2tool"],   # no adapter: a fresh LoRA
    ["recipe=pte_grpo", "model=hf", "model.name=/some/dir", "recipe.lora.r=8"],
])
def test_what_a_recipe_reads_can_be_overridden(overrides):
    recipes.compose("fit", overrides)


def test_the_command_line_check_refuses_an_ignored_group_too():
    """The callback every Hydra job runs sees the job's own overrides (a multirun job: its own)."""
    with initialize_config_dir(config_dir=recipes.CONFIG_DIR, version_base="1.3"):
        cfg = hydra_compose("fit", ["recipe=tool_sft", "backend=vllm"], return_hydra_config=True)
        ok = hydra_compose("fit", ["recipe=g_step", "backend=vllm"], return_hydra_config=True)
    check = next(c for c in map(instantiate, cfg.hydra.callbacks.values()) if isinstance(c, schema.CheckConfig))
    with pytest.raises(SystemExit, match=r"refused: backend \(recipe=tool_sft does not read backend"):
        check.on_job_start(config=cfg, task_function=None)
    check.on_job_start(config=ok, task_function=None)


# ------------------------------------------------------------------------------------------- tasks
def write_when2tool_dir(path: Path, train_ids=(11001, 11002), test_ids=(11901,)) -> Path:
    """A When2Tool-format task directory (the benchmark's four files) of Calculator tasks with these ids, each
    single-hop split with one multi-hop task beside it (id + 150000)."""
    def calc(i):
        return {"id": i, "difficulty": "easy", "multi_step": False, "instruction": f"Answer with only the number: "
                f"{i % 100}+3", "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"],
                                                 "parameters": {}}],
                "expected": {"answer": str(i % 100 + 3)}, "tags": ["calculator", "single_round"]}

    def multi(i):
        return {"id": i + 150000, "difficulty": "easy", "multi_step": True,
                "instruction": "Three-step computation: First compute x = 1+2. Then compute y = x*5. Finally "
                               "compute z = y-5. Return only z.",
                "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"], "parameters": {}}],
                "expected": {"answer": "10", "steps": ["3", "15", "10"]}, "tags": ["calculator", "multihop_3step"]}

    path.mkdir(parents=True, exist_ok=True)
    for split, ids in (("train", train_ids), ("test", test_ids)):
        (path / f"tasks_v1_{split}.json").write_text(json.dumps([calc(i) for i in ids]))
        (path / f"tasks_v1_multihop_{split}.json").write_text(json.dumps([multi(ids[0])]))
    return path


def test_the_policy_recipes_select_their_tasks_through_the_tasks_group(tmp_path):
    from data_builders.tasks import load_tasks, tasks_from_config

    sft, grpo = recipes.compose("fit", ["recipe=tool_sft"]), recipes.compose("fit", ["recipe=pte_grpo"])
    assert (sft.tasks.source, sft.tasks.n_per_cell) == ("builtin", 4)
    assert (grpo.tasks.source, grpo.tasks.n_per_cell, list(grpo.tasks.difficulties)) == ("builtin", 8,
                                                                                        ["easy", "medium"])
    w2t = write_when2tool_dir(tmp_path / "w2t")
    cfg = recipes.compose("fit", ["recipe=tool_sft", "tasks=when2tool", f"tasks.path={w2t}"])
    assert [t.id for t in tasks_from_config(cfg, "train")] == [11001, 161001, 11002]   # interleaved by cell
    with pytest.raises(ConfigCompositionException, match="recipe.data.builtin_per_cell"):   # no key of its own
        recipes.compose("fit", ["recipe=tool_sft", "recipe.data.builtin_per_cell=2"])
    # a mixture: each part as its own source selects it, one after another; limit applies to each part
    mix = recipes.compose("oracle", ["tasks=mixture", "tasks.builtin.n_per_cell=1", f"tasks.when2tool.path={w2t}",
                                     "split=train"])
    builtin = [t.id for t in load_tasks("builtin", split="train", n_per_cell=1)]
    assert [t.id for t in tasks_from_config(mix)] == builtin + [11001, 161001, 11002]
    mix.limit = 2
    assert [t.id for t in tasks_from_config(mix)] == builtin[:2] + [11001, 161001]
    none = recipes.compose("oracle", ["tasks=mixture", "tasks.builtin=null", "tasks.when2tool=null"])
    with pytest.raises(ValueError, match="every part null selects no task"):
        tasks_from_config(none)
