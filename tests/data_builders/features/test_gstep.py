"""G-STEP featurizer: fixed contract, agreement/form/log-prob features on hand-built episode views, no gold
read, and one run through the real agent loop (scripted backend, no model)."""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from data_builders.agent import prompts as P
from data_builders.agent.hooks import EpisodeView, Hooks
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.backends.base import Backend, Generation
from data_builders.features.gstep import (FEATURIZER_NAME, FEATURIZER_VERSION, GSTEP_FEATURE_DESCRIPTIONS,
                                          GSTEP_FEATURES, answer_of, gstep_features)
from data_builders.tasks.schema import Task
from tests.trajectories import make_call, make_turn

IDX = {name: i for i, name in enumerate(GSTEP_FEATURES)}
CALL_TEXT = '<tool_call>\n{"name": "evaluate_expression", "arguments": {"expression": "%s"}}\n</tool_call>'


def calc_task(answer="42", difficulty="easy", steps=None, **extra) -> Task:
    expected = {"answer": answer} | ({"steps": steps} if steps else {})
    return Task.from_dict({
        "id": 7, "instruction": "Compute 6 * 7 and answer with only the number.", "difficulty": difficulty,
        "environments": [{"name": "CalculatorEnv", "tools": ["evaluate_expression"], "parameters": {}}],
        "expected": expected, "tags": ["calculator"], **extra}, split="test")


def turn(rnd, text, kind, logprobs=None, *, context_len=100, decode_tokens=None, finish_reason="eos",
         prefill_text=""):
    return make_turn(rnd, text, kind=kind, prefill_tokens=context_len, logprobs=logprobs,
                     decode_tokens=decode_tokens if decode_tokens is not None else len(logprobs or []) or 5,
                     finish_reason=finish_reason, prefill_text=prefill_text)


def executed(rnd, expr, payload):
    ok = payload.get("success") is not False
    return make_call(rnd, args={"expression": expr}, result=payload, error_kind=None if ok else "runtime_error")


def tool_msg(payload):
    return P.tool_response_message(json.dumps(payload), "xml")


def one_call_view(payload, answer, *, task=None, call_lps=None, ans_lps=None, mode="default") -> EpisodeView:
    """Round 0 calls the calculator, round 1 answers; the answer message is not appended yet (as in the loop)."""
    task = task or calc_task()
    messages = P.initial_messages(task.instruction, task.env.name, mode, False, "xml")
    call = CALL_TEXT % "6*7"
    messages += [{"role": "assistant", "content": call}, tool_msg(payload)]
    turns = [turn(0, call, "call", call_lps, context_len=120),
             turn(1, answer, "answer", ans_lps, context_len=160)]
    return EpisodeView(task, messages, turns, [executed(0, "6*7", payload)], 1, mode)


def direct_view(answer, *, lps=None, task=None) -> EpisodeView:
    task = task or calc_task()
    messages = P.initial_messages(task.instruction, task.env.name, "default", False, "xml")
    return EpisodeView(task, messages, [turn(0, answer, "answer", lps)], [], 0, "default")


def feats(view, answer):
    return dict(zip(GSTEP_FEATURES, gstep_features(view, answer).tolist()))


OK_42 = {"success": True, "result": 42, "expression": "6*7"}


# ------------------------------------------------------------------ contract
def test_contract_fixed_length_unique_documented_names():
    assert FEATURIZER_NAME == "gstep" and FEATURIZER_VERSION == 2
    assert 80 <= len(GSTEP_FEATURES) <= 130
    assert len(set(GSTEP_FEATURES)) == len(GSTEP_FEATURES)
    assert set(GSTEP_FEATURE_DESCRIPTIONS) == set(GSTEP_FEATURES)
    assert all(GSTEP_FEATURE_DESCRIPTIONS[n].strip() for n in GSTEP_FEATURES)
    for view, ans in [(one_call_view(OK_42, "\\boxed{42}"), "\\boxed{42}"), (direct_view("\\boxed{1}"), "\\boxed{1}")]:
        v = gstep_features(view, ans)
        assert v.dtype == np.float32 and v.shape == (len(GSTEP_FEATURES),)
        assert np.isfinite(v).all()


