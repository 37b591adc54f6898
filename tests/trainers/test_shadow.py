"""The shadow report (trainers/evaluate/shadow.py) on hand-built captured traffic: decisions counted per gate, the
token and PTE estimates and the accuracy estimate each equal to a hand computation."""
from __future__ import annotations

import json

import pytest

import recipes
from data_builders.capture.records import read_capture
from data_builders.gates import gates_at
from trainers.evaluate import shadow
from trainers.intervals import BootstrapSpec

TOOLGATE, GSTEP = gates_at("pre_call")[0], gates_at("on_answer")[0]
GAMMA = 0.01


def rec(rid, messages, usage, response, decisions, results=None):
    turn = {"round": 0, "message": response, "logprobs": None, "finish_reason": "stop",
            "usage": None if usage is None else {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
    return {"request_id": rid, "messages": messages, "tools": [], "turns": [turn], "decisions": decisions,
            "response": response, "results": results or {}}


def call(cid):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}


def decision(gate, action, **kw):
    return {"gate": gate.name, "action": action, "mode": "shadow", "applied": "execute" if gate is TOOLGATE else
            "commit", **kw}


def traffic(tmp_path):
    """X: two calls then an answer; ToolGate would skip the first, G-STEP would continue the answer.
    Y: one call, executed, then an answer G-STEP commits."""
    u = [{"role": "user", "content": "x"}]
    records = [
        rec("r0", u, (100, 10), call("c1"), [decision(TOOLGATE, "skip", call_id="c1")]),
        rec("r3", [{"role": "user", "content": "y"}], (80, 5), call("c2"), [decision(TOOLGATE, "execute", call_id="c2")]),
        rec("r1", u, (130, 10), call("c3"), [decision(TOOLGATE, "execute", call_id="c3")], {"c1": "1"}),
        rec("r2", u, (160, 20), {"role": "assistant", "content": "\\boxed{2}"}, [decision(GSTEP, "continue")],
            {"c3": "2"}),
        rec("r4", u, (100, 15), {"role": "assistant", "content": "\\boxed{3}"}, [decision(GSTEP, "commit")],
            {"c2": "3"}),
    ]
    (tmp_path / "capture-x-00001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return read_capture(tmp_path).records


def pte(turns):
    return sum(p + GAMMA * (p + c) * c for p, c in turns)


def gate_report(tmp_path, gate, labels):
    records = traffic(tmp_path)
    convs = shadow.chains(records)
    root_of = {i: c for c, conv in convs.items() for i in conv.records}
    return shadow.gate_report(gate, records, convs, root_of, GAMMA, labels, BootstrapSpec(replicates=200))


def test_toolgate_row_equals_the_hand_computation(tmp_path):
    g = gate_report(tmp_path, TOOLGATE, {"r0:c1": 1, "r1:c3": 0, "r3:c2": 0})
    assert (g["decisions"], g["actions"], g["modes"]) == (3, {"skip": 1, "execute": 2}, {"shadow": 3})
    assert (g["calls_skipped"], g["calls"], g["conversations_acted_on"], g["conversations"]) == (1, 3, 1, 2)
    # X skipped at its first call: its two later rounds become one re-ask from the next round's context that
    # answers like the last round: (100,10) (130,10) (160,20) -> (100,10) (130,20); Y unchanged
    assert g["tokens_saved"] == (100 + 10 + 130 + 10 + 160 + 20) - (100 + 10 + 130 + 20)
    assert g["tokens"] == (110 + 140 + 180) + (85 + 115)
    assert g["pte_saved"] == pytest.approx(pte([(100, 10), (130, 10), (160, 20)]) - pte([(100, 10), (130, 20)]))
    # X's skipped call was one its answer needed (label 1): -1; Y: 0
    assert g["acc_change"] == -0.5 and g["acc_conversations"] == 2 and g["acc_unlabelled"] == 0


def test_gstep_row_and_unlabelled_moments(tmp_path):
    g = gate_report(tmp_path, GSTEP, {"r4": 1})     # r2, the continued answer, was not replayed
    assert (g["calls_skipped"], g["conversations_acted_on"]) == (0, 1)
    # a continue adds one verification round: the answer's context + its answer + the prompt, answered alike
    added = (160 + 20 + shadow.VERIFY_PROMPT_TOKENS, 20)
    assert g["tokens_saved"] == -sum(added)
    assert g["pte_saved"] == pytest.approx(-pte([added]))
    assert g["acc_unlabelled"] == 1 and g["acc_conversations"] == 1
    # a continue changes an answer for better or worse: counted as changed, never as an accuracy change
    assert g["acc_change"] is None and g["answers_changed"] == 0.0
    g = gate_report(tmp_path, GSTEP, {"r2": 1, "r4": 0})
    assert g["answers_changed"] == 0.5 and g["acc_change"] is None
    # no labels at all: no estimate
    assert "acc_change" not in gate_report(tmp_path, GSTEP, None)


def test_the_command_writes_the_report_and_refuses_a_capture_without_decisions(tmp_path, capsys):
    (tmp_path / "cap").mkdir()
    traffic(tmp_path / "cap")
    cfg = recipes.compose("shadow", [f"capture.dir={tmp_path / 'cap'}", f"pte.gamma={GAMMA}", "logger=none",
                                     f"out_dir={tmp_path / 'report'}"])
    result = shadow.run(cfg)
    said = capsys.readouterr().out
    assert f"gate={TOOLGATE.name} decisions=3 acting=1 calls_skipped=1 tokens_saved=170" in said
    assert {p.name for p in (tmp_path / "report").iterdir()} == {"shadow_report.json", "shadow_report.md",
                                                                  "shadow_report.png"}
    assert json.loads((tmp_path / "report" / "shadow_report.json").read_text())["gates"] == result["gates"]
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "capture-x-00001.jsonl").write_text(json.dumps(rec("a", [], (1, 1), {"content": "x"}, []))
                                                             + "\n")
    with pytest.raises(ValueError, match="no gate decision in 1 records"):
        shadow.report(recipes.compose("shadow", [f"capture.dir={tmp_path / 'none'}", f"pte.gamma={GAMMA}",
                                                 "logger=none", f"out_dir={tmp_path / 'r2'}"]))


def test_the_command_line_runs(tmp_path):
    """``python -m trainers.evaluate.shadow``, as a user types it (its schemas load with the module)."""
    import subprocess
    import sys

    (tmp_path / "cap").mkdir()
    traffic(tmp_path / "cap")
    proc = subprocess.run([sys.executable, "-m", "trainers.evaluate.shadow", f"capture.dir={tmp_path / 'cap'}",
                           f"pte.gamma={GAMMA}", "logger=none", f"out_dir={tmp_path / 'r'}",
                           f"hydra.run.dir={tmp_path / 'h'}"], cwd=recipes.CONFIG_DIR.rsplit("/", 1)[0],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"gate={TOOLGATE.name} decisions=3 acting=1 calls_skipped=1" in proc.stdout
