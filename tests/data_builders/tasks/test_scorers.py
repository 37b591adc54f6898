"""Task scorers (data_builders/tasks/scorers.py): each scorer's rule and its edges, the spec checks, a scorer of
one's own by dotted path, the judge scorer against a scripted server, and agreement between scorers. Offline."""
from __future__ import annotations

import json
import math
import sys
import textwrap
from types import SimpleNamespace

import pytest

from data_builders.tasks import scoring
from data_builders.tasks.judge import DEFAULT_RUBRIC, JudgeError
from data_builders.tasks.scorers import (SCORERS, Scorer, ScorerError, agreement, extract_answer, first_number,
                                         normalize_text, score_task, scorer_from_spec)
from tests.data_builders.tasks.scripted_judge import RUBRIC, free_port, server  # noqa: F401 - server: a fixture


def score(spec, response, gold, **kw) -> bool:
    return scorer_from_spec(spec)(response, gold, **kw)


# ---------------------------------------------------------------- the answer

@pytest.mark.parametrize("response, answer", [
    ("The answer is \\boxed{42}.", "42"),
    ("First \\boxed{1}, no wait: \\boxed{ 2 }", "2"),                 # the last box: an agent that corrects itself
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),                        # brace-matched
    ("I'll box it: \\boxed{x} ... final \\boxed{\\text{Paris}}", "\\text{Paris}"),
    ("\\boxed{7", "7"),                                               # unclosed: to the end
    ("  Paris \n", "Paris"),                                          # no box: the whole response
    ("Empty \\boxed{}", ""),                                          # an empty box is an empty answer
])
def test_extract_answer(response, answer):
    assert extract_answer(response) == answer


# ---------------------------------------------------------------- when2tool

WHEN2TOOL_CASES = [
    ("Therefore \\boxed{13.4}", "13.40"), ("\\boxed{abc}", "ABC"), ("\\boxed{[123,456]}", "['123', '456']"),
    ("\\boxed{false}", "False"), ("\\boxed{8400}", "8,400"), ("\\boxed{Madrid.}", "Madrid"),
    ("The answer is 42.", "42"), ("\\boxed{1} then \\boxed{2}", "2"), ("\\boxed{}", "x"), ("", "x"),
    ("\\boxed{1}", "True"), ("\\boxed{\\text{Paris}}", "paris"), ("\\boxed{ }", ""),
]


@pytest.mark.parametrize("response, gold", WHEN2TOOL_CASES)
def test_when2tool_is_exactly_is_correct(response, gold):
    assert score("when2tool", response, gold) is scoring.is_correct(response, gold)
    assert score(None, response, gold) is scoring.is_correct(response, gold)


def test_when2tool_keeps_the_benchmark_quirks():
    assert score(None, "\\boxed{1} then \\boxed{2}", "1") is True     # first box, unlike the other scorers
    assert score(None, "The answer is 42.", "42") is False            # no box fails
    assert score("exact", "The answer is 42.", "The answer is 42.") is True
    assert score(None, "\\boxed{42}", None) is False                  # is_correct on a missing gold


# ---------------------------------------------------------------- exact

@pytest.mark.parametrize("response, gold, expected", [
    ("\\boxed{Paris}", "Paris", True),
    ("\\boxed{ Paris }", " Paris\n", True),
    ("Paris", "Paris", True),                      # unboxed: the whole response
    ("  Paris  ", "Paris", True),
    ("\\boxed{paris}", "Paris", False),            # case matters
    ("\\boxed{Paris.}", "Paris", False),
    ("The answer is Paris", "Paris", False),
    ("\\boxed{Lyon} no, \\boxed{Paris}", "Paris", True),
    ("\\boxed{Paris} no, \\boxed{Lyon}", "Paris", False),
    ("\\boxed{}", "", False),                      # an empty answer never scores
    ("   ", "", False),
    ("\\boxed{42}", 42, True),                     # a numeric gold scores as its text
])
def test_exact(response, gold, expected):
    assert score("exact", response, gold) is expected


def test_a_scorer_that_needs_gold_refuses_none():
    for spec in ("exact", "normalized", "numeric", "regex"):
        s = scorer_from_spec(spec)
        assert s.needs_gold is True
        with pytest.raises(ValueError, match=f"the {spec} scorer needs a gold answer"):
            s("\\boxed{1}", None)


def test_a_response_that_is_not_text_scores_false():
    for spec in ("exact", "normalized", "numeric", "regex", "when2tool"):
        assert score(spec, None, "1") is False


# ---------------------------------------------------------------- normalized