# ------------------------------------------------------------------ agreement
def test_agreement_flips_with_the_last_tool_result():
    same = feats(one_call_view(OK_42, "\\boxed{42}"), "\\boxed{42}")
    diff = feats(one_call_view(OK_42, "\\boxed{41}"), "\\boxed{41}")
    for name in ("agree_eq_last_result", "agree_eq_any_result", "agree_eq_any_leaf", "agree_num_exact",
                 "agree_num_close", "agree_substr_last_result"):
        assert same[name] == 1.0 and diff[name] == 0.0, name
    for f in (same, diff):
        assert f["agree_has_result"] == 1.0 and f["agree_has_numeric"] == 1.0
        assert f["traj_after_tool_result"] == 1.0 and f["traj_after_executed_call"] == 1.0
    assert same["agree_num_rel_diff"] == 0.0 and same["agree_num_log_abs_diff"] == 0.0
    assert diff["agree_num_rel_diff"] == pytest.approx(1 / 42, rel=1e-6)
    assert diff["agree_num_log_abs_diff"] == pytest.approx(math.log1p(1.0), rel=1e-6)


def test_a_plain_answer_is_read_as_its_whole_text_and_a_boxed_one_is_unchanged():
    """An endpoint client that does not speak the boxed protocol answers "42": the features read that text as the
    answer (agreement with the tool result, form), with form_box_missing set and no box tokens; the boxed answer's
    vector is the one the loop's points were built with."""
    plain = feats(one_call_view(OK_42, "42"), "42")
    boxed = feats(one_call_view(OK_42, "\\boxed{42}"), "\\boxed{42}")
    for name in ("agree_eq_last_result", "agree_num_exact", "form_is_numeric", "form_is_integer"):
        assert plain[name] == boxed[name] == 1.0, name
    assert plain["form_box_missing"] == 1.0 and boxed["form_box_missing"] == 0.0
    assert plain["form_answer_chars"] == boxed["form_answer_chars"] == pytest.approx(math.log1p(2))
    wrong = feats(one_call_view(OK_42, "  It is 41.\n"), "  It is 41.\n")
    assert wrong["agree_eq_last_result"] == 0.0 and wrong["form_answer_chars"] == pytest.approx(math.log1p(9))
    assert answer_of("\\boxed{ 7 } then text") == "7" and answer_of(" plain\n") == "plain"


def test_agreement_uses_scoring_normalisation_and_any_result():
    # "42.0" equals the int 42 under scoring's structured compare
    f = feats(one_call_view(OK_42, "\\boxed{42.0}"), "\\boxed{42.0}")
    assert f["agree_eq_last_result"] == 1.0 and f["agree_num_exact"] == 1.0
    # two calls: the answer matches the first result only
    task = calc_task()
    view = one_call_view({"success": True, "result": 43, "expression": "6*7+1"}, "\\boxed{42}", task=task)
    view.calls.insert(0, executed(0, "6*7", OK_42))
    g = feats(view, "\\boxed{42}")
    assert g["agree_eq_last_result"] == 0.0 and g["agree_eq_any_result"] == 1.0
    assert g["agree_n_distinct_results"] == pytest.approx(math.log1p(2))
    assert g["agree_num_rel_diff"] == pytest.approx(1 / 43, rel=1e-6)   # against the LAST numeric result


def test_string_results_substring_and_structured_values():
    payload = {"success": True, "result": "The total is 42 apples"}
    f = feats(one_call_view(payload, "\\boxed{42}"), "\\boxed{42}")
    assert f["agree_eq_last_result"] == 0.0 and f["agree_substr_last_result"] == 1.0
    assert f["agree_substr_any_result"] == 1.0 and f["agree_has_numeric"] == 0.0
    # list results compare structurally ([[2, 3]] vs "[[2,3]]"); scalar pass is case-insensitive
    lst = {"success": True, "result": [[2, 3], [7, 1]]}
    assert feats(one_call_view(lst, "\\boxed{[[2,3],[7,1]]}"), "\\boxed{[[2,3],[7,1]]}")["agree_eq_last_result"] == 1.0
    day = {"success": True, "result": "Monday"}
    assert feats(one_call_view(day, "\\boxed{monday}"), "\\boxed{monday}")["agree_eq_last_result"] == 1.0
    # a nested data.value payload is the primary value too
    data = {"success": True, "data": {"last_result": 42}}
    assert feats(one_call_view(data, "\\boxed{42}"), "\\boxed{42}")["agree_eq_last_result"] == 1.0


