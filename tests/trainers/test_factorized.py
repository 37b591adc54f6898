"""the tool-use-tax paper's (arXiv 2605.00136) Factorized Intervention Framework (trainers/evaluate/factorized.py): the task views, the contrasts
with their paired bootstrap CIs and the exact decomposition identity, the recipe, and an end-to-end run on a
scripted policy whose accuracy in every condition is known, served from the cache on the rerun."""
from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from data_builders.agent import prompts as P
from data_builders.agent.loop import AgentConfig
from data_builders.tasks.gsm8k import ANSWER_FORMAT, load_gsm8k
from recipes import compose
from tests.doubles import CALL, ScriptedBackend
from data_builders.metrics.pte import PTEConfig
from tests.data_builders.tasks.test_gsm8k import BETTY, NATALIA, SIMPLE
from tests.trajectories import make_trajectory, make_turn
from trainers.evaluate import factorized as F
from trainers.evaluate.run import Arm

GOLD = {"Natalia": "72", "Betty": "5"}
CLEAN = {"Natalia": NATALIA["question"], "Betty": BETTY["question"]}


def write_gsm(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def gsm_file(tmp_path):
    # both problems fall in the hashed train split; Natalia is easy (2 steps), Betty medium (3)
    return write_gsm(tmp_path / "gsm.jsonl", [NATALIA, BETTY])


class FactorizedPolicy(ScriptedBackend):
    """A policy with a known accuracy per condition. It always opens with reasoning text and a call (only
    accepted with the recipe's reasoning_check off). CoT: right. Tools hidden: right on Natalia only. No-op
    result: wrong. Real result: right, except Betty on a distracted problem; Betty makes a second call first,
    and answers wrong when the budget refuses it. Calculation results in the prompt: right."""

    def __init__(self):
        super().__init__({})

    def _reply(self, prompt):
        rendered = json.loads(prompt)
        msgs = rendered["messages"]
        user0 = next(m["content"] for m in msgs if m["role"] == "user")
        key = "Natalia" if "Natalia" in user0 else "Betty"
        gold, wrong = GOLD[key], str(int(GOLD[key]) + 1)
        n_assistant = sum(m["role"] == "assistant" for m in msgs)
        last = msgs[-1]["content"]
        clean = user0.startswith(f"{CLEAN[key]} {ANSWER_FORMAT}")
        if msgs[0]["content"] == P.COT_SYSTEM:
            return f"Step by step, the numbers give {gold}. \\boxed{{{gold}}}"
        if n_assistant == 0:
            return "I will use the calculator. " + CALL % "48/2"
        if "Calculation results you may use" in user0:
            return f"\\boxed{{{gold}}}"
        if last == P.TOOLS_UNAVAILABLE:
            return f"\\boxed{{{gold if key == 'Natalia' else wrong}}}"
        if "[NO-OP]" in last or last == P.TOOL_BUDGET_USED:
            return f"\\boxed{{{wrong}}}"
        assert last.startswith("<tool_response>"), last
        if key == "Betty" and n_assistant == 1:
            return CALL % "15*2"
        return f"\\boxed{{{gold if clean or key == 'Natalia' else wrong}}}"


# ------------------------------------------------------------------------------------------- task views
def test_oracle_views_keep_the_id_and_change_only_the_instruction(tmp_path):
    path = write_gsm(tmp_path / "g.jsonl", [NATALIA, SIMPLE])
    clean = {t.id: t for t in load_gsm8k(path, "train")}
    natalia = clean["gsm8k-0"]
    calc = F.oracle_calc_view(natalia)
    assert calc.id == natalia.id and calc.answer == natalia.answer and calc.expected == natalia.expected
    assert calc.instruction == (f"{NATALIA['question']} {ANSWER_FORMAT}\n\n"
                                "Calculation results you may use: 48/2 = 24; 48+24 = 72.")
    assert F.oracle_calc_view(clean["gsm8k-1"]) == clean["gsm8k-1"]          # no annotations: nothing to add
    for kind in ("thematic", "parallel_entity", "hedged", "paraphrase"):
        distracted = {t.id: t for t in load_gsm8k(path, "train", distractor=kind)}[f"gsm8k-0-{kind}"]
        assert distracted.instruction != natalia.instruction
        view = F.oracle_evidence_view(distracted)
        assert view.id == distracted.id and view.instruction == natalia.instruction   # built like gsm8k.py does
    assert [t.instruction for t in F.apply_view("oracle_evidence", [natalia])] == [natalia.instruction]
    assert F.apply_view(None, [natalia]) == [natalia]
    with pytest.raises(ValueError, match="unknown task view"):
        F.apply_view("nope", [natalia])
    from tests.doubles import calc_task

    with pytest.raises(ValueError, match="expected\\['calculations'\\]"):
        F.oracle_calc_view(calc_task(1, "1+1", "2"))


# ------------------------------------------------------------------------------------------- statistics
def test_decomposition_identity_holds_exactly_on_random_outcomes():
    rng = np.random.default_rng(1)
    for n in (1, 7, 64):
        correct = {c: rng.random(n) < 0.5 for c in F.CONDITIONS}
        con = F.contrasts(correct, replicates=200, seed=3)
        ident = F.identity_check(con)
        assert ident["holds"] and ident["cot_minus_tool"] == ident["sum_of_components"]
        gap = con["cot_minus_tool"]["value"]
        assert gap == pytest.approx(con["formatting_cost"]["value"] + con["protocol_overhead"]["value"]
                                    - con["execution_gain"]["value"], abs=1e-12)
        # and in every bootstrap replicate (all conditions share the resampled tasks)
        reps = F.bootstrap_accuracies(correct, replicates=200, seed=3)
        np.testing.assert_allclose(reps["cot"] - reps["full_tool"],
                                   (reps["cot"] - reps["format_only"]) + (reps["format_only"] - reps["noop_tool"])
                                   - (reps["full_tool"] - reps["noop_tool"]), atol=1e-12)
        for c in con.values():
            assert c["ci"][0] <= c["value"] + 1e-12 and c["value"] - 1e-12 <= c["ci"][1]


def test_contrasts_by_hand_and_paired_bootstrap():
    cot = np.array([1, 1, 1, 1, 0, 0, 1, 1], bool)
    fmt = np.array([1, 1, 0, 1, 0, 0, 1, 0], bool)
    noop = np.array([1, 0, 0, 1, 0, 0, 0, 0], bool)
    full = np.array([1, 1, 1, 1, 0, 1, 0, 0], bool)
    con = F.contrasts({"cot": cot, "format_only": fmt, "noop_tool": noop, "full_tool": full}, replicates=500, seed=0)
    assert set(con) == {"cot_minus_tool", *F.DECOMPOSITION}                 # oracle contrasts need their conditions
    assert [con[k]["diff_correct"] for k in ("cot_minus_tool", *F.DECOMPOSITION)] == [1, 2, 2, 3]
    assert con["formatting_cost"]["value"] == 0.25 and con["execution_gain"]["value"] == 3 / 8
    # identical outcomes -> a zero-width CI: the resample is paired
    same = F.contrasts({"cot": cot, "full_tool": cot.copy()}, replicates=300)
    assert same["cot_minus_tool"]["ci"] == [0.0, 0.0]
    # reproducible with the seed, different with another
    again = F.contrasts({"cot": cot, "format_only": fmt, "noop_tool": noop, "full_tool": full}, replicates=500, seed=0)
    assert again == con
    r0, r9 = (F.bootstrap_accuracies({"cot": cot}, replicates=50, seed=s)["cot"] for s in (0, 9))
    assert not np.array_equal(r0, r9)
    # clusters: the units resampled are the distinct ids, so two copies of a task move together
    doubled = {"a": np.array([1, 1, 0, 0], bool)}
    reps = F.bootstrap_accuracies(doubled, clusters=["x", "x", "y", "y"], replicates=100, seed=0)
    assert set(np.unique(reps["a"])) <= {0.0, 0.5, 1.0}
    free = F.bootstrap_accuracies(doubled, replicates=100, seed=0)
    assert set(np.unique(free["a"])) - {0.0, 0.5, 1.0}                       # 0.25 / 0.75 occur without clusters
    with pytest.raises(ValueError, match="one outcome per task"):
        F.bootstrap_accuracies({"a": np.ones(3), "b": np.ones(2)})


def _traj(tid, correct, calls=0, rejected=0):
    return make_trajectory([make_turn(0, "\\boxed{1}", prefill_tokens=10, decode_tokens=5, wall_s=0.0)], task_id=tid,
                           correct=correct, tool_calls=calls, rejected_calls=rejected, token_cost=15.0)


def test_summarize_setting_on_hand_made_trajectories():
    outcomes = {"cot": [1, 1, 0, 1], "format_only": [1, 0, 0, 1], "noop_tool": [0, 0, 0, 1], "full_tool": [1, 1, 0, 0]}
    by_cond = {c: [_traj(f"t{i}", bool(v), calls=1 if c != "cot" else 0, rejected=int(c == "format_only"))
                   for i, v in enumerate(vals)] for c, vals in outcomes.items()}
    s = F.summarize_setting(by_cond, 0.01, PTEConfig(gamma=0.01), {"replicates": 100, "seed": 0, "level": 0.95})
    assert s["tasks"] == 4 and s["identity"]["holds"]
    assert s["conditions"]["format_only"]["rejected_calls_per_task"] == 1.0
    assert s["conditions"]["cot"]["accuracy"] == 0.75 and len(s["conditions"]["cot"]["accuracy_ci"]) == 2
    assert s["contrasts"]["protocol_overhead"]["value"] == 0.25
    by_cond["full_tool"] = by_cond["full_tool"][::-1]
    with pytest.raises(ValueError, match="other tasks"):
        F.summarize_setting(by_cond, 0.01, PTEConfig(gamma=0.01), {"replicates": 10})
    assert F.base_id("gsm8k-12-hedged", "hedged") == "gsm8k-12" and F.base_id("gsm8k-12", None) == "gsm8k-12"


# ------------------------------------------------------------------------------------------- the recipe
def test_recipe_composes_and_every_condition_is_an_agent_config():
    cfg = compose("factorized", ["logger=none", "out_dir=/tmp/unused"])
    assert cfg.conditions is None            # every condition
    with pytest.raises(Exception, match=r"conditions=\['cot', 'nope'\].*choose from cot, format_only"):
        compose("factorized", ["logger=none", "out_dir=/tmp/unused", "conditions=[cot,nope]"])
    assert list(cfg.distractors) == [None, "thematic", "parallel_entity", "hedged", "paraphrase"]
    assert cfg.tasks.source == "gsm8k" and cfg.tool_mode == "force" and cfg.split == "test" and cfg.limit == 16
    agent_kw = OmegaConf.to_container(cfg.agent, resolve=True)
    assert agent_kw["reasoning_check"] is False
    modes = {}
    for name in F.CONDITIONS:
        arm = F.make_arm(name, cfg.tool_mode)
        assert isinstance(arm, Arm) and arm.cache_spec["condition"] == name
        c = AgentConfig(mode=arm.mode, reasoning=arm.reasoning, **{**agent_kw, **arm.agent})
        modes[name] = (c.mode, c.tool_access, c.max_tool_calls, arm.task_view)
    assert modes == {"cot": ("cot", "real", None, None), "format_only": ("force", "hidden", None, None),
                     "noop_tool": ("force", "noop", None, None), "full_tool": ("force", "real", None, None),
                     "oracle_calc": ("force", "real", None, "oracle_calc"),
                     "oracle_evidence": ("force", "real", None, "oracle_evidence"),
                     "one_round": ("force", "real", 1, None)}
    with pytest.raises(ValueError, match="unknown condition"):
        F.make_arm("magic")


def test_an_arm_without_overrides_keeps_its_cache_spec():
    plain = Arm("force", "prompt", {"name": "force", "mode": "force", "reasoning": False}, "force")
    assert plain.cache_spec == plain.spec
    noop = Arm("x", "f", {"name": "x"}, agent={"tool_access": "noop"}, task_view="oracle_calc")
    assert noop.cache_spec == {"name": "x", "agent": {"tool_access": "noop"}, "task_view": "oracle_calc"}


def fact_cfg(tmp_path, path, **over):
    cfg = compose("factorized", ["logger=none", f"tasks.path={path}", "split=train", "limit=2",
                                 f"cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / 'out'}", "pte.gamma=0.01",
                                 "bootstrap.replicates=200"])
    return OmegaConf.merge(cfg, over)


def test_a_missing_gsm8k_file_names_tasks_path(tmp_path, monkeypatch):
    import data_builders.backends.loading as loading

    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: pytest.fail("no model before the tasks"))
    with pytest.raises(FileNotFoundError, match=r"tasks.path='.*nope.jsonl'.*GSM8K's train.jsonl"):
        F.run(fact_cfg(tmp_path, tmp_path / "nope.jsonl"))
    cfg = fact_cfg(tmp_path, tmp_path / "x")
    cfg.tasks.path = None
    with pytest.raises(ValueError, match="tasks.path="):
        F.run(cfg)


