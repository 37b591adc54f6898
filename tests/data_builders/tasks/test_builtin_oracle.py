"""Built-in tasks are solvable by the environments they ship with: an oracle that calls the right tool
once reproduces every gold answer (so labels derived from these tasks are trustworthy)."""
from __future__ import annotations

import re

from data_builders.environments import make_environment
from data_builders.tasks import load_tasks
from tests.data_builders.environments.test_benchmark_oracle import _list_call


def test_every_builtin_task_is_solved_by_one_correct_tool_call():
    tasks = load_tasks("builtin", split="train", n_per_cell=10) + load_tasks("builtin", split="test", n_per_cell=10)
    assert len(tasks) == 180
    for task in tasks:
        env = make_environment(task.env)
        if task.env.name == "CalculatorEnv":
            out = env.call("evaluate_expression", {"expression": task.instruction.rsplit(": ", 1)[1]})
            assert str(out["result"]) == task.answer, (task.id, out)
        elif task.env.name == "ListManipulationEnv":
            op, args = _list_call(task.instruction)
            out = env.call(op, args)
            assert str(out["data"]["current_list"]) == task.answer, (task.id, out)
        else:
            event = re.match(r"In what year was (.*)\? Answer", task.instruction).group(1)
            out = env.call("lookup_year", {"event": event})
            assert out["success"] and out["event"] == event, (task.id, out)
            assert re.search(rf"\b{task.answer}\b", out["passage"]), (task.id, out["passage"])