def test_error_skip_and_no_value_flags():
    err = {"success": False, "message": "[TOOL_RUNTIME_ERROR] ZeroDivisionError: division by zero"}
    f = feats(one_call_view(err, "\\boxed{0}"), "\\boxed{0}")
    assert f["agree_last_call_errored"] == 1.0 and f["traj_tool_errors"] == pytest.approx(math.log1p(1))
    assert f["traj_tool_error_frac"] == 1.0 and f["agree_has_result"] == 0.0 and f["agree_has_numeric"] == 0.0
    assert f["agree_last_result_no_value"] == 0.0   # an error, not an empty success

    view = one_call_view(dict(P.SKIPPED_CALL_RESULT), "\\boxed{42}")
    view.calls[-1] = make_call(0, args={"expression": "6*7"}, status="skipped", result=dict(P.SKIPPED_CALL_RESULT),
                               error_kind="skipped")
    g = feats(view, "\\boxed{42}")
    assert g["agree_last_call_skipped"] == 1.0 and g["agree_last_call_errored"] == 0.0
    assert g["traj_calls_executed"] == 0.0 and g["traj_calls_skipped"] == pytest.approx(math.log1p(1))
    assert g["traj_after_tool_result"] == 1.0 and g["traj_after_executed_call"] == 0.0

    empty = feats(one_call_view({"success": True}, "\\boxed{1}"), "\\boxed{1}")
    assert empty["agree_last_result_no_value"] == 1.0 and empty["agree_last_call_errored"] == 0.0


def test_repeated_calls_distinct_tools_and_rounds_since_call():
    view = one_call_view(OK_42, "\\boxed{42}")
    view.calls.insert(0, executed(0, "6*7", OK_42))           # the same call twice
    view.calls[-1].round = 0
    f = feats(view, "\\boxed{42}")
    assert f["traj_repeated_calls"] == pytest.approx(math.log1p(1))
    assert f["traj_distinct_tools"] == pytest.approx(math.log1p(1))
    assert f["traj_calls_executed"] == pytest.approx(math.log1p(2))
    assert f["traj_rounds_since_call"] == 1.0 and f["traj_round"] == 1.0 and f["traj_n_turns"] == 2.0


# ------------------------------------------------------------------ answer form
@pytest.mark.parametrize("content, expect", [
    ("42", dict(form_is_numeric=1, form_is_integer=1, form_has_decimal_point=0, form_is_negative=0,
                form_has_letters=0, form_has_comma=0, form_is_list=0)),
    ("-3.5", dict(form_is_numeric=1, form_is_integer=0, form_has_decimal_point=1, form_is_negative=1,
                  form_has_letters=0)),
    ("[1, 2, 3]", dict(form_is_numeric=0, form_is_list=1, form_has_comma=1, form_has_letters=0)),
    ("8,400", dict(form_is_numeric=0, form_has_comma=1, form_is_list=0)),
    ("Monday", dict(form_is_numeric=0, form_has_letters=1, form_is_bool_like=0)),
    ("True", dict(form_is_bool_like=1, form_has_letters=1)),
    ("\\frac{1}{2}", dict(form_has_latex=1, form_is_numeric=0)),
])
def test_answer_form_flags(content, expect):
    text = "\\boxed{%s}" % content
    f = feats(direct_view(text), text)
    for name, value in expect.items():
        assert f[name] == float(value), name
    assert f["form_answer_chars"] == pytest.approx(math.log1p(len(content)))
    assert f["form_n_digits"] == pytest.approx(math.log1p(sum(c.isdigit() for c in content)))
    assert f["form_box_missing"] == 0.0 and f["form_box_empty"] == 0.0


@pytest.mark.parametrize("content, numeric, integer", [
    ("1.", 0, 0),          # scoring keeps '1.' a string (When2Tool's rule), so it is not a number here either
    (".5", 1, 0),
    ("\u0663", 1, 1),     # an Arabic-Indic 3 is the int 3 for scoring, and for G-STEP
    ("1e3", 0, 0),
])
def test_answer_numbers_are_read_by_scorings_rule(content, numeric, integer):
    from data_builders.tasks.scoring import parse_number
    text = "\\boxed{%s}" % content
    f = feats(direct_view(text), text)
    assert (f["form_is_numeric"], f["form_is_integer"]) == (float(numeric), float(integer))
    assert (parse_number(content) is not None) == bool(numeric)


