"""Probe points of the trivial tier: the label is the policy's own unaided outcome on each task, never a property
of the template it was drawn from (data_builders/tasks/generators/trivial.py keeps only templates whose
unaided accuracy is below 1, so the label must be able to differ inside one)."""
from __future__ import annotations

from omegaconf import OmegaConf

from data_builders.points.labelers import label_probe
from data_builders.tasks.builtin import generate_trivial
from data_builders.tasks.generators import trivial
from tests.doubles import ScriptedBackend

CFG = OmegaConf.create({"max_rounds": 4, "max_new_tokens": 32, "feature_mode": "default", "layers": None,
                        "call_format": "xml"})


def test_labels_of_one_template_follow_the_policys_unaided_answers():
    name = trivial.KEPT[0]
    tasks = generate_trivial("train", n_per_template=3, templates=[name])
    first, second, third = tasks
    # The policy answers the first task right, the second wrong and the third with no boxed answer at all.
    backend = ScriptedBackend({first.instruction: [f"\\boxed{{{first.answer}}}"],
                               second.instruction: [f"\\boxed{{{second.answer}0}}"],
                               third.instruction: ["I am not sure."]})
    rows, tensors = label_probe(backend, tasks, ["train"] * 3, CFG)
    assert [r["task_id"] for r in rows] == [str(t.id) for t in tasks]
    assert [r["label"] for r in rows] == [0, 1, 1]          # 1 = tool needed = wrong without tools
    assert rows[0]["no_tool_answer"] == first.answer and rows[1]["no_tool_answer"] == second.answer + "0"
    assert tensors["hidden"].shape[0] == 3
    # the label is measured in hard_no_tool mode: the policy was told not to use tools on every first prompt
    assert all("Do not use any tools." in p for p in backend.calls[0])


def test_the_same_task_gets_the_other_label_when_the_policy_answers_otherwise():
    task = generate_trivial("train", n_per_template=1, templates=[trivial.KEPT[-1]])
    right = label_probe(ScriptedBackend({task[0].instruction: [f"\\boxed{{{task[0].answer}}}"]}), task, ["train"], CFG)
    wrong = label_probe(ScriptedBackend({task[0].instruction: ["\\boxed{none}"]}), task, ["train"], CFG)
    assert right[0][0]["label"] == 0 and wrong[0][0]["label"] == 1