@pytest.mark.parametrize("response, gold, expected", [
    ("\\boxed{PARIS}", "paris", True),
    ("\\boxed{Madrid.}", "Madrid", True),                    # a trailing period
    ("\\boxed{\"Madrid\".}", "madrid", True),                 # quotes, then the period
    ("\\boxed{“Madrid”}", "Madrid", True),                   # typographic quotes
    ("**New   York**", "new york", True),                    # unboxed, markdown bold, whitespace collapsed
    ("\\boxed{\\text{New York}}", "New York", True),         # \text{} unwrapped
    ("\\boxed{Ｐａｒｉｓ}", "Paris", True),                    # NFKC: fullwidth letters
    ("\\boxed{STRASSE}", "straße", True),                    # casefold, not lower
    ("\\boxed{Paris!}", "Paris?", True),
    ("\\boxed{-5}", "5", False),                             # a sign is kept
    ("\\boxed{.5}", "5", False),                             # a leading point is kept
    ("\\boxed{50%}", "50", False),
    ("\\boxed{(a)}", "a", False),                            # brackets are kept
    ("\\boxed{Lyon}", "Paris", False),
    ("\\boxed{...}", "...", False),                          # nothing left: never correct
])
def test_normalized(response, gold, expected):
    assert score("normalized", response, gold) is expected


def test_normalize_text():
    assert normalize_text('  "**The   Answer**."  ') == "the answer"
    assert normalize_text("\\text{ Ｐａｒｉｓ }") == "paris"


# ---------------------------------------------------------------- numeric

@pytest.mark.parametrize("text, number", [
    ("42", 42), ("-3.5", -3.5), ("1,234", 1234), ("1,234,567.89", 1234567.89), ("$1,234.50", 1234.5),
    ("-$5", -5), ("$-5", -5), ("€ 12", 12), ("12.5 km", 12.5), ("40% of it", 40), (".5", 0.5), ("x = −7", -7),
    ("item-5", 5), ("12,5", 12), ("1,2345", 1), ("3 apples and 4 pears", 3), ("no digits", None), ("", None),
    ("6.02e23", 6.02e23), ("-1.5E-3 m", -0.0015), ("2e5km", 2), ("1e999", None),
])
def test_first_number(text, number):
    got = first_number(text)
    assert got == number and type(got) is type(number)


@pytest.mark.parametrize("spec, response, gold, expected", [
    ("numeric", "\\boxed{1,234}", "1234", True),
    ("numeric", "\\boxed{1234}", "1,234", True),                   # where when2tool says no
    ("numeric", "\\boxed{12.5 km}", "12.5", True),
    ("numeric", "12.5 km", "12.5", True),                          # unboxed
    ("numeric", "\\boxed{$1,234.50}", "1234.5", True),
    ("numeric", "\\boxed{0.1}", "0.1000001", True),                # within the default 1e-6
    ("numeric", "\\boxed{0.1}", "0.100002", False),
    ("numeric", "\\boxed{-3}", "3", False),
    ("numeric", "\\boxed{many}", "3", False),
    ("numeric", "\\boxed{1.5e3}", "1,500", True),
    ("numeric", "\\boxed{3}", 3.0, True),                          # a numeric gold
    ({"kind": "numeric", "tolerance": 0.5}, "\\boxed{10.4}", "10", True),
    ({"kind": "numeric", "tolerance": 0.5}, "\\boxed{10.6}", "10", False),
    ({"kind": "numeric", "tolerance": 0.01, "relative": True}, "\\boxed{1009}", "1000", True),
    ({"kind": "numeric", "tolerance": 0.01, "relative": True}, "\\boxed{1011}", "1000", False),
    ({"kind": "numeric", "tolerance": 0.01, "relative": True}, "\\boxed{0.0000001}", "0", False),   # gold 0: exact
    ({"kind": "numeric", "tolerance": 0.01, "relative": True}, "\\boxed{0}", "0", True),
    ({"kind": "numeric", "tolerance": 0}, "\\boxed{12345678901234567890123}", "12345678901234567890122", False),
    ({"kind": "numeric", "tolerance": 1}, "\\boxed{12345678901234567890123}", "12345678901234567890122", True),
])
def test_numeric(spec, response, gold, expected):
    assert score(spec, response, gold) is expected


def test_numeric_gold_without_a_number_is_a_task_error():
    with pytest.raises(ValueError, match="gold 'unknown' holds no number"):
        score("numeric", "\\boxed{1}", "unknown")


# ---------------------------------------------------------------- regex