# ------------------------------------------------------------------------------------------- end to end
def test_end_to_end_on_a_scripted_policy_then_a_rerun_computes_nothing(tmp_path, gsm_file, monkeypatch):
    import data_builders.backends.loading as loading

    policy = FactorizedPolicy()
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: policy)
    results = F.run(fact_cfg(tmp_path, gsm_file))
    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text())["settings"].keys() == results["settings"].keys()
    assert list(results["settings"]) == ["none", "thematic", "parallel_entity", "hedged", "paraphrase", "pooled"]
    assert results["cache"]["hits"] == 0 and results["cache"]["misses"] == 5 * 7 * 2

    acc = {label: {c: m["accuracy"] for c, m in s["conditions"].items()} for label, s in results["settings"].items()}
    assert acc["none"] == {"cot": 1.0, "format_only": 0.5, "noop_tool": 0.0, "full_tool": 1.0, "oracle_calc": 1.0,
                           "oracle_evidence": 1.0, "one_round": 0.5}
    assert acc["hedged"] == {**acc["none"], "full_tool": 0.5, "one_round": 0.5}   # Betty falls for the distractor
    val = {label: {k: c["value"] for k, c in s["contrasts"].items()} for label, s in results["settings"].items()}
    assert val["none"] == {"cot_minus_tool": 0.0, "formatting_cost": 0.5, "protocol_overhead": 0.5,
                           "execution_gain": 1.0, "execution_headroom": 0.0, "distractor_cost_under_tools": 0.0,
                           "one_round_effect": -0.5}
    assert val["hedged"] == {"cot_minus_tool": 0.5, "formatting_cost": 0.5, "protocol_overhead": 0.5,
                             "execution_gain": 0.5, "execution_headroom": 0.5, "distractor_cost_under_tools": 0.5,
                             "one_round_effect": 0.0}
    assert results["settings"]["pooled"]["tasks"] == 10 and val["pooled"]["cot_minus_tool"] == pytest.approx(0.4)
    # pooled, the two problems are resampled with their five variants: the gap can only be 0, 0.4 or 0.8
    assert results["settings"]["pooled"]["contrasts"]["cot_minus_tool"]["ci"] == pytest.approx([0.0, 0.8])
    assert all(s["identity"]["holds"] for s in results["settings"].values())
    cond = results["settings"]["none"]["conditions"]
    assert cond["format_only"]["rejected_calls_per_task"] == 1.0 and cond["format_only"]["tool_calls_per_task"] == 0
    assert cond["noop_tool"]["noop_calls_per_task"] == 1.0 and cond["noop_tool"]["tool_calls_per_task"] == 1.0
    assert cond["full_tool"]["tool_calls_per_task"] == 1.5 and cond["one_round"]["rejected_calls_per_task"] == 0.5
    assert cond["cot"]["tool_calls_per_task"] == 0 and cond["cot"]["pte_per_task"] > 0
    report = (out / "report.md").read_text()
    assert "protocol_overhead" in report and "### hedged (2 tasks)" in report and "holds" in report
    assert (out / "factorized.png").stat().st_size > 1000

    n_generate = len(policy.calls)
    again = F.run(fact_cfg(tmp_path, gsm_file))
    assert len(policy.calls) == n_generate                                   # nothing generated: all cached
    assert again["cache"]["misses"] == 0 and again["cache"]["hits"] == 70
    assert again["settings"] == results["settings"]

    # the tool mode is part of every tool condition's cache key; cot is shared
    other = F.run(fact_cfg(tmp_path, gsm_file, tool_mode="default", distractors=[None], conditions=["cot", "full_tool"]))
    assert other["cache"]["hits"] == 2 and other["cache"]["misses"] == 2 and list(other["settings"]) == ["none"]


