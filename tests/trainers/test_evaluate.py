"""The shared evaluator on a scripted policy: arms, the probe τ composition, the trajectory cache, the report."""
from __future__ import annotations

import json
import re

import pytest
import torch
from omegaconf import OmegaConf

import controllers
from controllers import GStepMLP, LinearProbe, ToolGateLogistic, make_contract
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import read_trajectories
from data_builders.backends.base import PrefillState
from data_builders.gates import gate_of_kind
from data_builders.features.gstep import N_FEATURES
from data_builders.features.toolgate import EMBEDDING_DIM, structural_names
from recipes import compose
from data_builders.gates.probe_prefill import SOFT_PREFILL
from runtime.controller_hooks import GateHook
from tests.doubles import CALL, ScriptedBackend, calc_task
from trainers.evaluate.run import curve_area, deltas, run

N_LAYERS, D = 3, 4


class PrefillAwareBackend(ScriptedBackend):
    """A scripted policy whose hidden states differ per task (so a probe separates them) and which answers
    directly, and wrongly, when its response was prefilled with the skip-tool sentence."""

    n_layers = N_LAYERS - 1

    def _reply(self, prompt):
        if prompt.endswith(SOFT_PREFILL["skip"]):
            return "\\boxed{0}"
        return super()._reply(prompt)

    def generate(self, prompts, params=None, *, prefill_state=None, **kw):
        # reply to the whole prompt, the response prefill included (the base class replies to the prefix)
        if prefill_state is not None:
            assert all(p.startswith(q) for p, q in zip(prompts, prefill_state.prompts))
        return super().generate(prompts, params, **kw)

    def prefill(self, prompts, layers=None):
        self.prefill_calls += 1
        layers = list(layers)
        h = torch.zeros(len(prompts), len(layers), D)
        for i, p in enumerate(prompts):
            h[i, :, 0] = 1.0 if "7*7" in p or "9*9" in p else -1.0   # the "needs a tool" direction
        self.last_prefill_state = PrefillState(list(prompts), layers, h)
        return self.last_prefill_state


TASKS = [calc_task(1, "6*7", "42"), calc_task(2, "7*7", "49"), calc_task(3, "2+2", "4"), calc_task(4, "9*9", "81")]
SCRIPTS = {"6*7": [CALL % "6*7", "\\boxed{42}"], "7*7": [CALL % "7*7", "\\boxed{49}"],
           "2+2": ["\\boxed{4}"], "9*9": [CALL % "9*9", "\\boxed{81}"]}


def export(c, path):
    c.save_pretrained(path)
    test = {"auroc": 0.9, "auroc_ci": [0.8, 0.95]}
    (path / "metrics.json").write_text(json.dumps({"splits": {"test": {"all": test}}}))
    return str(path)


@pytest.fixture()
def checkpoints(tmp_path):
    policy = "scripted@0"
    probe = LinearProbe(contract=make_contract(gate_of_kind("probe").featurizer.id, policy, [N_LAYERS, D]), tau=0.5)
    with torch.no_grad():
        probe.linear.weight.zero_()
        probe.linear.weight[0, 0] = 4.0          # layer 0, unit 0: +1 -> p=0.98, -1 -> p=0.02
        probe.linear.bias.zero_()
    width = EMBEDDING_DIM + len(structural_names())
    gate = ToolGateLogistic(contract=make_contract(gate_of_kind("flip").featurizer.id, policy, [width]), tau=0.5)
    gstep = GStepMLP(contract=make_contract(gate_of_kind("commit").featurizer.id, policy, [N_FEATURES]), tau=0.99, hidden=4,
                     depth=1)
    return {"probe_prefill": export(probe, tmp_path / "probe"), "toolgate": export(gate, tmp_path / "gate"),
            "g_step": export(gstep, tmp_path / "gstep")}


