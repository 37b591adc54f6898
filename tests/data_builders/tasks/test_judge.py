"""The LLM judge against a scripted OpenAI-compatible server (scripted_judge.py: a real HTTP server on a free local
port, driven by the official client). Offline."""
from __future__ import annotations

import json
import time

import pytest

from data_builders.tasks.judge import DEFAULT_RUBRIC, Judge, JudgeError, Verdict, parse_verdict, rubric_fields
from tests.data_builders.tasks.scripted_judge import RUBRIC, free_port, server  # noqa: F401 - server: a fixture


def make_judge(server, tmp_path, **kw) -> Judge:
    kw.setdefault("rubric", RUBRIC)
    kw.setdefault("cache_dir", tmp_path / "cache")
    kw.setdefault("max_retries", 2)
    kw.setdefault("timeout_s", 10)
    return Judge(server.base_url, "judge-model", **kw)


# ---------------------------------------------------------------- verdicts and the request

def test_verdicts_follow_the_judges_reply(server, tmp_path):
    judge = make_judge(server, tmp_path)
    yes = judge.judge("Capital of France?", "I think it is Paris.", "Paris")
    no = judge.judge("Capital of France?", "Lyon", "Paris")
    assert yes == Verdict(correct=True, reason="contains the gold", cached=False)
    assert no.correct is False and no.reason == "does not" and no.cached is False
    assert server.count == 2
    body = server.bodies[0]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == [{"role": "user", "content": RUBRIC.format(
        instruction="Capital of France?", answer="I think it is Paris.", gold="Paris")}]


def test_the_default_rubric_carries_the_task_and_asks_for_json(server, tmp_path):
    server.script = ['{"correct": true, "reason": "same city"}']
    judge = Judge(server.base_url, "m", cache_dir=None, max_retries=0)
    assert judge.rubric == DEFAULT_RUBRIC and judge.needs_gold
    assert judge.judge("Name the capital of France.", "It is Paris.", "Paris").correct is True
    prompt = server.bodies[0]["messages"][0]["content"]
    for text in ("Name the capital of France.", "It is Paris.", "Paris", '{"correct": true or false'):
        assert text in prompt


def test_the_api_key_comes_from_the_environment(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "s3cret")
    make_judge(server, tmp_path, api_key_env="MY_JUDGE_KEY").judge("q", "a", "a")
    headers = {k.lower(): v for k, v in server.headers[0].items()}
    assert headers["authorization"] == "Bearer s3cret"


# ---------------------------------------------------------------- cache

def test_a_cache_hit_makes_no_request(server, tmp_path):
    judge = make_judge(server, tmp_path)
    first = judge.judge("q", "Paris", "Paris")
    assert (first.correct, first.cached, server.count) == (True, False, 1)
    again = judge.judge("q", "Paris", "Paris")
    assert (again.correct, again.reason, again.cached) == (True, first.reason, True)
    assert server.count == 1
    # Another judge on the same cache directory (a later run) is served from it too.
    assert make_judge(server, tmp_path).judge("q", "Paris", "Paris").cached is True
    assert server.count == 1
    # Every input is part of the key: a different gold, instruction, model or rubric asks again.
    judge.judge("q", "Paris", "Lyon")
    judge.judge("q2", "Paris", "Paris")
    Judge(server.base_url, "other-model", RUBRIC, cache_dir=tmp_path / "cache").judge("q", "Paris", "Paris")
    make_judge(server, tmp_path, rubric=RUBRIC + " Be strict.").judge("q", "Paris", "Paris")
    assert server.count == 5
    files = sorted((tmp_path / "cache").rglob("*"))
    verdicts = [f for f in files if f.is_file()]
    assert len(verdicts) == 5 and all(f.suffix == ".json" and not f.name.startswith(".") for f in verdicts)
    key = judge.cache_key("q", "Paris", "Paris")
    assert json.loads((tmp_path / "cache" / key[:2] / f"{key}.json").read_text())["correct"] is True


def test_a_corrupt_cache_file_is_a_miss_and_is_rewritten(server, tmp_path):
    judge = make_judge(server, tmp_path)
    key = judge.cache_key("q", "Paris", "Paris")
    path = tmp_path / "cache" / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert judge.judge("q", "Paris", "Paris").cached is False and server.count == 1
    assert json.loads(path.read_text())["correct"] is True


def test_no_cache_dir_asks_every_time(server, tmp_path):
    judge = make_judge(server, tmp_path, cache_dir=None)
    judge.judge("q", "a", "a")
    judge.judge("q", "a", "a")
    assert server.count == 2 and not (tmp_path / "cache").exists()


# ---------------------------------------------------------------- failures

@pytest.mark.slow
def test_a_500_is_retried_then_succeeds(server, tmp_path):
    server.script = [500, 503]
    verdict = make_judge(server, tmp_path, max_retries=3).judge("q", "Paris", "Paris")
    assert verdict.correct is True and server.count == 3


def test_a_rate_limit_is_retried(server, tmp_path):
    server.retry_after_ms = "10"
    server.script = [429]
    assert make_judge(server, tmp_path).judge("q", "Paris", "Paris").correct is True
    assert server.count == 2