def test_text_level_form_features():
    text = "Six times seven is forty-two, so \\boxed{42}. Also \\boxed{43}"
    f = feats(direct_view(text), text)
    assert f["form_n_boxed"] == pytest.approx(math.log1p(2)) and f["form_boxes_disagree"] == 1.0
    assert f["form_reasoning_present"] == 1.0
    assert f["form_text_chars"] == pytest.approx(math.log1p(len(text)))
    assert f["form_after_box_chars"] == pytest.approx(math.log1p(len(". Also \\boxed{43}")))
    bare = feats(direct_view("\\boxed{42}"), "\\boxed{42}")
    assert bare["form_reasoning_present"] == 0.0 and bare["form_after_box_chars"] == 0.0
    assert bare["form_boxes_disagree"] == 0.0
    empty = feats(direct_view("\\boxed{ }"), "\\boxed{ }")
    assert empty["form_box_empty"] == 1.0 and empty["form_box_missing"] == 0.0


def test_number_copied_from_instruction():
    assert feats(direct_view("\\boxed{7}"), "\\boxed{7}")["agree_num_in_instruction"] == 1.0
    assert feats(direct_view("\\boxed{42}"), "\\boxed{42}")["agree_num_in_instruction"] == 0.0


# ------------------------------------------------------------------ log-probs
def _stats(xs):
    a = np.asarray(xs, dtype=np.float64)
    return {"mean": a.mean(), "min": a.min(), "std": a.std(), "last5": a[-5:].mean(),
            "frac_low": float((a < math.log(0.5)).mean()), "nll": -a.mean(), "n": math.log1p(a.size)}


def test_logprob_stats_match_hand_computed_values():
    call_lps = [-0.2, -0.05, -1.5]
    ans_lps = [-0.1, -2.0, -0.5, -0.01, -1.0, -0.3]
    f = feats(one_call_view(OK_42, "\\boxed{42}", call_lps=call_lps, ans_lps=ans_lps), "\\boxed{42}")
    assert f["lp_ans_has"] == 1.0 and f["lp_all_has"] == 1.0
    # by hand for the answering turn
    assert f["lp_ans_mean"] == pytest.approx(-3.91 / 6, abs=1e-6)
    assert f["lp_ans_min"] == pytest.approx(-2.0)
    assert f["lp_ans_last5"] == pytest.approx(-3.81 / 5, abs=1e-6)
    assert f["lp_ans_frac_low"] == pytest.approx(2 / 6)          # -2.0 and -1.0 are below log 0.5
    assert f["lp_ans_nll"] == pytest.approx(3.91 / 6, abs=1e-6)
    m = -3.91 / 6
    assert f["lp_ans_std"] == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in ans_lps) / 6), abs=1e-6)
    for scope, xs in (("ans", ans_lps), ("all", call_lps + ans_lps)):
        for stat, value in _stats(xs).items():
            assert f[f"lp_{scope}_{stat}"] == pytest.approx(value, abs=1e-6), (scope, stat)


def test_box_token_span_one_char_per_token_is_exact():
    text = "ok \\boxed{42}"                       # content "42" is chars [10, 12)
    lps = [-0.01 * (i + 1) for i in range(len(text))]
    f = feats(direct_view(text, lps=lps), text)
    assert f["lp_box_located"] == 1.0
    for stat, value in _stats(lps[10:12]).items():
        assert f[f"lp_box_{stat}"] == pytest.approx(value, abs=1e-6), stat


def test_box_span_ignores_the_response_prefill():
    prefill = "I will answer directly. "
    gen = "ok \\boxed{42}"
    lps = [-0.01 * (i + 1) for i in range(len(gen))]
    view = direct_view(prefill + gen, lps=lps)
    view.turns[0].prefill_text = prefill
    f = feats(view, prefill + gen)
    assert f["traj_prefilled"] == 1.0
    assert f["lp_box_mean"] == pytest.approx(float(np.mean(lps[10:12])), abs=1e-6)


