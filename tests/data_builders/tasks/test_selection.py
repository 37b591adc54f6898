"""Task selection is checked before anything runs: a limit, per_cell, environment or difficulty that would
silently select the wrong tasks (all of them, a few dropped, none) is an error that lists the valid values."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from data_builders.environments import ENVIRONMENTS
from data_builders.tasks import load_tasks, tasks_from_config
from recipes import compose
from tests.conftest import REPO
from tests.data_builders.tasks.test_gsm8k import RECORDS
from tests.data_builders.tasks.test_when2tool import CALC, MULTI, _write_dir


@pytest.fixture
def sources(tmp_path):
    """Keyword arguments for a small task set of each source."""
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n", encoding="utf-8")
    (tmp_path / "w2t").mkdir()
    return {"builtin": {"n_per_cell": 2}, "when2tool": {"path": str(_write_dir(tmp_path / "w2t", split="train"))},
            "gsm8k": {"path": str(gsm)}}


@pytest.mark.parametrize("limit", [0, -3, True, "abc", 2.5])
def test_limit_must_be_null_or_positive(sources, limit):
    # limit=0 used to select every task, limit=-3 all but the last three, limit="abc" a slice TypeError
    with pytest.raises(ValueError, match=r"limit must be null \(all\) or a positive integer, got " + repr(limit)):
        load_tasks("builtin", split="train", limit=limit, **sources["builtin"])
    assert len(load_tasks("builtin", split="train", limit=3, **sources["builtin"])) == 3


@pytest.mark.parametrize("per_cell", [0, -1])
def test_per_cell_must_be_positive(sources, per_cell):
    # per_cell=-1 used to keep all but one task of every cell
    with pytest.raises(ValueError, match=r"tasks\.per_cell must be null \(all\) or a positive integer"):
        load_tasks("when2tool", split="train", per_cell=per_cell, **sources["when2tool"])


@pytest.mark.parametrize("source", ["builtin", "when2tool", "gsm8k"])
def test_unknown_difficulty_lists_the_valid_ones(sources, source):
    with pytest.raises(ValueError, match=r"tasks\.difficulties: \['Hard'\] not valid .* \['easy', 'medium', 'hard'\]"):
        load_tasks(source, split="train", difficulties=["Hard"], **sources[source])


@pytest.mark.parametrize("source, valid", [("when2tool", list(ENVIRONMENTS)), ("gsm8k", ["CalculatorEnv"]),
                                           ("builtin", list(ENVIRONMENTS))])
def test_unknown_environment_lists_the_sources_environments(sources, source, valid):
    with pytest.raises(ValueError) as err:
        load_tasks(source, split="train", envs=["CalculatorEnv", "Calculator"], **sources[source])
    assert f"tasks.envs: ['Calculator'] not valid for the {source} task source; valid: {valid}" in str(err.value)


def test_a_string_or_empty_list_is_not_an_environment_filter(sources):
    with pytest.raises(ValueError, match="a list of names"):         # would filter by its characters
        load_tasks("when2tool", split="train", envs="CalculatorEnv", **sources["when2tool"])
    with pytest.raises(ValueError, match="empty list"):
        load_tasks("when2tool", split="train", difficulties=[], **sources["when2tool"])


def test_an_empty_selection_names_the_filters(sources):
    # valid values that match nothing here: the files hold one easy single-hop and one easy multi-hop task
    with pytest.raises(ValueError) as err:
        load_tasks("when2tool", split="train", difficulties=["hard"], hops="single", **sources["when2tool"])
    msg = str(err.value)
    assert msg.startswith("the when2tool task source selected no task with split='train'")
    assert "hops='single'" in msg and "difficulties=['hard']" in msg and sources["when2tool"]["path"] in msg
    assert [t.id for t in load_tasks("when2tool", split="train", **sources["when2tool"])] == [CALC["id"], MULTI["id"]]


def test_checked_through_a_composed_config_before_any_file_is_read(tmp_path):
    cfg = compose("oracle", ["tasks=when2tool", f"tasks.path={tmp_path / 'missing'}", "tasks.envs=[HashEnvv]"])
    with pytest.raises(ValueError, match=r"tasks\.envs: \['HashEnvv'\]"):     # not "directory not found"
        tasks_from_config(cfg)


def test_oracle_cli_refuses_an_empty_selection_instead_of_printing_nan(tmp_path):
    cmd = [sys.executable, "-m", "data_builders.oracle", "tasks=builtin", "tasks.n_per_cell=1",
           "tasks.difficulties=[Hard]", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "nan" not in proc.stdout
    assert "tasks.difficulties: ['Hard'] not valid" in proc.stderr
    assert not (tmp_path / "oracle_runs.jsonl").exists()