def test_a_judge_that_keeps_failing_raises_after_its_tries(server, tmp_path):
    server.retry_after_ms = "10"   # the server asks for short waits, which the client honours: a fast test
    server.script = [500] * 10
    with pytest.raises(JudgeError, match=r"judge at http://127\.0\.0\.1:\d+/v1 \(model judge-model\) is "
                                         r"unreachable after 3 tries: .*500"):
        make_judge(server, tmp_path, max_retries=2).judge("q", "Paris", "Paris")
    assert server.count == 3


def test_a_dead_port_raises_judge_error_quickly(tmp_path):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    judge = Judge(base_url, "judge-model", RUBRIC, cache_dir=tmp_path, max_retries=1, timeout_s=2)
    start = time.monotonic()
    with pytest.raises(JudgeError) as info:
        judge.judge("q", "a", "a")
    assert time.monotonic() - start < 15
    message = str(info.value)
    assert message.startswith(f"judge at {base_url} (model judge-model) is unreachable after 2 tries: ")
    assert "Connection" in message
    assert not any(p.is_file() for p in tmp_path.rglob("*"))   # no verdict cached


def test_a_refused_request_is_not_retried(server, tmp_path):
    server.script = [401]
    with pytest.raises(JudgeError, match=r"refused the request: HTTP 401"):
        make_judge(server, tmp_path).judge("q", "a", "a")
    assert server.count == 1


def test_malformed_replies_raise_after_the_retries_with_the_raw_reply(server, tmp_path):
    server.script = ["I am not sure.", "Hard to say", "{\"verdict\": 1}", "never reached"]
    with pytest.raises(JudgeError, match="no readable verdict in 3 tries") as info:
        make_judge(server, tmp_path, max_retries=2).judge("q", "a", "a")
    assert server.count == 3
    assert info.value.raw == '{"verdict": 1}' and '{"verdict": 1}' in str(info.value)


def test_a_malformed_reply_then_a_good_one_succeeds(server, tmp_path):
    server.script = ["", '{"correct": "maybe"}']
    verdict = make_judge(server, tmp_path, max_retries=2).judge("q", "Paris", "Paris")
    assert verdict.correct is True and server.count == 3


def test_a_server_without_json_mode_is_asked_again_without_it(server, tmp_path):
    server.reject_json_mode = True
    judge = make_judge(server, tmp_path)
    assert judge.judge("q", "Paris", "Paris").correct is True
    assert server.count == 2
    assert "response_format" in server.bodies[0] and "response_format" not in server.bodies[1]
    assert judge.judge("q", "Lyon", "Paris").correct is False
    assert server.count == 3   # the judge remembers: no rejected request first


@pytest.mark.parametrize("reply, correct", [
    ('```json\n{"correct": true, "reason": "ok"}\n```', True),
    ('Verdict: {"reason": "wrong city", "correct": false} -- done', False),
    ('<think>maybe {"correct": true}</think>{"correct": false, "reason": "r"}', False),
    ("Yes.", True),
    ("**No**, the answer is Lyon.", False),
    ('{"correct": "true"}', True),
])
def test_replies_in_the_wild_are_read(server, tmp_path, reply, correct):
    server.script = [reply]
    assert make_judge(server, tmp_path).judge("q", "a", "b").correct is correct
    assert server.count == 1


# ---------------------------------------------------------------- pure functions

@pytest.mark.parametrize("text, expected", [
    ('{"correct": true, "reason": "same"}', (True, "same")),
    ('{"correct": false}', (False, "")),
    ('prefix {"other": 1} then {"correct": true, "reason": "x"}', (True, "x")),
    ('{"correct": 1}', None),          # not a boolean: never guessed
    ('{"correct": "maybe"}', None),
    ("The answer is correct.", None),  # only the first word is read
    ("", None),
    ("incorrect", (False, "incorrect")),
    ("TRUE", (True, "TRUE")),
    ('{"correct": tru', None),
])
def test_parse_verdict(text, expected):
    assert parse_verdict(text) == expected


def test_rubric_fields_are_checked():
    assert rubric_fields(RUBRIC) == {"instruction", "answer", "gold"}
    assert rubric_fields("Is {answer} right for {instruction}? {{JSON}}") == {"answer", "instruction"}
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) \['question'\]"):
        rubric_fields("{question} {answer}")
    with pytest.raises(ValueError, match="literal braces"):
        rubric_fields('reply {"correct": true}')
    with pytest.raises(ValueError, match="literal braces"):
        rubric_fields("reply { unclosed")


def test_a_rubric_without_gold_scores_without_gold(server, tmp_path):
    judge = make_judge(server, tmp_path, rubric="INSTR<<{instruction}>> ANSWER<<{answer}>> JSON please")
    assert judge.needs_gold is False
    assert judge.judge("q", "all ok", None).correct is True
    with pytest.raises(ValueError, match="no gold"):
        make_judge(server, tmp_path).judge("q", "a", None)


def test_bad_arguments_are_refused(tmp_path):
    for kw in ({"max_retries": -1}, {"max_retries": 1.5}, {"timeout_s": 0}, {"rubric": ""}):
        with pytest.raises(ValueError):
            Judge("http://127.0.0.1:1/v1", "m", **{"cache_dir": tmp_path, **kw})