def eval_cfg(tmp_path, ckpt, **over):
    cfg = compose("evaluate", ["logger=none", "tasks=builtin", f"cache_dir={tmp_path / 'cache'}",
                               f"out_dir={tmp_path / 'out'}", "agent.max_rounds=3", "pte.gamma=0.01"])
    # merged, not assigned: the arms are structured configs (trainers/evaluate/config.py) that validate a merge
    arms = {"modes": ["force", "default"],
            "probe_prefill": {"checkpoint": ckpt["probe_prefill"], "styles": ["soft"], "taus": [0.01, 0.5, 0.99]},
            "toolgate": {"checkpoint": ckpt["toolgate"], "taus": ["calibrated"]},
            "g_step": {"checkpoint": ckpt["g_step"], "taus": ["calibrated"]}}
    return OmegaConf.merge(cfg, {"arms": arms}, over)


@pytest.fixture()
def scripted(monkeypatch):
    import data_builders.backends.loading as loading
    import data_builders.tasks as tasks_mod

    backend = PrefillAwareBackend(SCRIPTS)
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: backend)
    monkeypatch.setattr(tasks_mod, "tasks_from_config", lambda cfg, split=None: list(TASKS))
    return backend


@pytest.mark.slow
def test_every_arm_runs_then_a_rerun_is_served_from_the_cache(tmp_path, checkpoints, scripted):
    first = run(eval_cfg(tmp_path, checkpoints))
    arms = first["arms"]
    assert {"force", "default", "probe_soft@0.01", "probe_soft@0.50", "probe_soft@0.99", "toolgate@0.50",
            "g_step@0.99", "cascade"} <= set(arms)
    assert first["cache"]["hits"] == 0 and first["cache"]["misses"] > 0
    # Probe&Prefill: tau 0.01 -> every task gets the use-tool prefill; 0.99 -> every task is told to skip
    # and this policy then answers 0 (wrong) without a call
    assert arms["probe_soft@0.01"]["all"]["accuracy"] == 1.0
    assert arms["probe_soft@0.99"]["all"]["accuracy"] == 0.0 and arms["probe_soft@0.99"]["all"]["tool_calls_per_task"] == 0
    # at 0.5 the probe sends the two "needs a tool" tasks (7*7, 9*9) to tools and the rest to skip
    assert arms["probe_soft@0.50"]["all"]["accuracy"] == 0.5
    assert first["deltas"]["default"]["d_acc"] == 0.0
    assert first["curves"]["probe_soft"]["area"] is not None
    out = tmp_path / "out"
    assert (out / "results.json").exists() and (out / "accuracy_vs_calls.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "probe_soft@0.50" in report and "ΔAcc" in report

    n_generate = len(scripted.calls)
    again = run(eval_cfg(tmp_path, checkpoints))
    assert len(scripted.calls) == n_generate                     # nothing generated: all from the cache
    assert again["cache"]["misses"] == 0 and again["cache"]["hits"] == first["cache"]["misses"]
    assert {k: v["all"]["accuracy"] for k, v in again["arms"].items()} == \
        {k: v["all"]["accuracy"] for k, v in arms.items()}

    # a new arm computes only itself
    more = run(eval_cfg(tmp_path, checkpoints, arms={"modes": ["force", "default", "sparse"]}))
    assert more["cache"]["misses"] == len(TASKS)


def test_headline_figures_carry_bootstrap_intervals_and_paired_deltas(tmp_path, checkpoints, scripted):
    results = run(eval_cfg(tmp_path, checkpoints, bootstrap={"replicates": 500}))
    assert results["bootstrap"] == {"method": "percentile", "level": 0.95, "replicates": 500, "seed": 0,
                                    "unit": "task"}
    for name, m in results["arms"].items():
        assert set(m["ci"]) == {"accuracy", "tool_calls_per_task", "pte_per_task"}
        for key, (lo, hi) in m["ci"].items():
            assert lo - 1e-9 <= m["all"][key] <= hi + 1e-9, (name, key)
        d = results["deltas"][name]
        for key, (lo, hi) in d["ci"].items():
            assert lo - 1e-9 <= d[key] <= hi + 1e-9, (name, key)
    # the reference against itself: exactly [0, 0]; force answers and calls as default does on every task of this
    # policy, so its accuracy and call deltas are exactly 0 too, while its prompts (so its PTE) differ
    assert results["deltas"]["default"]["ci"] == {"d_acc": [0.0, 0.0], "d_tc": [0.0, 0.0], "d_pte": [0.0, 0.0]}
    force = results["deltas"]["force"]["ci"]
    assert force["d_acc"] == [0.0, 0.0] and force["d_tc"] == [0.0, 0.0] and force["d_pte"] != [0.0, 0.0]
    # τ 0.99 skips the tool on every task and is then wrong on all four: −100 points on every resample
    assert results["deltas"]["probe_soft@0.99"]["ci"]["d_acc"] == [-100.0, -100.0]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Headline figures" in report and "95% percentile bootstrap intervals over tasks" in report
    assert "1.000 [1.000, 1.000]" in report                              # probe_soft@0.01: right on every task
    assert "0.900 [0.800, 0.950] (bootstrap CI of the fit)" in report     # a controller's AUROC with its interval
    assert json.loads((tmp_path / "out" / "results.json").read_text())["arms"]["force"]["ci"] == \
        results["arms"]["force"]["ci"]


def test_sparse_is_not_a_default_arm():
    """The default policy reads sparse as no_tool (docs/results.md#the-when2tool-comparison: 0.06 calls per task):
    the evaluator runs it only when asked."""
    modes = list(compose("evaluate").arms.modes)
    assert "sparse" not in modes and modes == ["force", "default", "necessary", "no_tool"]
    assert "sparse" in compose("evaluate", ["arms.modes=[default,sparse]"]).arms.modes


def test_composed_probe_arm_equals_running_the_probe_hook(tmp_path, checkpoints, scripted):
    results = run(eval_cfg(tmp_path, checkpoints))
    probe = controllers.load(checkpoints["probe_prefill"])
    composed = [json.loads(line) for line in
                next((tmp_path / "cache").rglob("prefill_soft_use-*/*.jsonl")).read_text().splitlines()]
    assert len(composed) == len(TASKS)
    for tau in (0.01, 0.5, 0.99):
        direct = Agent(PrefillAwareBackend(SCRIPTS), AgentConfig(mode="default", max_rounds=3),
                       GateHook("probe_prefill", probe, tau, {"style": "soft"})).run(TASKS)
        acc = sum(t.correct for t in direct) / len(direct)
        calls = sum(t.tool_calls for t in direct) / len(direct)
        arm = results["arms"][f"probe_soft@{tau:.2f}"]["all"]
        assert (arm["accuracy"], arm["tool_calls_per_task"]) == (acc, calls), tau


def test_a_controller_of_another_policy_is_refused(tmp_path, checkpoints, scripted):
    other = LinearProbe(contract=make_contract(gate_of_kind("probe").featurizer.id, "some-other-model@1", [N_LAYERS, D]))
    cfg = eval_cfg(tmp_path, checkpoints)
    cfg.arms.probe_prefill.checkpoint = export(other, tmp_path / "other")
    with pytest.raises(controllers.ContractMismatch, match="some-other-model"):
        run(cfg)


def test_a_cache_file_written_before_the_typed_schema_still_hits(tmp_path):
    """A cache line as the evaluator wrote it before (the loop's version-1 record plus ``_task_key``) is a hit,
    comes back typed, and storing the arm again rewrites the file byte for byte."""
    from data_builders.agent.trajectory import Trajectory, write_jsonl
    from data_builders.tasks.schema import task_key
    from tests.data_builders.agent.test_trajectory import V1
    from trainers.evaluate.cache import TrajectoryCache

    task = calc_task("w2t/calc-7", "20+20", "40")
    cache = TrajectoryCache(tmp_path, "scripted@0", {"max_rounds": 10, "split": "test"})
    spec = {"name": "force+rta", "mode": "force", "reasoning": True}
    single = cache.path(spec).with_name(cache.path(spec).name + ".jsonl")      # the one file per arm of then
    path = write_jsonl(single, [{**json.loads(V1.read_text()), "_task_key": task_key(task)}])
    before = path.read_bytes()
    have, todo = cache.missing(spec, [task])
    assert todo == [] and (cache.hits, cache.misses) == (1, 0)
    traj = have[task_key(task)]
    assert isinstance(traj, Trajectory) and traj.correct and traj.task_key == task_key(task)
    cache.store(spec, have, [])
    assert path.read_bytes() == before


def test_deltas_and_curve_area():
    m = {"ref": {"all": {"accuracy": 0.8, "tool_calls_per_task": 2.0}},
         "cheap": {"all": {"accuracy": 0.7, "tool_calls_per_task": 1.0}}}
    d = deltas(m, "ref")
    assert d["cheap"]["d_acc"] == pytest.approx(-10.0) and d["cheap"]["d_tc"] == -1.0
    assert d["cheap"]["d_acc_per_saved_call"] == pytest.approx(-10.0) and d["ref"]["d_acc_per_saved_call"] is None
    assert "d_pte" not in d["cheap"]                                    # no PTE measured, no PTE delta
    m["ref"]["all"]["pte_per_task"], m["cheap"]["all"]["pte_per_task"] = 900.0, 600.0
    assert deltas(m, "ref")["cheap"]["d_pte"] == -300.0
    # flat accuracy 0.5 at any calls -> area 0.5; one point only -> undefined
    assert curve_area([(0.5, 0.5), (1.5, 0.5)], 2.0) == pytest.approx(0.5)
    assert curve_area([(1.0, 0.5)], 2.0) is None


@pytest.fixture()
def no_model(monkeypatch):
    import data_builders.backends.loading as loading
    import data_builders.tasks as tasks_mod

    def fail(*a, **k):
        raise AssertionError("the policy was loaded before the config was checked")
    monkeypatch.setattr(loading, "backend_from_config", fail)
    monkeypatch.setattr(tasks_mod, "tasks_from_config", lambda cfg, split=None: list(TASKS))


def test_a_reference_that_is_not_an_arm_is_refused_before_the_policy_loads(tmp_path, checkpoints, no_model):
    # it used to measure every Δ against the first arm, silently
    with pytest.raises(ValueError) as err:
        run(eval_cfg(tmp_path, checkpoints, reference="defualt"))
    msg = str(err.value)
    assert msg.startswith("reference='defualt' is not an arm of this run; arms: force, default, probe_soft@0.01")
    assert "toolgate@<its calibrated τ>" in msg and "cascade" in msg and "prefill_" not in msg


def test_a_misspelt_arm_mode_is_refused_before_the_policy_loads(tmp_path, checkpoints, no_model):
    with pytest.raises(ValueError, match="unknown prompt mode 'sparce'"):
        run(eval_cfg(tmp_path, checkpoints, arms={"modes": ["force", "default", "sparce"]}))


@pytest.mark.parametrize("tau", [1.5, -0.1, "nan", "high"])
def test_a_tau_override_outside_0_1_is_refused_before_the_policy_loads(tmp_path, checkpoints, no_model, tau):
    # a τ of 1.5 would silently never act (and -0.1 always): the arm would measure a different controller
    with pytest.raises(ValueError, match=r"arms\.g_step\.taus: .* is not a probability in \[0, 1\]"):
        run(eval_cfg(tmp_path, checkpoints, arms={"g_step": {"taus": ["calibrated", tau]}}))


def test_a_calibrated_reference_is_checked_once_the_controllers_load(tmp_path, checkpoints, scripted):
    # toolgate's τ is "calibrated" (0.50 in its checkpoint): 0.42 passes the config check, not the arm check
    with pytest.raises(ValueError, match=r"reference='toolgate@0\.42'.*toolgate@0\.50"):
        run(eval_cfg(tmp_path, checkpoints, reference="toolgate@0.42"))
    assert scripted.calls == []                                  # before any rollout
    assert run(eval_cfg(tmp_path, checkpoints, reference="toolgate@0.50"))["reference"] == "toolgate@0.50"


def _truncate_weights(ckpt: str) -> str:
    f = f"{ckpt}/model.safetensors"
    data = open(f, "rb").read()
    open(f, "wb").write(data[:len(data) // 2])
    return f


def _drop_contract(ckpt: str) -> str:
    f = f"{ckpt}/config.json"
    cfg = json.loads(open(f).read())
    del cfg["contract"]
    open(f, "w").write(json.dumps(cfg))
    return f


def _cut_config(ckpt: str) -> str:
    f = f"{ckpt}/config.json"
    open(f, "w").write(open(f).read()[:20])
    return f


def _remove(ckpt: str) -> str:
    import shutil
    shutil.rmtree(ckpt)
    return ckpt


@pytest.mark.parametrize("arm,damage,says", [
    ("g_step", _truncate_weights, r"model.safetensors: cannot be loaded as a gstep_mlp controller: truncated or corrupt"),
    ("probe_prefill", _truncate_weights, r"model.safetensors: cannot be loaded as a linear_probe controller: truncated or "),
    ("toolgate", _cut_config, r"config.json: not valid JSON"),
    ("toolgate", _drop_contract, r"config.json: field 'contract': contract must be an object"),
    ("g_step", _remove, r"not a controller directory \(.* does not exist\)"),
])
def test_a_bad_controller_checkpoint_fails_before_the_policy_loads_naming_it(tmp_path, checkpoints, monkeypatch, arm,
                                                                              damage, says):
    """Every controller the arms use is loaded and checked before the policy (20-24 s for the embedded one): a
    truncated or missing checkpoint used to surface only after that wait."""
    from unittest import mock

    import data_builders.backends.loading as loading
    import data_builders.tasks as tasks_mod

    policy_loader = mock.Mock(side_effect=AssertionError("the policy was loaded"))
    monkeypatch.setattr(loading, "backend_from_config", policy_loader)
    monkeypatch.setattr(tasks_mod, "tasks_from_config", lambda cfg, split=None: list(TASKS))
    bad = damage(checkpoints[arm])
    with pytest.raises(controllers.ControllerLoadError) as err:
        run(eval_cfg(tmp_path, checkpoints))
    msg = str(err.value)
    assert msg.startswith(f"arms.{arm}.checkpoint={checkpoints[arm]}: ") and bad in msg, msg
    assert re.search(says, msg), msg
    policy_loader.assert_not_called()


def test_a_checkpoint_of_another_gate_is_refused_before_the_policy_loads(tmp_path, checkpoints, no_model):
    # the toolgate arm pointed at the G-STEP checkpoint: its featurizer is known without the policy
    with pytest.raises(controllers.ContractMismatch, match=r"^arms.toolgate.checkpoint=.*gstep: gstep_mlp was "
                                                           r"trained on featurizer"):
        run(eval_cfg(tmp_path, checkpoints, arms={"toolgate": {"checkpoint": checkpoints["g_step"]}}))


FORCE = "You must use a tool to solve this task."     # in force-mode prompts only (data_builders/agent/prompts.py)


class CrashingBackend(PrefillAwareBackend):
    """Crashes on the 9*9 task in any arm but ``force`` (whose prompts tell the model it must use a tool)."""

    def generate(self, prompts, params=None, **kw):
        if any("9*9" in p and FORCE not in p for p in prompts):
            raise RuntimeError("engine crashed")
        return super().generate(prompts, params, **kw)


def test_a_failure_in_an_arm_keeps_earlier_arms_and_its_finished_episodes(tmp_path, monkeypatch):
    import data_builders.backends.loading as loading
    import data_builders.tasks as tasks_mod

    monkeypatch.setattr(tasks_mod, "tasks_from_config", lambda cfg, split=None: list(TASKS))
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: CrashingBackend(SCRIPTS))
    # arms force, then default; one episode at a time, so 9*9 (the last task) starts after the others finished
    cfg = compose("evaluate", ["logger=none", "tasks=builtin", f"cache_dir={tmp_path / 'cache'}",
                               f"out_dir={tmp_path / 'out'}", "agent.max_rounds=3", "agent.max_in_flight=1",
                               "pte.gamma=0.01", "arms.modes=[force,default]", "arms.probe_prefill=null",
                               "arms.toolgate=null", "arms.g_step=null"])
    with pytest.raises(RuntimeError, match="engine crashed"):
        run(cfg)
    cached = {arm: sorted(t.task_id for f in (tmp_path / "cache").rglob(f"{arm}-*/*.jsonl")
                          for t in read_trajectories(f)) for arm in ("force", "default")}
    assert cached == {"force": [1, 2, 3, 4], "default": [1, 2, 3]}

    healthy = PrefillAwareBackend(SCRIPTS)
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: healthy)
    again = run(cfg)
    assert (again["cache"]["hits"], again["cache"]["misses"]) == (7, 1)     # only 9*9 in the default arm
    assert all("9*9" in p for batch in healthy.calls for p in batch)


def test_exclude_points_leaves_out_the_tasks_a_dataset_holds(tmp_path, checkpoints, scripted):
    from data_builders.points.store import PointStore

    seen = [TASKS[1], TASKS[3]]           # the two "needs a tool" tasks, as if a controller had been fit on them
    manifest = {"kind": "probe", "task_hash": "abc", "backend": "scripted@0", "featurizer": {"name": "f", "version": 1},
                "label_rule": "r", "shard_size": 2, "builder": {"max_rounds": 2}}
    with PointStore(tmp_path / "points", manifest) as store:
        store.write_shard(0, [{"point_id": str(t.id), "task_id": str(t.id), "split": s, "env": "CalculatorEnv",
                               "category": "A", "difficulty": "easy", "label": 1}
                              for t, s in zip(seen, ["train", "val"])], {"hidden": torch.zeros(2, N_LAYERS, D)})
        store.finalize({"points": 2, "positives": 2})
    results = run(eval_cfg(tmp_path, checkpoints, exclude_points=[str(tmp_path / "points")]))
    assert results["tasks"] == 2 and results["exclude_points"] == [str(tmp_path / "points")]
    # left: 6*7 (tool) and 2+2 (answered directly); the probe sends both to skip at 0.5 and this policy then
    # answers 0: a sweep on these tasks alone, unlike on all four (accuracy 0.5 there)
    assert results["arms"]["probe_soft@0.50"]["all"]["accuracy"] == 0.0
    assert results["arms"]["force"]["all"]["accuracy"] == 1.0
    everything = tmp_path / "all"
    with PointStore(everything, manifest) as store:
        store.write_shard(0, [{"point_id": str(t.id), "task_id": str(t.id), "split": "test", "env": "E",
                               "category": "A", "difficulty": "easy", "label": 0} for t in TASKS],
                          {"hidden": torch.zeros(4, N_LAYERS, D)})
        store.finalize({"points": 4, "positives": 0})
    with pytest.raises(ValueError, match="leaves none of the 4 tasks"):
        run(eval_cfg(tmp_path, checkpoints, exclude_points=[str(everything)]))


def test_the_probes_old_arm_key_is_renamed_to_its_gates_name_with_a_warning():
    from trainers.evaluate.run import renamed_arm_overrides

    with pytest.warns(FutureWarning, match=r"arms.probe.styles: deprecated.*\(arms.probe_prefill.styles\)"):
        argv = renamed_arm_overrides(["arms.probe.styles=[hard]", "~arms.probe", "arms.probes=1", "arms.toolgate=null"])
    assert argv == ["arms.probe_prefill.styles=[hard]", "~arms.probe_prefill", "arms.probes=1", "arms.toolgate=null"]
    with pytest.warns(FutureWarning):
        cfg = compose("evaluate", renamed_arm_overrides(["arms.probe.taus=[0.4]"]))
    assert list(cfg.arms.probe_prefill.taus) == [0.4]