@pytest.mark.parametrize("spec, response, gold, expected", [
    ({"kind": "regex", "pattern": r"\d{3}-\d{4}"}, "\\boxed{555-1234}", None, True),
    ({"kind": "regex", "pattern": r"\d{3}-\d{4}"}, "\\boxed{call 555-1234}", None, False),   # fullmatch
    ({"kind": "regex", "pattern": r"\d{3}-\d{4}"}, "\\boxed{555-12345}", None, False),
    ({"kind": "regex", "pattern": "paris"}, "\\boxed{Paris}", None, False),
    ({"kind": "regex", "pattern": "paris", "ignore_case": True}, "\\boxed{Paris}", None, True),
    ({"kind": "regex", "pattern": "paris|lyon"}, "  lyon ", None, True),                        # unboxed, stripped
    ({"kind": "regex", "pattern": "x"}, "\\boxed{x}", "ignored", True),                         # the spec wins
    ({"kind": "regex", "pattern": ".*"}, "\\boxed{}", None, False),                             # empty answer
    ("regex", "\\boxed{colour}", "colou?r", True),                                              # gold is the pattern
    ("regex", "\\boxed{color}", "colou?r", True),
    ("regex", "\\boxed{colors}", "colou?r", False),
])
def test_regex(spec, response, gold, expected):
    assert score(spec, response, gold) is expected


def test_regex_needs_gold_only_without_a_pattern():
    assert scorer_from_spec("regex").needs_gold is True
    assert scorer_from_spec({"kind": "regex", "pattern": "a+"}).needs_gold is False
    assert score({"kind": "regex", "pattern": "a+"}, "aaa", None) is True


