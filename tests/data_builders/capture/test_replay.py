"""Captured conversations -> decision moments -> gold-free labels: each kind's label checked against the rule on
hand-built traffic, with a scripted policy whose forced answers are known."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from data_builders.capture.records import conversations, final_answers, moments, read_capture, split_of
from data_builders.capture.replay import replay_commit, replay_flip, replay_probe
from data_builders.points import free_labels as free
from tests.doubles import ScriptedBackend

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression.",
                                            "parameters": {"type": "object",
                                                           "properties": {"expression": {"type": "string"}}}}}]


def call(cid: str, expr: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "calculator",
                                                        "arguments": json.dumps({"expression": expr})}}


def answer_turn(text: str) -> dict:
    return {"round": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
            "logprobs": {"content": [{"token": t, "logprob": -0.25} for t in text.split()]},
            "usage": {"prompt_tokens": 40, "completion_tokens": len(text.split()), "total_tokens": 40}}


def record(rid: str, messages: list, response: dict, **over) -> dict:
    turns = [answer_turn(response["content"])] if not response.get("tool_calls") else \
        [{"round": 0, "message": response, "finish_reason": "tool_calls", "logprobs": None, "usage": None}]
    return {"request_id": rid, "time": 0.0, "model": "m", "messages": messages, "tools": TOOLS, "tool_choice": None,
            "turns": turns, "decisions": [], "injected": [], "response": response, "usage": None,
            "upstream_calls": 1,
            "results": {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}} | over


def conversation(tag: str, expr: str, result: str | None, final: str) -> list[dict]:
    """A user question, one call, its result (None: never sent back), the final answer."""
    user = [{"role": "user", "content": f"{tag}: what is {expr}?"}]
    proposing = {"role": "assistant", "content": None, "tool_calls": [call(f"{tag}-c", expr)]}
    first = record(f"{tag}-1", user, proposing)
    if result is None:
        return [first]
    second = record(f"{tag}-2", user + [proposing, {"role": "tool", "tool_call_id": f"{tag}-c", "content": result}],
                    {"role": "assistant", "content": final})
    return [first, second]


def traffic(tmp_path) -> list[dict]:
    """A: the call changes nothing (the policy knew 42); B: the call's result is the answer; C: answered with no
    call; D: a call whose result never came back. Interleaved, as concurrent clients write them."""
    a, b = conversation("QA", "6*7", "42", "The answer is \\boxed{42}."), conversation("QB", "2+3", "5", "\\boxed{5}")
    c = [record("QC-1", [{"role": "user", "content": "QC: what is 3*3?"}], {"role": "assistant",
                                                                            "content": "\\boxed{9}"})]
    d = conversation("QD", "1+1", None, "")
    records = [a[0], b[0], c[0], d[0], b[1], a[1]]
    path = tmp_path / "capture-20261205-000000-00001.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return read_capture(tmp_path).records


# forced answers by (question, assistant messages before the prefill): before a call 0, after its result 1, after a
# verification prompt one more
SCRIPTS = {"QA": ["42}", "42}", "42}"], "QB": ["3}", "5}", "6}"], "QC": ["9}", "9}"], "QD": ["2}"]}
CFG = OmegaConf.create({"forced_answer_tokens": 8, "call_format": "xml", "layers": [0, 1]})


def test_conversations_link_calls_to_results_and_final_answers(tmp_path):
    records = traffic(tmp_path)
    nxt, root = conversations(records)
    ids = [r["request_id"] for r in records]
    assert [ids[j] if j is not None else None for j in nxt] == ["QA-2", "QB-2", None, None, None, None]
    assert [ids[j] for j in root] == ["QA-1", "QB-1", "QC-1", "QD-1", "QB-1", "QA-1"]
    assert final_answers(records, nxt) == ["The answer is \\boxed{42}.", "\\boxed{5}", "\\boxed{9}", None,
                                           "\\boxed{5}", "The answer is \\boxed{42}."]


def test_moments_per_kind_and_what_is_left_out(tmp_path):
    records = traffic(tmp_path)
    flips, left = moments(records, "flip")
    assert [m["id"] for m in flips] == ["QA-1:QA-c", "QB-1:QB-c"] and left == {"call result never sent back": 1}
    assert flips[0]["result"] == "42" and flips[0]["conversation"] == "QA-1"
    probes, _ = moments(records, "probe")
    assert [m["id"] for m in probes] == ["QA-1", "QB-1", "QC-1", "QD-1"] and probes[3]["final"] is None
    commits, _ = moments(records, "commit")
    assert [m["id"] for m in commits] == ["QC-1", "QB-2", "QA-2"]
    # a conversation's moments share its split
    assert split_of("QA-1", 0.2, 0.15, 0) == split_of("QA-1", 0.2, 0.15, 0)


def test_replayed_labels_follow_the_gold_free_rules(tmp_path):
    records = traffic(tmp_path)
    backend = ScriptedBackend(SCRIPTS)
    flips, _ = moments(records, "flip")
    rows, tensors = replay_flip(backend, flips, ["train"] * len(flips), CFG)
    # A: skipped 42 = final 42 -> the call changed nothing (0); B: skipped 3 != final 5, after the result 5 (1)
    assert {r["point_id"]: r["label"] for r in rows} == {"QA-1:QA-c": 0, "QB-1:QB-c": 1}
    assert rows[1]["skipped_answer"] == "\\boxed{3}" and rows[1]["called_answer"] == "\\boxed{5}"
    assert tensors["embedding"].shape == (2, 384) and tensors["structural"].shape[0] == 2

    probes, _ = moments(records, "probe")
    rows, tensors = replay_probe(backend, probes, ["train"] * len(probes), CFG)
    # D never answered: nothing to compare, not labelled
    assert {r["point_id"]: r["label"] for r in rows} == {"QA-1": 0, "QB-1": 1, "QC-1": 0}
    assert tensors["hidden"].shape == (3, 2, 4)

    commits, _ = moments(records, "commit")
    rows, tensors = replay_commit(backend, commits, ["train"] * len(commits), CFG)
    # B: the verified forced answer (6) does not restate the answer (5): continue
    assert {r["point_id"]: r["label"] for r in rows} == {"QC-1": 0, "QB-2": 1, "QA-2": 0}
    assert tensors["features"].shape[0] == 3


@pytest.mark.parametrize("answer, reference, expected", [
    ("\\boxed{42}", "The answer is \\boxed{42}.", True),
    ("\\boxed{41}", "\\boxed{42}", False),
    ("\\boxed{[1, 2]}", "\\boxed{[1,2]}", True),       # When2Tool's structured comparison
    ("\\boxed{42}", "", None),                          # nothing to compare with
    ("\\boxed{42}", None, None),
])
def test_agree(answer, reference, expected):
    assert free.agree(answer, reference) is expected


def test_agree_uses_the_task_scorer_with_the_reference_as_gold():
    from data_builders.tasks.schema import EnvSpec, Task

    task = Task(id=1, instruction="q", environments=(EnvSpec(name="calculator", tools=("calculator",)),), expected={"answer": "0"},
                difficulty="easy", scorer={"kind": "numeric", "tolerance": 0.5})
    assert free.agree("\\boxed{41.8}", "\\boxed{42}", task) is True       # numeric within 0.5: the task's rule
    assert free.agree("\\boxed{41.8}", "\\boxed{42}") is False            # When2Tool's: strings differ
    assert free.agree("\\boxed{42}", "\\boxed{n/a}", task) is None        # a reference with no number


def test_agreement_with_gold_leaves_unlabelled_points_out():
    a = free.agreement_with_gold([1, 0, 1, 0, 1, 0, 0, 0] * 25, [1, 0, 0, 0, 1, 0, -1, 0] * 25)
    assert a["n"] == 175 and a["unlabelled"] == 25 and a["agree"] == 150
    assert (a["gold_positive"], a["free_positive"]) == (75, 50)
    from sklearn.metrics import cohen_kappa_score
    assert a["cohen_kappa"] == pytest.approx(cohen_kappa_score([1, 0, 1, 0, 1, 0, 0] * 25, [1, 0, 0, 0, 1, 0, 0] * 25))
    assert "agree with gold 85.7%" in free.agreement_line(a)
