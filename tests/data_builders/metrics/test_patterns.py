"""the PTE paper's (arXiv 2604.05404) four inefficiency patterns on hand-made typed trajectories: positive and negative cases per
pattern, a record read back from JSON, and count_patterns. Offline, no model."""
from __future__ import annotations

import json

from data_builders.agent.trajectory import Trajectory
from data_builders.metrics.patterns import PATTERN_NAMES, PATTERNS, count_patterns, detect
from tests.data_builders.agent.test_trajectory import V1
from tests.trajectories import make_call, make_trajectory, make_turn

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def call_text(name: str, args: str = "{}", before: str = "") -> str:
    return before + CALL.format(name=name, args=args)


def traj(*steps, answer: str | None = None, task_id: str = "t/0", env: str = "CalculatorEnv",
         instruction: str = "Answer with only the number: (29+18)-14", **extra) -> Trajectory:
    """A trajectory as ``Agent._record`` builds it. Each step is (text, call-or-None); a call is a dict of
    :func:`tests.trajectories.make_call` arguments with at least ``name`` (executed, ``args`` {} and an ``ok``
    result by default)."""
    turns, calls = [], []
    for rnd, (text, call) in enumerate(steps):
        turns.append(make_turn(rnd, text, kind="call" if call is not None else None))
        if call is not None:
            calls.append(make_call(rnd, **call))
    return make_trajectory(turns, calls, task_id=task_id, env=env, instruction=instruction,
                           answer=answer if answer is not None else "", **extra).validate()


def expr(value: str = "29+18-14", result=33) -> dict:
    return {"name": "evaluate_expression", "args": {"expression": value},
            "result": {"success": True, "result": result, "expression": value}}


def only(flags: dict, *names: str) -> bool:
    return {k for k, v in flags.items() if v} == set(names)


# ------------------------------------------------------------------------------------------ API shape
def test_patterns_table_names_every_key():
    assert PATTERN_NAMES == ("confirmatory_tool_use", "tool_mixing", "lack_of_tool_prior", "tool_format_collapse")
    assert all(isinstance(d, str) and d for _, d in PATTERNS)


def test_clean_tool_trajectory_shows_nothing():
    t = traj((call_text("evaluate_expression", '{"expression": "29+18-14"}'), expr()),
             ("\\boxed{33}", None), answer="33")
    assert only(detect(t))


# ------------------------------------------------------------------------------------------ confirmatory
def test_confirmatory_answer_in_reasoning_before_call():
    text = call_text("evaluate_expression", '{"expression": "29+18-14"}',
                     before="29 + 18 = 47, minus 14 is 33. Let me verify with the calculator.\n")
    t = traj((text, expr()), ("\\boxed{33}", None), answer="33")
    assert only(detect(t), "confirmatory_tool_use")