def test_none_logprobs_give_zeros_and_flags():
    f = feats(one_call_view(OK_42, "\\boxed{42}", call_lps=None, ans_lps=None), "\\boxed{42}")
    assert f["lp_ans_has"] == 0.0 and f["lp_all_has"] == 0.0 and f["lp_box_located"] == 0.0
    assert all(value == 0.0 for name, value in f.items() if name.startswith(("lp_ans_", "lp_all_", "lp_box_")))
    # only earlier turns have log-probs: the "all" scope still sees them
    g = feats(one_call_view(OK_42, "\\boxed{42}", call_lps=[-0.5, -0.7], ans_lps=None), "\\boxed{42}")
    assert g["lp_ans_has"] == 0.0 and g["lp_all_has"] == 1.0 and g["lp_all_mean"] == pytest.approx(-0.6)


def test_extreme_logprobs_stay_finite():
    f = gstep_features(direct_view("\\boxed{1}", lps=[float("-inf"), float("nan"), -1e9, 0.0]), "\\boxed{1}")
    assert np.isfinite(f).all()
    assert f[IDX["lp_ans_min"]] == pytest.approx(-50.0)


# ------------------------------------------------------------------ robustness and leakage
def test_empty_call_trajectory_is_finite_and_zero_on_tool_features():
    f = feats(direct_view("\\boxed{42}"), "\\boxed{42}")
    assert np.isfinite(list(f.values())).all()
    assert f["traj_has_calls"] == 0.0 and f["traj_rounds_since_call"] == 1.0
    assert all(f[n] == 0.0 for n in GSTEP_FEATURES if n.startswith("agree_") and n != "agree_num_in_instruction")
    assert f["traj_after_tool_result"] == 0.0 and f["traj_mode_default"] == 1.0
    assert f["traj_difficulty_easy"] == 1.0 and f["traj_category_A"] == 1.0
    assert sum(f[f"traj_category_{c}"] for c in ("A", "B", "C", "M", "other")) == 1.0
    # no turns at all (a degenerate view) and no box: still finite
    empty = EpisodeView(calc_task(), [], [], [], 0, "weird-mode")
    v = gstep_features(empty, "")
    assert np.isfinite(v).all() and v[IDX["form_box_missing"]] == 1.0


def test_task_metadata_one_hots():
    t = calc_task(difficulty="hard", multi_step=True, steps=["a", "b", "c", "d"])
    f = feats(direct_view("\\boxed{1}", task=t), "\\boxed{1}")
    assert f["traj_difficulty_hard"] == 1.0 and f["traj_category_M"] == 1.0 and f["traj_category_A"] == 0.0
    assert f["traj_multi_step"] == 1.0 and "traj_expected_steps" not in f    # gold step count is not a feature


def test_deterministic_for_equal_inputs():
    view = one_call_view(OK_42, "x \\boxed{41}", call_lps=[-0.3, -0.2], ans_lps=[-0.1, -0.9, -0.4])
    a = gstep_features(view, "x \\boxed{41}")
    b = gstep_features(copy.deepcopy(view), "x \\boxed{41}")
    c = gstep_features(view, "x \\boxed{41}")
    assert np.array_equal(a, b) and np.array_equal(a, c)


class _NoGold(dict):
    """An ``expected`` dict that fails the test if the gold answer is read."""

    def __getitem__(self, key):
        if key == "answer":
            raise AssertionError("featurizer read the gold answer")
        return super().__getitem__(key)

    def get(self, key, default=None):
        if key == "answer":
            raise AssertionError("featurizer read the gold answer")
        return super().get(key, default)


def test_gold_answer_is_never_read():
    ans = "\\boxed{42}"
    base = one_call_view(OK_42, ans, task=calc_task("42", steps=["6*7"]), ans_lps=[-0.1, -0.2])
    ref = gstep_features(base, ans)
    for gold in ("41", "42", "something else"):
        other = dataclasses.replace(base, task=calc_task(gold, steps=["different step text"]))
        assert np.array_equal(gstep_features(other, ans), ref)
    guarded = dataclasses.replace(base, task=dataclasses.replace(base.task, expected=_NoGold(steps=["6*7"])))
    assert np.array_equal(gstep_features(guarded, ans), ref)