def test_wandb_logging_gets_both_tables_and_the_plot(tmp_path, gsm_file, monkeypatch):
    import sys
    import types

    import data_builders.backends.loading as loading

    logged = {}

    class Run:
        def log(self, data):
            logged.update(data)

        def finish(self):
            logged["finished"] = True

    fake = types.SimpleNamespace(init=lambda **kw: logged.update(init=kw) or Run(),
                                 Table=lambda columns, data: {"columns": columns, "data": data},
                                 Image=lambda path: {"image": path})
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setattr(loading, "backend_from_config", lambda *a, **k: FactorizedPolicy())
    cfg = fact_cfg(tmp_path, gsm_file, distractors=[None], conditions=["cot", "format_only", "noop_tool", "full_tool"])
    cfg.logger = {"name": "wandb", "project": "toolwise", "group": None, "mode": "offline"}
    F.run(cfg)
    assert logged["finished"] and logged["init"]["job_type"] == "factorized" and logged["init"]["mode"] == "offline"
    assert [r[:2] for r in logged["conditions"]["data"]] == [["none", c] for c in F.CORE]
    assert {r[1] for r in logged["contrasts"]["data"]} == {"cot_minus_tool", *F.DECOMPOSITION}
    assert logged["plots/factorized"]["image"].endswith("factorized.png")


def test_a_tool_condition_needs_a_tool_mode(tmp_path, gsm_file):
    with pytest.raises(ValueError, match="tool_mode='cot'"):
        F.run(fact_cfg(tmp_path, gsm_file, tool_mode="cot"))