def test_confirmatory_boxed_answer_then_verification_call():
    # The on_answer "continue" flow: boxed answer, VERIFY prompt, then a tool call.
    t = traj(("\\boxed{33}", None), (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33")
    assert detect(t)["confirmatory_tool_use"]


def test_not_confirmatory_when_answer_came_from_a_tool():
    # Answer first given by the tool, then restated and re-checked: a tool solved it, the model did not.
    t = traj((call_text("evaluate_expression"), expr()),
             (call_text("evaluate_expression", before="The tool says 33; double-check.\n"), expr()),
             ("\\boxed{33}", None), answer="33")
    assert not detect(t)["confirmatory_tool_use"]


def test_not_confirmatory_for_near_misses_and_restated_question():
    near = call_text("evaluate_expression", before="Compute 330 and 33.5 and x33 step by step.\n")
    assert not detect(traj((near, expr()), ("\\boxed{33}", None), answer="33"))["confirmatory_tool_use"]
    # The answer is in the instruction itself: restating the question is not answering it.
    ask = call_text("evaluate_expression", before="Which is larger, 47 or 33? Compare them.\n")
    t = traj((ask, expr(result=47)), ("\\boxed{47}", None), answer="47", instruction="Which is larger, 47 or 33?")
    assert not detect(t)["confirmatory_tool_use"]
    # Single-character and boolean answers count only when boxed.
    one = call_text("evaluate_expression", before="Step 1: is it true? check.\n")
    assert not detect(traj((one, expr(result=1)), ("\\boxed{1}", None), answer="1"))["confirmatory_tool_use"]
    assert not detect(traj((one, expr(result=True)), ("\\boxed{True}", None), answer="True"))["confirmatory_tool_use"]


def test_controller_prefill_and_skipped_calls_do_not_count():
    text = "The answer is 33. " + call_text("evaluate_expression")
    t = traj((text, expr()), ("\\boxed{33}", None), answer="33")
    t.turns[0].prefill_text = "The answer is 33. "          # written by the controller, not the model
    assert not detect(t)["confirmatory_tool_use"]
    skipped = {"name": "evaluate_expression", "status": "skipped", "error_kind": "skipped",
               "result": {"success": False, "message": "[SKIPPED] This tool call was not executed."}}
    t = traj((call_text("evaluate_expression", before="It is 33, verify.\n"), skipped), ("\\boxed{33}", None),
             answer="33")
    assert only(detect(t))


# ------------------------------------------------------------------------------------------ tool mixing
def test_tool_mixing_two_distinct_tools():
    t = traj((call_text("evaluate_expression"), expr()),
             (call_text("get_last_result"), {"name": "get_last_result", "result": {"success": True, "result": 33}}),
             ("\\boxed{33}", None), answer="33")
    assert only(detect(t), "tool_mixing")


def test_no_mixing_for_one_tool_twice_or_unknown_or_skipped_tools():
    same = traj((call_text("evaluate_expression"), expr()), (call_text("evaluate_expression"), expr()),
                ("\\boxed{33}", None), answer="33")
    assert not detect(same)["tool_mixing"]
    unknown = {"name": "python", "error_kind": "unavailable_tool",
               "result": {"success": False, "message": "Tool python not available in this task."}}
    skipped = {"name": "get_last_result", "status": "skipped", "error_kind": "skipped",
               "result": {"success": False, "message": "[SKIPPED] not executed"}}
    t = traj((call_text("python"), unknown), (call_text("get_last_result"), skipped),
             (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33")
    flags = detect(t)
    assert not flags["tool_mixing"] and flags["tool_format_collapse"]


# ------------------------------------------------------------------------------------------ lack of tool prior
def test_lack_of_prior_code_without_print_returns_empty():
    empty = {"name": "run_code", "args": {"code": "x = 3 * 11"},
             "result": {"success": True, "stdout": "", "stderr": "", "exit_code": 0, "result": ""}}
    t = traj((call_text("run_code", '{"code": "x = 3 * 11"}'), empty), ("\\boxed{33}", None), answer="33",
             env="CodeExecutorEnv")
    assert only(detect(t), "lack_of_tool_prior")


def test_lack_of_prior_execution_error():
    err = {"name": "run_code", "args": {"code": "print(3 *)"}, "error_kind": "tool_error",
           "result": {"success": False, "stdout": "", "stderr": "SyntaxError: invalid syntax", "exit_code": 1,
                      "message": "SyntaxError: invalid syntax"}}
    t = traj((call_text("run_code"), err), ("\\boxed{33}", None), answer="33", env="CodeExecutorEnv")
    assert only(detect(t), "lack_of_tool_prior")


def test_no_lack_of_prior_for_real_output_zero_stressors_or_schema_errors():
    zero = traj((call_text("evaluate_expression"), expr("1-1", 0)), ("\\boxed{0}", None), answer="0")
    assert not detect(zero)["lack_of_tool_prior"]
    for payload in ({"success": True, "data": {}, "message": "[EMPTY_OUTPUT]"},
                    {"success": False, "message": "[SIMULATED_TOOL_ERROR]"}):
        stressed = traj((call_text("evaluate_expression"), {"name": "evaluate_expression", "result": payload,
                                                            "error_kind": "tool_error" if not payload["success"]
                                                            else None}),
                        ("\\boxed{33}", None), answer="33")
        assert not detect(stressed)["lack_of_tool_prior"]
    missing = {"name": "evaluate_expression", "error_kind": "missing_param",
               "result": {"success": False, "message": "Missing required parameter expression."}}
    flags = detect(traj((call_text("evaluate_expression"), missing), ("\\boxed{33}", None), answer="33"))
    assert not flags["lack_of_tool_prior"] and flags["tool_format_collapse"]


# ------------------------------------------------------------------------------------------ format collapse
def test_format_collapse_unparseable_call_counter_and_text():
    bad = '<tool_call>\n{"name": "evaluate_expression", "arguments": {"expression": 29+18}\n</tool_call>'
    t = traj((bad, None), (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33",
             malformed_calls=1, format_errors=1)
    assert only(detect(t), "tool_format_collapse")
    t.malformed_calls = 0                         # the text alone is enough
    assert detect(t)["tool_format_collapse"]


def test_format_collapse_code_fence_instead_of_call():
    fence = "```python\nprint(29 + 18 - 14)\n```"
    t = traj((fence, None), ("\\boxed{33}", None), answer="33", env="CodeExecutorEnv", format_errors=1)
    assert detect(t)["tool_format_collapse"]


def test_format_collapse_argument_the_schema_does_not_define():
    wrapped = dict(expr(), args={"expression": "29+18-14", "precision": 2})
    t = traj((call_text("evaluate_expression", '{"expression": "29+18-14", "precision": 2}'), wrapped),
             ("\\boxed{33}", None), answer="33")
    assert only(detect(t), "tool_format_collapse")
    t.env = "NoSuchEnv"                           # unknown environment: the schema check is skipped
    assert not detect(t)["tool_format_collapse"]


def test_no_format_collapse_for_reasoning_rejection_or_plain_content():
    rejected = {"name": "evaluate_expression", "status": "rejected",
                "reason": "Reasoning is not allowed here. Reply with the tool call only."}
    t = traj((call_text("evaluate_expression", before="I will use the calculator.\n"), rejected),
             ("Let me think about it.", None),
             (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33", format_errors=2)
    assert only(detect(t))


# ------------------------------------------------------------------------------------------ a record from JSON
def test_detect_on_a_version_1_record_read_back_from_json():
    """The loop's own record (a call rejected for lacking reasoning, an executed call, the answer 40)."""
    record = json.loads(V1.read_text())
    assert only(detect(Trajectory.from_dict(record)))        # the rejected call does not count as a format error
    record["turns"][1]["text"] = "20 + 20 is 40; I will check with the tool. " + record["turns"][1]["text"]
    assert only(detect(Trajectory.from_dict(record)), "confirmatory_tool_use")


# ------------------------------------------------------------------------------------------ count_patterns
def test_count_patterns():
    clean = traj((call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33")
    confirm = traj(("\\boxed{33}", None), (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None),
                   answer="33")
    mixed_empty = traj((call_text("evaluate_expression"), expr()),
                       (call_text("get_last_result"), {"name": "get_last_result",
                                                       "result": {"success": True, "result": None}}),
                       ("\\boxed{33}", None), answer="33")
    direct = traj(("\\boxed{33}", None), answer="33")
    counts = count_patterns(iter([clean, confirm, mixed_empty, direct]))
    assert counts == {"confirmatory_tool_use": 1, "tool_mixing": 1, "lack_of_tool_prior": 1,
                      "tool_format_collapse": 0, "n": 4}
    assert count_patterns([]) == {**{k: 0 for k in PATTERN_NAMES}, "n": 0}


def test_answer_inside_an_unreadable_call_attempt_is_not_reasoning():
    bad = '<tool_call>\n{"name": "evaluate_expression", "arguments": {"expression": "33"]}\n</tool_call>'
    t = traj((bad, None), (call_text("evaluate_expression"), expr()), ("\\boxed{33}", None), answer="33",
             malformed_calls=1)
    assert only(detect(t), "tool_format_collapse")
