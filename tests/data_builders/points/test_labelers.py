"""The three labelers' label rules, on a scripted policy whose every answer is known in advance."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from data_builders.features.gstep import GSTEP_FEATURES
from data_builders.features.probe import probe_features
from data_builders.features.toolgate import EMBEDDING_DIM, structural_names
from data_builders.points.labelers import label_commit, label_flip, label_probe
from data_builders.protocol import ANSWER_PREFILL
from tests.doubles import CALL, ScriptedBackend, calc_task

CFG = OmegaConf.create({"max_rounds": 4, "max_new_tokens": 32, "feature_mode": "default", "layers": None,
                        "forced_answer_tokens": 8, "verify_rounds": 2, "call_format": "xml"})


class ForcingBackend(ScriptedBackend):
    """Scripted rounds, plus forced answers (prompts ending in the \\boxed{ prefill): ``forced[key]`` gives
    (answer before any tool output, answer once a tool response is in the context)."""

    def __init__(self, scripts, forced):
        super().__init__(scripts)
        self.forced = forced

    def generate(self, prompts, params=None, **kw):
        if prompts and all(p.endswith(ANSWER_PREFILL) for p in prompts):
            from data_builders.backends.base import Generation

            out = []
            for p in prompts:
                key = next(k for k in self.forced if k in p)
                text = self.forced[key][1 if "<tool_response>" in p else 0] + "}"
                out.append(Generation(text=text, token_ids=[1, 2], prompt_tokens=len(p.split()), finish_reason="eos"))
            return out
        return super().generate(prompts, params, **kw)


def test_probe_label_is_failure_without_tools_and_features_are_the_first_prompt():
    tasks = [calc_task(1, "2+2", "4"), calc_task(2, "17*23", "391")]
    backend = ScriptedBackend({"2+2": ["\\boxed{4}"], "17*23": ["\\boxed{400}"]})
    rows, tensors = label_probe(backend, tasks, ["train", "test"], CFG)
    assert [r["label"] for r in rows] == [0, 1]                      # the model fails 17*23 without tools
    assert [r["split"] for r in rows] == ["train", "test"] and rows[1]["no_tool_answer"] == "400"
    assert tensors["hidden"].shape == (2, backend.n_layers + 1, 4)
    # the prompts the probe read are the default-mode first prompts (what the run-time hook sees), all layers
    from data_builders.agent.loop import Agent, AgentConfig
    agent = Agent(backend, AgentConfig(mode="default"))
    assert backend.last_prefill_state.prompts == [agent.initial_prompt(t) for t in tasks]
    assert backend.last_prefill_state.layers == [0, 1, 2]
    assert probe_features(backend, [agent.initial_prompt(tasks[0])], [1]).shape == (1, 1, 4)


def test_probe_never_labels_a_task_whose_episode_could_not_generate(caplog):
    # Before: the episode ended [CONTEXT_LENGTH_EXCEEDED] at round 0, "failed without tools", label 1.
    tasks = [calc_task(1, "2+2", "4"), calc_task(2, "17*23 " + "pad " * 400, "391"), calc_task(3, "5*5", "26")]
    backend = ScriptedBackend({"2+2": ["\\boxed{4}"], "17*23": ["\\boxed{391}"], "5*5": ["\\boxed{24}"]})
    cfg = OmegaConf.merge(CFG, {"max_new_tokens": 64})
    from data_builders.agent.loop import Agent, AgentConfig
    fits = backend.count_tokens(Agent(backend, AgentConfig()).initial_prompt(tasks[0])) + 64 + 50
    backend.config = type("Config", (), {"max_position_embeddings": fits})()
    with caplog.at_level("WARNING"):
        rows, tensors = label_probe(backend, tasks, ["train", "test", "test"], cfg)
    assert [r["task_id"] for r in rows] == ["1", "3"] and [r["label"] for r in rows] == [0, 1]
    assert tensors["hidden"].shape[0] == 2                           # features only for the labelled tasks
    assert "1 of 3 tasks not labelled" in caplog.text and "['2']" in caplog.text


def test_flip_classes_and_execute_label():
    tasks = [calc_task(1, "20+20", "40"), calc_task(2, "3*3", "9"), calc_task(3, "5+5", "10"), calc_task(4, "7*7", "49")]
    scripts = {"20+20": [CALL % "20+20", "\\boxed{40}"],      # helpful, episode right -> execute
               "3*3": [CALL % "3*3", "\\boxed{9}"],            # right before and after -> unchanged
               "5+5": [CALL % "5+5", "\\boxed{11}"],           # harmful (forced answer right -> wrong)
               "7*7": [CALL % "7*7", "\\boxed{50}"]}           # helpful forced answer but episode wrong -> 0
    forced = {"20+20": ("41", "40"), "3*3": ("9", "9"), "5+5": ("10", "11"), "7*7": ("48", "49")}
    rows, t = label_flip(ForcingBackend(scripts, forced), tasks, ["train"] * 4, CFG)
    by = {r["task_id"]: r for r in rows}
    assert [by[i]["flip_class"] for i in "1234"] == ["helpful", "unchanged", "harmful", "helpful"]
    assert [by[i]["label"] for i in "1234"] == [1, 0, 0, 0]
    assert by["1"]["point_id"] == "1:0" and by["1"]["tool"] == "evaluate_expression"
    assert by["1"]["summary"].startswith("evaluate_expression(") and " | " in by["1"]["summary"]
    assert t["embedding"].shape == (4, EMBEDDING_DIM) and t["structural"].shape == (4, len(structural_names()))
    assert t["structural"][:, 1].tolist() == [1.0] * 4               # each is the episode's first call


def test_flip_rows_record_the_state_a_preference_pair_needs():
    from data_builders.agent.parsing import parse_tool_call
    from data_builders.points.preferences import HARMFUL_CALL, HELPFUL_CALL, Texts, flip_pairs, flip_states

    tasks = [calc_task(1, "20+20", "40"), calc_task(3, "5+5", "10")]
    scripts = {"20+20": [CALL % "20+20", "\\boxed{40}"], "5+5": [CALL % "5+5", "\\boxed{11}"]}
    forced = {"20+20": ("41", "40"), "5+5": ("10", "11")}
    rows, _ = label_flip(ForcingBackend(scripts, forced), tasks, ["train", "val"], CFG)
    states = flip_states(rows)
    by = {r["task_id"]: r for r in rows}
    for r in rows:
        s = states[r["point_id"]]
        # the messages up to the call (the call turn not among them), the call exactly as the policy wrote it,
        # and the forced answer at that moment (before the tool ran), prefill included
        assert s["messages"][-1]["role"] == "user" and all(m["role"] != "tool" for m in s["messages"])
        assert s["call"] == CALL % ("20+20" if r["task_id"] == "1" else "5+5")
        assert parse_tool_call(s["call"]) is not None
        assert s["forced_answer"] == ANSWER_PREFILL + ("41}" if r["task_id"] == "1" else "10}")
    pairs, left = flip_pairs(rows, Texts(first_prompt={}, tools={"1": [], "3": []}, flip_state=states))
    got = {p.task_id: p for p in pairs}
    assert not left and by["3"]["flip_class"] == "harmful" and by["1"]["label"] == 1
    assert got["3"].category == HARMFUL_CALL and got["3"].chosen == ANSWER_PREFILL + "10}"   # answer, not call
    assert got["1"].category == HELPFUL_CALL and got["1"].chosen == CALL % "20+20" and got["1"].split == "train"
    # a dataset built before these columns: every point left out, nothing guessed
    old = [{k: v for k, v in r.items() if k not in ("call_text", "before_answer", "before_messages")} for r in rows]
    assert flip_states(old) == {}


@pytest.mark.parametrize("rule,expected", [("fixed", [1, 0, 0]), ("wrong", [1, 0, 1])])
def test_commit_label_rules(rule, expected):
    tasks = [calc_task(1, "6*7", "42"), calc_task(2, "8*8", "64"), calc_task(3, "9*9", "81"), calc_task(4, "2*5", "10")]
    scripts = {"6*7": ["\\boxed{41}", CALL % "6*7", "\\boxed{42}"],   # wrong, verification fixes it -> continue
               "8*8": ["\\boxed{64}", "\\boxed{64}"],                  # right, unchanged -> commit
               "9*9": ["\\boxed{80}", "\\boxed{80}"],                  # wrong, unchanged -> commit (no gain)
               "2*5": ["just text", "more text"]}                      # never answers -> no decision point
    rows, t = label_commit(ScriptedBackend(scripts), tasks, ["test"] * 4, OmegaConf.merge(CFG, {"commit_label": rule}))
    by = {r["task_id"]: r for r in rows}
    assert set(by) == {"1", "2", "3"}
    assert [by[i]["label"] for i in "123"] == expected
    assert by["1"]["first_correct"] is False and by["1"]["final_correct"] is True
    assert t["features"].shape == (3, len(GSTEP_FEATURES))


def test_recorded_toolgate_features_equal_a_run_time_gate_call():
    """Training/serving skew check: a gate hook computing features at run time gets exactly the recorded ones."""
    from data_builders.agent.hooks import Hooks
    from data_builders.agent.loop import Agent, AgentConfig
    from data_builders.features.toolgate import toolgate_state

    seen = []

    class Gate(Hooks):
        def pre_call(self, episode, call):
            seen.append(toolgate_state(episode, call))
            return "execute"

    tasks = [calc_task(1, "20+20", "40")]
    scripts = {"20+20": [CALL % "20+20", "\\boxed{40}"]}
    rows, t = label_flip(ForcingBackend(scripts, {"20+20": ("41", "40")}), tasks, ["train"], CFG)
    Agent(ScriptedBackend(scripts), AgentConfig(mode="default", max_rounds=4, max_new_tokens=32,
                                                call_format="xml"), Gate()).run(tasks)
    assert seen[0][0] == rows[0]["summary"]
    assert seen[0][1].tolist() == pytest.approx(t["structural"][0].tolist())


FREE = OmegaConf.merge(CFG, {"free_labels": True})


def test_flip_gold_free_labels_take_the_final_answer_as_right():
    tasks = [calc_task(1, "20+20", "40"), calc_task(2, "3*3", "9"), calc_task(3, "5+5", "10"), calc_task(4, "7*7", "49")]
    scripts = {"20+20": [CALL % "20+20", "\\boxed{40}"], "3*3": [CALL % "3*3", "\\boxed{9}"],
               "5+5": [CALL % "5+5", "\\boxed{11}"], "7*7": [CALL % "7*7", "\\boxed{50}"]}
    forced = {"20+20": ("41", "40"), "3*3": ("9", "9"), "5+5": ("10", "11"), "7*7": ("48", "49")}
    rows, _ = label_flip(ForcingBackend(scripts, forced), tasks, ["train"] * 4, FREE)
    by = {r["task_id"]: r for r in rows}
    # 1: skipped 41 != final 40, after the result 40 = final: needed (gold agrees); 2: skipping changes nothing;
    # 3: the harmful call led to the (wrong) final 11, which the rule takes as right: needed (gold: not);
    # 4: even after the result the forced answer (49) is not the final 50: not needed
    assert [by[i]["free_label"] for i in "1234"] == [1, 0, 1, 0]
    assert [by[i]["label"] for i in "1234"] == [1, 0, 0, 0]
    assert "free_label" not in label_flip(ForcingBackend(scripts, forced), tasks[:1], ["train"], CFG)[0][0]


def test_commit_and_probe_gold_free_labels():
    tasks = [calc_task(1, "6*7", "42"), calc_task(2, "8*8", "64")]
    scripts = {"6*7": ["\\boxed{41}", CALL % "6*7", "\\boxed{42}"], "8*8": ["\\boxed{64}", "\\boxed{64}"]}
    # the forced answer after the verification prompt: 6*7 revises 41 to 42 (continue), 8*8 restates 64 (commit)
    rows, _ = label_commit(ForcingBackend(scripts, {"6*7": ("42", "42"), "8*8": ("64", "64")}), tasks, ["test"] * 2,
                           FREE)
    assert [(r["label"], r["free_label"]) for r in rows] == [(1, 1), (0, 0)]

    tasks = [calc_task(1, "2+2", "4"), calc_task(2, "17*23", "391"), calc_task(3, "5*5", "25")]
    scripts = {"2+2": ["\\boxed{4}"], "17*23": ["\\boxed{400}"], "5*5": [CALL % "5*5", "\\boxed{25}"]}
    forced = {"2+2": ("4", "4"), "17*23": ("400", "400"), "5*5": ("24", "24")}
    rows, _ = label_probe(ForcingBackend(scripts, forced), tasks, ["train"] * 3, FREE)
    # 2+2: unaided = final; 17*23: the tool-using episode gives the same wrong 400, so unaided "agrees" (gold: needed);
    # 5*5: unaided 24 against the tool-using 25: needed
    assert [r["free_label"] for r in rows] == [0, 0, 1]
    assert [r["label"] for r in rows][:2] == [0, 1]
