"""The package import graph (README.md, "Layout": dependencies point one way): no cycles, ``data_builders`` imports
neither ``runtime`` (serving) nor ``trainers``, ``runtime`` never imports ``trainers``, ``controllers`` imports
none of them, no recipe module imports the launcher ``trainers.fit``, and the run-time controller hooks stay free
of the training stack.

The graph is grimp's (the library behind import-linter), built from the source without importing it, so it
holds function-level imports too: an import hidden inside a function still counts. grimp cannot see
``importlib.import_module``; the packages that import all their modules that way
(``pkgutil.iter_modules(__path__)``) get those edges added here, so a discovered module that imports its
package back is a cycle too.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

PACKAGES = ("controllers", "data_builders", "runtime", "trainers", "recipes")
REPO = Path(__file__).resolve().parents[1]
# Modules a deployed agent imports: they must not bring in the training stack.
LIGHT = {m: ("lightning", "pytorch_lightning", "trl") for m in
         ("runtime.controller_hooks", "runtime.messages", "runtime.api")}
DISCOVERY = "pkgutil.iter_modules(__path__)"


def import_graph(packages, root: Path) -> grimp.ImportGraph:
    g = grimp.build_graph(*packages, cache_dir=None)
    for package in sorted(g.modules):
        init = root.joinpath(*package.split("."), "__init__.py")
        if init.is_file() and DISCOVERY in init.read_text(encoding="utf-8"):
            for child in g.find_children(package):
                g.add_import(importer=package, imported=child)
    return g


def _edge(graph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    where = f"line {details[0]['line_number']}: {details[0]['line_contents']}" if details else "discovered"
    return f"{importer} -> {imported}  ({where})"


def cycles(graph) -> list[str]:
    """Each import cycle once, as its chain of import statements."""
    found = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                ring = (importer,) + back[:-1]
                start = ring.index(min(ring))
                ring = ring[start:] + ring[:start]        # one rotation per cycle
                found.add(ring + ring[:1])
    return ["\n  ".join(_edge(graph, a, b) for a, b in zip(c, c[1:])) for c in sorted(found)]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return import_graph(PACKAGES, REPO)


def test_the_checker_sees_function_level_and_discovered_imports(tmp_path, monkeypatch):
    """The checks below are only as good as the graph: a cycle closed by an import inside a function, and one
    closed through pkgutil discovery, must both be found."""
    files = {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import b\n    return b\n",
        "pkg/b.py": "import pkg.a\n",
        "pkg/found/__init__.py": f"import pkgutil\nfor info in {DISCOVERY}:\n    pass\n",
        "pkg/found/c.py": "from pkg.found import d\n",
        "pkg/found/d.py": "import pkg.found\n",
        "pkg/found/e.py": "def f():\n    import pkg.found\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = cycles(import_graph(["pkg"], tmp_path))
    assert any("pkg.a -> pkg.b  (line 2: from pkg import b)" in c for c in found), found
    assert any("pkg.found -> pkg.found.e  (discovered)" in c for c in found), found
    assert len(found) == 4, found   # a-b, found-d, found-e, found-c-d


def test_the_graph_holds_every_module(graph):
    sources = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
               for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    assert set(graph.modules) == sources


def test_no_import_cycles(graph):
    found = cycles(graph)
    assert not found, "import cycles:\n  " + "\n\n  ".join(found)


def _chains(graph, importer: str, imported: str) -> list[str]:
    """Every shortest import chain from ``importer`` (a package or module) to ``imported``, as statements."""
    chains = graph.find_shortest_chains(importer=importer, imported=imported)
    return ["\n    ".join(_edge(graph, a, b) for a, b in zip(c, c[1:])) for c in sorted(chains)]


@pytest.mark.parametrize("importer, forbidden", [("data_builders", "trainers"), ("data_builders", "runtime"),
                                                 ("runtime", "trainers"), ("controllers", "data_builders"),
                                                 ("controllers", "runtime"), ("controllers", "trainers")])
def test_dependencies_point_one_way(graph, importer, forbidden):
    report = _chains(graph, importer, forbidden)
    assert not report, f"{importer} must not import {forbidden}:\n    " + "\n\n    ".join(report)


def test_the_agent_does_not_import_the_metrics(graph):
    """``data_builders.metrics`` are functions of finished trajectories, the agent's output: the loop scoring
    answers through it was the one arrow pointing up (scoring is the task's: ``data_builders.tasks.scoring``)."""
    report = _chains(graph, "data_builders.agent", "data_builders.metrics")
    assert not report, "data_builders.agent must not import data_builders.metrics:\n    " + "\n\n    ".join(report)


def test_the_serving_package_does_not_import_trainers(graph):
    """The endpoint (``runtime.serve``, FastAPI + the runtime API) deploys without the training code, directly or
    through a module it imports."""
    assert "runtime.serve.app" in graph.modules and "runtime.serve.gating" in graph.modules
    report = _chains(graph, "runtime.serve", "trainers")
    assert not report, "runtime.serve must not import trainers:\n    " + "\n\n    ".join(report)


def test_no_recipe_module_imports_the_launcher(graph):
    """``python -m trainers.fit`` runs the launcher as ``__main__``: a recipe module importing ``trainers.fit``
    (for ``RunInfo``/``Fitted``, which live in ``trainers.recipe``) would load it a second time."""
    from trainers.fit import RECIPES

    modules = sorted({target.split(":")[0] for target in RECIPES.values()})
    assert "trainers.policy.sft" in modules and all(m in graph.modules for m in modules)
    found = {m: graph.find_shortest_chain(importer=m, imported="trainers.fit") for m in modules}
    report = ["\n    ".join(_edge(graph, a, b) for a, b in zip(c, c[1:])) for c in found.values() if c]
    assert not report, "recipe modules import trainers.fit:\n    " + "\n\n    ".join(report)


@pytest.mark.parametrize("module", sorted(LIGHT))
def test_runtime_hooks_do_not_load_the_training_stack(module):
    code = (f"import sys, {module}\n"
            f"print(' '.join(sorted(m for m in {LIGHT[module]!r} if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", f"importing {module} loaded {proc.stdout.strip()}"