# ------------------------------------------------------------------ through the real agent loop
class _Scripted(Backend):
    model_id, n_layers = "scripted", 1

    def __init__(self, script):
        self.script = script

    @property
    def fingerprint(self):
        return "scripted@0"

    def render(self, messages, tools=None):
        return json.dumps(messages)

    def count_tokens(self, text):
        return len(text.split())

    def generate(self, prompts, params=None, *, prefill_state=None, return_logprobs=False, cache_keys=None):
        out = []
        for p in prompts:
            text = self.script[min(p.count('"role": "assistant"'), len(self.script) - 1)]
            n = len(text.split())
            out.append(Generation(text=text, token_ids=list(range(n)), prompt_tokens=len(p.split()),
                                  finish_reason="eos", logprobs=[-0.25] * n if return_logprobs else None))
        return out

    def prefill(self, prompts, layers=None):
        raise NotImplementedError


class _Recorder(Hooks):
    def __init__(self, decision="commit"):
        self.seen = []
        self.decision = decision

    def on_answer(self, episode, answer_text):
        assert episode.turns[-1].text == answer_text and episode.turns[-1].kind == "answer"
        self.seen.append(feats(episode, answer_text))
        decision, self.decision = self.decision, "commit"
        return decision


def test_features_inside_the_real_loop_on_answer_hook():
    hooks = _Recorder(decision="continue")
    script = [CALL_TEXT % "6*7", "\\boxed{42}", CALL_TEXT % "6*7+0", "\\boxed{42}"]
    (rec,) = Agent(_Scripted(script), AgentConfig(mode="force", max_continues=1), hooks).run([calc_task()])
    assert rec.correct and len(hooks.seen) == 1      # the re-answer equals the pending one: no second gate call
    f = hooks.seen[0]
    assert f["agree_eq_last_result"] == 1.0 and f["traj_after_executed_call"] == 1.0
    assert f["traj_mode_force"] == 1.0 and f["traj_round"] == 1.0 and f["traj_n_turns"] == 2.0
    assert f["lp_ans_has"] == 1.0 and f["lp_ans_mean"] == pytest.approx(-0.25)
    assert f["traj_is_verification"] == 0.0 and f["agree_eq_prev_answer"] == 0.0


def test_verification_answer_sees_previous_answer():
    task = calc_task()
    view = one_call_view(OK_42, "\\boxed{42}", task=task)
    # round 1 answered, the gate said continue, round 2 answers again
    view.messages += [{"role": "assistant", "content": "\\boxed{42}"}, {"role": "user", "content": P.VERIFY_PROMPT}]
    view.turns.append(turn(2, "\\boxed{42}", "answer", [-0.1]))
    view.round = 2
    f = feats(view, "\\boxed{42}")
    assert f["traj_is_verification"] == 1.0 and f["agree_eq_prev_answer"] == 1.0
    assert f["traj_prev_answer_turns"] == pytest.approx(math.log1p(1)) and f["traj_after_tool_result"] == 0.0


def test_reasoning_mode_rejected_answers_and_format_errors():
    task = calc_task()
    messages = P.initial_messages(task.instruction, task.env.name, "sparse", True, "xml")
    messages += [{"role": "assistant", "content": "hmm"}, {"role": "user", "content": P.continue_prompt("sparse", True)},
                 {"role": "assistant", "content": "\\boxed{42}"},
                 {"role": "user", "content": P.MISSING_REASONING_ANSWER}]
    turns = [turn(0, "hmm", "content"), turn(1, "\\boxed{42}", "answer"),
             turn(2, "Six times seven makes forty-two. \\boxed{42}", "answer", finish_reason="length")]
    view = EpisodeView(task, messages, turns, [], 2, "sparse_tool")     # When2Tool alias of "sparse"
    f = feats(view, turns[-1].text)
    assert f["traj_reasoning_mode"] == 1.0 and f["traj_mode_sparse"] == 1.0
    assert sum(f[f"traj_mode_{m}"] for m in P.MODES) == 1.0
    assert f["traj_rejected_answers"] == pytest.approx(math.log1p(1))
    assert f["traj_format_error_turns"] == pytest.approx(math.log1p(1))
    assert f["traj_prev_answer_turns"] == pytest.approx(math.log1p(2 - 1))
    assert f["traj_ans_truncated"] == 1.0 and f["traj_is_verification"] == 0.0
    assert f["traj_rounds_since_call"] == 3.0 and f["agree_eq_prev_answer"] == 1.0
    assert feats(direct_view("\\boxed{1}"), "\\boxed{1}")["traj_reasoning_mode"] == 0.0


# ------------------------------------------------------------------ golden vectors
GOLDEN = Path(__file__).with_name("gstep_golden.json")


