"""Traffic in, decision points out: an agent (the official openai client) talks to the endpoint with both gates in
shadow mode and capture on; ``data_builders.build source=capture`` replays the captured moments on a tiny random
Llama and writes labelled, featurized points that a resumed build reproduces and a fit can read."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")

import recipes  # noqa: E402
from data_builders import build  # noqa: E402
from data_builders.gates import gates_at  # noqa: E402
from data_builders.points.store import load_points  # noqa: E402
from runtime.serve import Upstream, create_app  # noqa: E402
from runtime.serve.testing import ForcedGates, ScriptedUpstream, serve_in_thread  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "arithmetic",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}]


def agent(client, question: str) -> str:
    """A client agent's loop: run each returned call (the result is 42), send it back, until an answer."""
    messages = [{"role": "user", "content": question}]
    for _ in range(4):
        msg = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return msg.content
        messages += [{"role": "tool", "tool_call_id": c.id, "content": json.dumps({"result": 42})}
                     for c in msg.tool_calls]
    raise AssertionError("no answer")


@pytest.fixture
def captured(tmp_path):
    shadow = [f"gates.modes.{gates_at(m)[0].name}=shadow" for m in ("pre_call", "on_answer")]
    with serve_in_thread(ScriptedUpstream().app) as up:
        cfg = recipes.compose("serve", [f"upstream.base_url={up}/v1", f"capture.dir={tmp_path / 'cap'}",
                                        "gates.logprobs=true", *shadow])
        # the gates would skip every call and continue every answer: in shadow nothing of it is acted on
        app = create_app(cfg, ForcedGates(default_tool="skip", default_answer="continue"), Upstream.from_config(cfg.upstream))
        with serve_in_thread(app) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
            answers = [agent(client, f"Question {i}: what is {i} times 6?") for i in range(6)]
    assert all("\\boxed{42}" in a for a in answers)       # the ungated episodes: one call, then the answer
    return tmp_path / "cap"


def compose(tiny_model_dir, cap, out, kind, *over):
    return recipes.compose("build", [f"kind={kind}", "source=capture", f"capture.dir={cap}", "model=hf",
                                     f"model.name={tiny_model_dir}", "shard_size=4", "forced_answer_tokens=4",
                                     "capture.test_fraction=0.3", f"out_dir={out}", *over])


@pytest.mark.slow
@pytest.mark.parametrize("kind, n", [("flip", 6), ("commit", 6), ("probe", 6)])
def test_captured_traffic_builds_labelled_points(captured, tiny_model_dir, tmp_path, kind, n, capsys):
    out = tmp_path / kind
    result = build.run(compose(tiny_model_dir, captured, out, kind))
    said = capsys.readouterr().out
    assert f"records in 1 files; {n} {kind} moments" in said
    ds = load_points(out, kind=kind)
    assert result["points"] == len(ds) == n        # the scripted answers box 42: every moment has a reference
    assert set(ds.points["label"]) <= {0, 1} and set(ds.points["env"]) == {"capture"}
    assert ds.manifest["task_source"]["source"] == "capture" and ds.manifest["label_rule"].startswith("gold-free")
    assert all(f.shape[0] == n for f in ds.features.values())
    # a conversation's moments share a split (flip's and commit's are the same six conversations)
    by_conv = {}
    for conv, split in zip(ds.points["task_id"], ds.points["split"]):
        assert by_conv.setdefault(conv, split) == split
    # a rerun resumes the complete build: the same points
    again = build.run(compose(tiny_model_dir, captured, out, kind))
    assert again == result and load_points(out).points["label"] == ds.points["label"]


def test_a_missing_capture_dir_is_named(tmp_path, tiny_model_dir):
    with pytest.raises(FileNotFoundError, match="capture.dir=.*nowhere"):
        build.run(compose(tiny_model_dir, tmp_path / "nowhere", tmp_path / "out", "flip"))
    with pytest.raises(ValueError, match="source=capture needs capture.dir"):
        build.run(recipes.compose("build", ["source=capture", f"out_dir={tmp_path / 'o'}"]))


def test_a_fit_from_capture_builds_a_new_dataset_once_the_capture_grows(tmp_path):
    from trainers.controller.points import build_config

    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "capture-a-00001.jsonl").write_text('{"request_id": "r0"}\n')
    cfg = recipes.compose("fit", ["recipe=toolgate", "source=capture", f"capture.dir={cap}"])
    first = build_config(cfg)
    assert first.source == "capture" and first.capture.dir == str(cap)
    assert first.out_dir.startswith("outputs/points/flip/capture-")
    assert build_config(cfg).out_dir == first.out_dir                # the same traffic: the same points
    with open(cap / "capture-a-00001.jsonl", "a") as f:
        f.write('{"request_id": "r1"}\n')
    assert build_config(cfg).out_dir != first.out_dir                # more traffic: a new dataset
    with pytest.raises(Exception, match="source"):                   # a policy recipe trains on tasks
        recipes.compose("fit", ["recipe=tool_sft", "source=capture"])