def test_a_bad_gold_pattern_is_a_clear_error():
    with pytest.raises(ValueError, match="gold '\\(unclosed' is not a valid regular expression"):
        score("regex", "\\boxed{x}", "(unclosed")


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize("spec, field", [
    ({"kind": "numeric", "tolerance": -1}, "scorer.tolerance: expected a non-negative number"),
    ({"kind": "numeric", "tolerance": "0.1"}, "scorer.tolerance: expected a non-negative number"),
    ({"kind": "numeric", "tolerance": math.nan}, "scorer.tolerance"),
    ({"kind": "numeric", "tolerance": True}, "scorer.tolerance"),
    ({"kind": "numeric", "relative": "yes"}, "scorer.relative: expected true or false"),
    ({"kind": "numeric", "tol": 0.1},
     "scorer.tol: unknown field for the numeric scorer (accepted: relative, tolerance)"),
    ({"kind": "exact", "pattern": "x"}, "scorer.pattern: unknown field for the exact scorer (accepted: none)"),
    ({"kind": "regex", "pattern": "(unclosed"}, "scorer.pattern: not a valid regular expression"),
    ({"kind": "regex", "pattern": 5}, "scorer.pattern: expected a regular expression string"),
    ({"kind": "regex", "ignore_case": 1}, "scorer.ignore_case: expected true or false"),
    ({"tolerance": 1}, "scorer.kind: required"),
    ({"kind": 3}, "scorer.kind: expected a scorer name"),
    ("telepathy", "scorer.kind: unknown scorer 'telepathy'; known: bfcl_ast, exact, judge, normalized, numeric, regex, "
                  "when2tool"),
    (42, "scorer: expected a name, a mapping with 'kind', or null"),
    ({"kind": "judge", "model": "m"}, "scorer.base_url: required"),
    ({"kind": "judge", "base_url": "http://x/v1"}, "scorer.model: required"),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "rubric": "{question}"}, "scorer.rubric: "),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "rubric": 'say {"correct": true}'}, "scorer.rubric"),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "timeout_s": 0}, "scorer.timeout_s: expected a "
                                                                                  "positive number"),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "max_retries": -1}, "scorer.max_retries"),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "cache_dir": ""}, "scorer.cache_dir"),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m", "api_key": "sk-x"}, "scorer.api_key: unknown"),
    ("no_such_module_xyz:fn", "scorer.kind: cannot import 'no_such_module_xyz'"),
    ("json:no_such_function", "scorer.kind: 'json' has no 'no_such_function'"),
    ("json:decoder", "scorer.kind: 'json:decoder' is not callable"),
    ("json:loads", "scorer.kind: 'json:loads' must accept (final_response, gold, instruction=...)"),
    ({"kind": "json:dumps", "needs_gold": "no"}, "scorer.needs_gold: expected true or false"),
    ({"kind": "json:dumps", "threshold": 1}, "scorer.threshold: unknown field"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(ScorerError) as info:
        scorer_from_spec(spec)
    assert str(info.value).startswith(field), str(info.value)


@pytest.mark.parametrize("spec, canonical", [
    (None, {"kind": "when2tool"}),
    ("exact", {"kind": "exact"}),
    ({"kind": "normalized"}, {"kind": "normalized"}),
    ("numeric", {"kind": "numeric", "tolerance": 1e-6, "relative": False}),
    ({"kind": "numeric", "relative": True, "tolerance": 0}, {"kind": "numeric", "tolerance": 0, "relative": True}),
    ({"kind": "regex", "pattern": "a+"}, {"kind": "regex", "pattern": "a+", "ignore_case": False}),
    ({"kind": "judge", "base_url": "http://x/v1", "model": "m"},
     {"kind": "judge", "base_url": "http://x/v1", "model": "m", "rubric": DEFAULT_RUBRIC,
      "api_key_env": "OPENAI_API_KEY", "cache_dir": "~/.cache/toolwise/judge", "timeout_s": 60, "max_retries": 3}),
])
def test_spec_is_canonical_json_and_round_trips(spec, canonical):
    scorer = scorer_from_spec(spec)
    assert isinstance(scorer, Scorer)
    assert scorer.spec() == canonical
    assert json.loads(json.dumps(scorer.spec())) == canonical
    again = scorer_from_spec(scorer.spec())
    assert type(again) is type(scorer) and again.spec() == canonical and again.name == canonical["kind"]


def test_a_registered_scorer_is_found_by_name(monkeypatch):
    class Contains:
        name, needs_gold = "contains", True

        def __init__(self, ignore_case: bool = False):
            self.ignore_case = ignore_case

        def __call__(self, final_response, gold, *, instruction=""):
            f = str.casefold if self.ignore_case else (lambda s: s)
            return f(gold) in f(final_response)

        def spec(self):
            return {"kind": "contains", "ignore_case": self.ignore_case}

    monkeypatch.setitem(SCORERS, "contains", Contains)
    assert score({"kind": "contains", "ignore_case": True}, "It is PARIS", "paris") is True
    with pytest.raises(ScorerError, match="^scorer.case: unknown field for the contains scorer"):
        scorer_from_spec({"kind": "contains", "case": 1})


# ---------------------------------------------------------------- a scorer of one's own

USER_MODULE = '''
def starts_with_gold(final_response, gold, instruction=""):
    """Correct iff the response starts with the gold; the instruction must reach it."""
    assert instruction == "say it"
    return final_response.startswith(gold)


def no_gold(final_response, gold, *, instruction=""):
    return "ok" in final_response


def not_a_bool(final_response, gold, instruction=""):
    return None


class Scorers:
    @staticmethod
    def nested(final_response, gold, instruction=""):
        return final_response == gold
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    # A module outside toolwise, as a team would ship one: found on sys.path, no edit of toolwise.
    (tmp_path / "team_scorers_fixture.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_scorers_fixture"
    sys.modules.pop("team_scorers_fixture", None)


def test_a_dotted_path_loads_a_user_scorer(user_module):
    s = scorer_from_spec(f"{user_module}:starts_with_gold")
    assert s.name == f"{user_module}:starts_with_gold" and s.needs_gold is True
    assert s("Paris, of course", "Paris", instruction="say it") is True
    assert s("It is Paris", "Paris", instruction="say it") is False
    assert s.spec() == {"kind": f"{user_module}:starts_with_gold", "needs_gold": True}
    assert scorer_from_spec(s.spec()).spec() == s.spec()
    with pytest.raises(ValueError, match="needs a gold answer"):
        s("Paris", None, instruction="say it")


def test_a_user_scorer_without_gold(user_module):
    s = scorer_from_spec({"kind": f"{user_module}:no_gold", "needs_gold": False})
    assert s.needs_gold is False and s("all ok", None) is True and s("bad", None) is False


def test_a_user_scorer_by_attribute_path(user_module):
    assert score(f"{user_module}:Scorers.nested", "x", "x") is True


def test_a_user_scorer_must_return_a_bool(user_module):
    with pytest.raises(TypeError, match="returned NoneType None, not a bool"):
        score(f"{user_module}:not_a_bool", "x", "x")


# ---------------------------------------------------------------- judge

def judge_spec(server, tmp_path, **kw) -> dict:
    return {"kind": "judge", "base_url": server.base_url, "model": "judge-model", "rubric": RUBRIC,
            "cache_dir": str(tmp_path / "judge-cache"), "max_retries": 1, "timeout_s": 10, **kw}


def test_the_judge_scorer_asks_the_judge_once_per_answer(server, tmp_path):
    s = scorer_from_spec(judge_spec(server, tmp_path))
    assert s.name == "judge" and s.needs_gold is True
    assert s("Well, I'd say it is Paris", "Paris", instruction="Capital of France?") is True
    assert s("Lyon", "Paris", instruction="Capital of France?") is False
    assert s("   ", "Paris", instruction="Capital of France?") is False        # no answer: no request
    assert server.count == 2
    prompt = server.bodies[0]["messages"][0]["content"]
    assert "INSTR<<Capital of France?>>" in prompt and "ANSWER<<Well, I'd say it is Paris>>" in prompt
    # The same answer again (a re-scored run, a fresh scorer from the recorded spec): the cache answers.
    assert scorer_from_spec(s.spec())("Well, I'd say it is Paris", "Paris", instruction="Capital of France?")
    assert server.count == 2


def test_a_judge_without_gold_in_its_rubric_needs_no_gold(server, tmp_path):
    s = scorer_from_spec(judge_spec(server, tmp_path, rubric="INSTR<<{instruction}>> ANSWER<<{answer}>> JSON"))
    assert s.needs_gold is False
    assert s("looks ok to me", None, instruction="q") is True
    assert s("bad", None, instruction="q") is False


def test_a_down_judge_raises_never_a_silent_false(tmp_path):
    spec = {"kind": "judge", "base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "m",
            "cache_dir": None, "max_retries": 0, "timeout_s": 2}
    s = scorer_from_spec(spec)      # reading the spec contacts nobody
    with pytest.raises(JudgeError, match="is unreachable after 1 tries"):
        s("\\boxed{Paris}", "Paris", instruction="q")


def test_the_api_key_is_read_from_the_named_variable_and_never_recorded(server, tmp_path, monkeypatch):
    monkeypatch.setenv("TEAM_JUDGE_KEY", "sk-team")
    s = scorer_from_spec(judge_spec(server, tmp_path, api_key_env="TEAM_JUDGE_KEY"))
    assert s("Paris", "Paris", instruction="q") is True
    assert {k.lower(): v for k, v in server.headers[0].items()}["authorization"] == "Bearer sk-team"
    assert "sk-team" not in json.dumps(s.spec())


# ---------------------------------------------------------------- score_task

def test_score_task_uses_the_tasks_scorer():
    task = SimpleNamespace(scorer=None, answer="8,400", gold="8,400", instruction="q")
    assert score_task(task, "\\boxed{8400}") is False                 # When2Tool's rule when the task has none
    task.scorer = {"kind": "numeric", "tolerance": 1e-6, "relative": False}
    assert score_task(task, "\\boxed{8400}") is True
    task.scorer = "normalized"
    assert score_task(task, "\\boxed{8,400.}") is True
    task = SimpleNamespace(scorer=None, answer="", gold=None, instruction="q")
    assert score_task(task, "\\boxed{1}") is False


# ---------------------------------------------------------------- agreement

def test_agreement_counts_rate_and_kappa():
    # judge vs exact: 3 of 4 agree; p_o = 0.75, p_e = 0.75*0.5 + 0.25*0.5 = 0.5, kappa = 0.25 / 0.5 = 0.5
    out = agreement([(True, True), (False, False), (True, False), (True, True)])
    assert out == {"n": 4, "agree": 3, "rate": 0.75, "cohen_kappa": pytest.approx(0.5)}
    assert agreement([(True, True), (False, False)])["cohen_kappa"] == pytest.approx(1.0)
    assert agreement([(True, False), (False, True)])["cohen_kappa"] == pytest.approx(-1.0)
    # 8 pairs: TT×3, TF×1, FT×1, FF×3 -> p_o = 0.75, p_e = 0.5, kappa = 0.5
    pairs = [(True, True)] * 3 + [(True, False), (False, True)] + [(False, False)] * 3
    assert agreement(pairs) == {"n": 8, "agree": 6, "rate": 0.75, "cohen_kappa": pytest.approx(0.5)}


def test_agreement_when_kappa_is_undefined():
    assert agreement([]) == {"n": 0, "agree": 0, "rate": None, "cohen_kappa": None}
    assert agreement([(True, True)] * 3) == {"n": 3, "agree": 3, "rate": 1.0, "cohen_kappa": None}
    # One scorer always True, the other always False: no agreement, none expected by chance either.
    assert agreement([(True, False)] * 2)["cohen_kappa"] == pytest.approx(0.0)