def _golden_cases() -> dict[str, tuple[EpisodeView, str]]:
    """Fixed episode views, one per branch of the featurizer (agreement kinds, call statuses, answer forms,
    log-prob scopes, degenerate inputs), whose vectors are pinned in ``gstep_golden.json``."""
    cases: dict[str, tuple[EpisodeView, str]] = {}

    def add(name, view, answer):
        cases[name] = (view, answer)

    lps = [-0.1, -2.0, -0.5, -0.01, -1.0, -0.3, -0.7]
    add("agree", one_call_view(OK_42, "\\boxed{42}", call_lps=[-0.2, -1.5], ans_lps=lps), "\\boxed{42}")
    add("disagree", one_call_view(OK_42, "x \\boxed{41}", ans_lps=lps[:3]), "x \\boxed{41}")
    add("float_vs_int", one_call_view(OK_42, "\\boxed{42.0}"), "\\boxed{42.0}")
    add("string_result", one_call_view({"success": True, "result": "The total is 42 apples"}, "\\boxed{42}"),
        "\\boxed{42}")
    add("list_result", one_call_view({"success": True, "result": [[2, 3], [7, 1]]}, "\\boxed{[[2,3],[7,1]]}"),
        "\\boxed{[[2,3],[7,1]]}")
    add("data_value", one_call_view({"success": True, "data": {"value": "8,400", "unit": "m"}}, "\\boxed{8400}"),
        "\\boxed{8400}")
    add("fallback_key", one_call_view({"success": True, "hash": "abc123"}, "\\boxed{ABC123}"), "\\boxed{ABC123}")
    add("tool_error", one_call_view({"success": False, "message": "[TOOL_RUNTIME_ERROR] boom"}, "\\boxed{0}"),
        "\\boxed{0}")
    add("empty_success", one_call_view({"success": True}, "\\boxed{1}"), "\\boxed{1}")
    huge = 10 ** 400
    add("beyond_float", one_call_view({"success": True, "result": huge}, "\\boxed{%d}" % (huge + 1)),
        "\\boxed{%d}" % (huge + 1))
    add("near_zero", one_call_view({"success": True, "result": 0}, "\\boxed{0.0001}"), "\\boxed{0.0001}")

    skipped = one_call_view(dict(P.SKIPPED_CALL_RESULT), "\\boxed{42}")
    skipped.calls[-1] = make_call(0, args={"expression": "6*7"}, status="skipped",
                                  result=dict(P.SKIPPED_CALL_RESULT), error_kind="skipped")
    add("skipped", skipped, "\\boxed{42}")
    rejected = one_call_view(OK_42, "\\boxed{42}")
    rejected.calls.append(make_call(1, args={"expression": "6*7"}, status="rejected"))
    add("rejected_after_executed", rejected, "\\boxed{42}")
    two = one_call_view({"success": True, "result": 43, "expression": "6*7+1"}, "\\boxed{42}",
                        call_lps=[-0.3], ans_lps=[-0.4, -0.6])
    two.calls.insert(0, executed(0, "6*7", OK_42))
    two.calls.insert(0, executed(0, "6*7", OK_42))
    add("repeats_two_results", two, "\\boxed{42}")

    for i, content in enumerate(("-3.5", "[1, 2, 3]", "(1,", "8,400", "Monday", "True", "\\frac{1}{2}", "\u0663",
                                 "1.", "")):
        text = "\\boxed{%s}" % content
        add(f"form_{i}", direct_view(text), text)
    multi = "Six times seven is forty-two, so \\boxed{42}. Also \\boxed{43}"
    add("two_boxes", direct_view(multi, lps=[-0.05 * (i + 1) for i in range(20)]), multi)
    add("no_box", direct_view("forty-two"), "forty-two")
    add("from_instruction", direct_view("\\boxed{7}"), "\\boxed{7}")
    box = "ok \\boxed{42}"
    add("box_tokens", direct_view(box, lps=[-0.01 * (i + 1) for i in range(len(box))]), box)
    prefill = "I will answer directly. "
    pre = direct_view(prefill + box, lps=[-0.02 * (i + 1) for i in range(len(box))])
    pre.turns[0].prefill_text = prefill
    add("prefilled", pre, prefill + box)
    add("extreme_lps", direct_view("\\boxed{1}", lps=[float("-inf"), float("nan"), -1e9, 0.0]), "\\boxed{1}")
    add("only_call_lps", one_call_view(OK_42, "\\boxed{42}", call_lps=[-0.5, -0.7]), "\\boxed{42}")
    add("empty_view", EpisodeView(calc_task(), [], [], [], 0, "weird-mode"), "")
    add("metadata", direct_view("\\boxed{1}", task=calc_task(difficulty="hard", multi_step=True, steps=["a", "b"])),
        "\\boxed{1}")

    for mode, category, difficulty in (("necessary", "B", "medium"), ("no_tool", "C", "hard"),
                                       ("hard_no_tool", "Q", "unknown")):
        other = dataclasses.replace(calc_task(), difficulty=difficulty, category=category,
                                    instruction="Add 2.5, 1,000 and 17 to the 3 numbers of doc 12.")
        view = one_call_view(OK_42, "\\boxed{2.5}", task=other, mode=mode)
        view.calls[-1] = make_call(0, args={"expression": "6*7"}, status="rejected")
        add(f"mode_{mode}", view, "\\boxed{2.5}")

    verify = one_call_view(OK_42, "\\boxed{42}")
    verify.messages += [{"role": "assistant", "content": "\\boxed{42}"}, {"role": "user", "content": P.VERIFY_PROMPT}]
    verify.turns.append(turn(2, "\\boxed{42}", "answer", [-0.1]))
    verify.round = 2
    add("verification", verify, "\\boxed{42}")
    task = calc_task()
    messages = P.initial_messages(task.instruction, task.env.name, "sparse", True, "xml")
    messages += [{"role": "assistant", "content": "hmm"}, {"role": "user", "content": P.continue_prompt("sparse", True)},
                 {"role": "assistant", "content": "\\boxed{42}"}, {"role": "user", "content": P.MISSING_REASONING_ANSWER}]
    turns = [turn(0, "hmm", "content"), turn(1, "\\boxed{42}", "answer"),
             turn(2, "Six times seven makes forty-two. \\boxed{42}", "answer", finish_reason="length")]
    add("reasoning_rejections", EpisodeView(task, messages, turns, [], 2, "sparse_tool"), turns[-1].text)

    # Views the real loop hands the on_answer hook (scripted backend with log-probs, one continue).
    hooks = _Capture()
    script = [CALL_TEXT % "6*7", "\\boxed{41}", CALL_TEXT % "6*7+0", "\\boxed{42}"]
    Agent(_Scripted(script), AgentConfig(mode="force", max_continues=2), hooks).run([calc_task()])
    for i, (view, answer) in enumerate(hooks.views):
        add(f"loop_{i}", view, answer)
    return cases


