"""The Hydra config root against its structured configs (recipes/schema.py): every entry config composes with
every option of every group it selects, every node is typed by a dataclass (bar the declared free-form ones),
unknown keys and wrong types fail at compose time, and each default is written once. No model, no torch."""
from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from hydra import compose as hydra_compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

import recipes
from data_builders.agent.loop import AgentConfig
from data_builders.metrics import hardware
from data_builders.metrics.pte import PTEConfig
from recipes import schema

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
NEEDS = {"model=hf": ["model.name=/some/dir"]}       # hf's model.name is mandatory
# Nodes typed as free-form on purpose (recipes/schema.py says why), with everything under them.
FREE_FORM = ("recipe.points.build", "backend.engine_kwargs", "arms.policies[")

CASES = [(entry, [*BASE.get(entry, []), f"{group}={name}", *NEEDS.get(f"{group}={name}", [])])
         for entry, groups in ENTRY_GROUPS.items() for group in groups for name in options(group)]
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
    assert {(None, f"{e}_schema") for e in ENTRY_GROUPS} <= {(g, n) for g, n, _ in schema.SCHEMAS}


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
        assert any(isinstance(c, schema.CheckKeys) for c in callbacks), entry
        check = next(c for c in callbacks if isinstance(c, schema.CheckKeys))
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
        assert OmegaConf.get_type(cfg.model) is schema.ModelConfig
        assert (cfg.model.name, cfg.model.adapter) == ("smollm2", cfg.checkpoints.tool_sft), entry
    for controller in ("g_step", "probe_prefill", "toolgate"):
        cfg = recipes.compose("fit", [f"recipe={controller}"])
        assert cfg.model.adapter == cfg.checkpoints.tool_sft


def test_committed_checkpoints_are_written_once_and_exist():
    cfg = recipes.compose("evaluate")
    paths = OmegaConf.to_container(cfg.checkpoints, resolve=True)
    assert set(paths) == {f.name for f in dataclasses.fields(schema.CheckpointsConfig)}
    # the default policy is one of the versioned tool_sft releases, named by key, not a path written twice
    assert OmegaConf.to_container(cfg.checkpoints)["tool_sft"] == "${checkpoints.tool_sft_v3}"
    for name, path in paths.items():     # under its recipe's export directory (tool_sft_v2: recipe=tool_sft)
        recipe = re.sub(r"_v\d+$", "", name)
        assert path.startswith(f"checkpoints/{recipe}/") and (REPO / path).is_dir(), path
    assert [cfg.arms.probe.checkpoint, cfg.arms.toolgate.checkpoint, cfg.arms.g_step.checkpoint] == \
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
    cfg = recipes.compose(entry, [*BASE.get(entry, []), f"hardware={name}"])
    assert hardware.get_profile(cfg.hardware) == hardware.PROFILES[name]
    assert (ROOT / "hardware" / f"{name}.yaml").read_text().startswith(f"# hardware={name} ")


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