class _Capture(Hooks):
    """Keeps a copy of every view ``on_answer`` gets; says continue once, then commit."""

    def __init__(self):
        self.views, self.decision = [], "continue"

    def on_answer(self, episode, answer_text):
        self.views.append((copy.deepcopy(episode), answer_text))
        decision, self.decision = self.decision, "commit"
        return decision


def _golden_vectors() -> dict[str, list[float]]:
    return {name: gstep_features(view, answer).tolist() for name, (view, answer) in _golden_cases().items()}


def test_vectors_of_fixed_episodes_are_pinned():
    """The featurizer's output on fixed views, bit for bit: a refactor must not move any feature. A change that
    moves a boxed answer's vector (what every decision point the loop builds is) is a new FEATURIZER_VERSION, with
    this file regenerated by ``python -m`` on this module; "no_box" (a plain answer, which no point holds) moved
    once without one, when plain answers came to be read as their whole text."""
    want = json.loads(GOLDEN.read_text())
    got = _golden_vectors()
    assert sorted(got) == sorted(want["vectors"])
    assert want["features"] == list(GSTEP_FEATURES) and want["version"] == FEATURIZER_VERSION
    for name, vec in got.items():
        a, b = np.asarray(vec, np.float32), np.asarray(want["vectors"][name], np.float32)
        moved = [GSTEP_FEATURES[i] for i in np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))]
        assert not moved, f"{name}: {moved}"


if __name__ == "__main__":
    rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in _golden_vectors().items())
    GOLDEN.write_text(f'{{"version": {FEATURIZER_VERSION},\n "features": {json.dumps(list(GSTEP_FEATURES))},\n'
                      f' "vectors": {{\n{rows}\n}}}}\n')
