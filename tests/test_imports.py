"""The package import graph (README.md, "Layout": dependencies point one way). The rules are import-linter
contracts in ``.importlinter`` at the repository root; this file runs them, shows that they can fail, and checks
what they cannot express:

- import-linter (like grimp, its graph library) cannot see ``importlib.import_module``: the packages that import
  all their modules that way (``pkgutil.iter_modules(__path__)``) get those edges added here;
- its ``acyclic_siblings`` contract compares sibling packages and modules only: a cycle through a package's own
  ``__init__`` and a module under it, or one across the root packages, is not a cycle between siblings;
- it reads the source, so the imports that third-party packages make in turn are not in its graph.
"""
from __future__ import annotations

import configparser
import os
import shutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / ".importlinter"
PACKAGES = ("controllers", "data_builders", "runtime", "trainers", "recipes")
DISCOVERY = "pkgutil.iter_modules(__path__)"


def contracts(path: Path = CONFIG) -> dict[str, dict[str, str]]:
    """The contracts of an import-linter INI file, by id: their options as strings."""
    ini = configparser.ConfigParser()
    ini.read(path, encoding="utf-8")
    prefix = "importlinter:contract:"
    return {s.removeprefix(prefix): dict(ini[s]) for s in ini.sections() if s.startswith(prefix)}


def lines(value: str) -> set[str]:
    return {v.strip() for v in value.splitlines() if v.strip()}


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on ``cwd``'s ``.importlinter``, in a fresh interpreter whose path starts at ``cwd`` (so a
    fake layout there shadows the installed packages). No cache: it would write ``.import_linter_cache/`` there;
    wide columns: rich wraps the report at 80 otherwise."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    done = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, COLUMNS="200", PYTHONPATH=str(cwd)))
    # import-linter 2.6 colours its report even into a pipe; the assertions read the words
    return subprocess.CompletedProcess(done.args, done.returncode, ANSI.sub("", done.stdout), ANSI.sub("", done.stderr))


def test_the_import_contracts_hold():
    proc = lint_imports(REPO)
    if proc.returncode:
        pytest.fail(f"lint-imports (.importlinter) failed:\n{proc.stdout[-12000:]}{proc.stderr[-4000:]}", pytrace=False)
    assert f"Contracts: {len(contracts())} kept, 0 broken." in proc.stdout, proc.stdout


# A minimal copy of the layout, with every module a contract names: each break below must fail its contract.
FAKE = {name: "" for name in (
    "controllers/__init__.py", "controllers/base.py", "controllers/probe.py",
    "data_builders/__init__.py", "data_builders/agent/__init__.py", "data_builders/metrics.py",
    "runtime/__init__.py", "runtime/api.py", "runtime/controller_hooks.py", "data_builders/agent/openai_messages.py",
    "trainers/__init__.py", "trainers/fit.py", "trainers/controller/__init__.py", "trainers/controller/fit.py",
    "trainers/policy/__init__.py", "trainers/policy/dpo.py", "trainers/policy/grpo.py", "trainers/policy/sft.py",
    "recipes/__init__.py")}
FAKE |= {"controllers/probe.py": "from controllers import base\n",
         "runtime/api.py": "from runtime import controller_hooks\nimport data_builders.agent.openai_messages\n",
         "trainers/fit.py": "import importlib\nimport recipes\n",
         "trainers/policy/sft.py": "import trl\n"}
BREAKS = {   # contract id -> (file, what it becomes); imports inside functions count too
    "layers": ("data_builders/agent/__init__.py", "def f():\n    from runtime import api\n"),
    "agent-metrics": ("data_builders/agent/__init__.py", "from data_builders.metrics import x\n"),
    "recipes-launcher": ("trainers/controller/fit.py", "def f():\n    from trainers.fit import RECIPES\n"),
    "recipes-independent": ("trainers/policy/grpo.py", "from trainers.policy.sft import fit\n"),
    "light-runtime": ("data_builders/agent/openai_messages.py", "import lightning\n"),
    "acyclic": ("controllers/base.py", "def f():\n    from controllers.probe import p\n"),
}


def fake_layout(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    shutil.copy(CONFIG, root / ".importlinter")
    return root


def test_every_contract_has_a_break():
    assert set(BREAKS) == set(contracts())


@pytest.mark.parametrize("broken", [None, *BREAKS])
def test_the_contracts_can_fail(tmp_path, broken):
    """The repository's own ``.importlinter`` on the fake layout: kept as it is, and each break fails (exit 1)
    the contract it breaks."""
    files = dict(FAKE)
    if broken:
        name, text = BREAKS[broken]
        files[name] = text
    proc = lint_imports(fake_layout(tmp_path, files))
    report = proc.stdout + proc.stderr
    if broken is None:
        assert proc.returncode == 0, report
        return
    assert proc.returncode == 1, report
    assert f"{contracts()[broken]['name']} BROKEN" in report, report
    assert f"Contracts: {len(BREAKS) - 1} kept, 1 broken." in report, report


def test_the_recipe_contracts_name_the_launchers_recipes():
    """The recipe contracts list modules by hand; a recipe module added to ``trainers.fit.recipes()`` must be added
    there."""
    from trainers.fit import recipes

    modules = {target.split(":")[0] for target in recipes().values()}
    assert "trainers.policy.sft" in modules
    listed = contracts()
    assert lines(listed["recipes-launcher"]["source_modules"]) == modules
    assert lines(listed["recipes-independent"]["modules"]) == modules


# ------------------------------------------------------------ what the contracts cannot see (grimp, as they use)
def import_graph(packages, root: Path) -> grimp.ImportGraph:
    """grimp's graph of ``packages`` plus an edge from each package that imports its modules by discovery to each
    of them (``importlib.import_module``: invisible to grimp and import-linter)."""
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


def unseen_cycles(graph) -> list[str]:
    """The import cycles that ``acyclic_siblings`` cannot see, each once, as its chain of import statements.

    A cycle within one root package whose modules all sit under two or more children of their lowest common
    package is a cycle between those siblings: the contract finds it. What is left: a cycle through a package's
    own module (it imports a module under it, which leads back), and a cycle across root packages (they have no
    common package). With the discovery edges in the graph, both are checked here edge by edge."""
    def root(module: str) -> str:
        return module.split(".")[0]

    starts = set()
    for importer in graph.modules:
        below = graph.find_descendants(importer)
        for imported in graph.find_modules_directly_imported_by(importer):
            if imported in below or root(imported) != root(importer):
                starts.add((importer, imported))
    found = set()
    for importer, imported in starts:
        back = graph.find_shortest_chain(importer=imported, imported=importer)
        if back:
            ring = (importer,) + back[:-1]
            start = ring.index(min(ring))
            ring = ring[start:] + ring[:start]        # one rotation per cycle
            found.add(ring + ring[:1])
    return ["\n  ".join(_edge(graph, a, b) for a, b in zip(c, c[1:])) for c in sorted(found)]


def test_the_unseen_cycles_are_found(tmp_path, monkeypatch):
    """Each kind, on a fake layout: a discovered module importing its package back (directly, through another
    module, inside a function), a package ``__init__`` importing a module that imports it back, a cycle between
    two root packages."""
    files = {
        "pkg/__init__.py": "",
        "pkg/found/__init__.py": f"import pkgutil\nfor info in {DISCOVERY}:\n    pass\n",
        "pkg/found/c.py": "from pkg.found import d\n",
        "pkg/found/d.py": "import pkg.found\n",
        "pkg/found/e.py": "def f():\n    import pkg.found\n",
        "pkg/sub/__init__.py": "from pkg.sub import x\n",
        "pkg/sub/x.py": "def f():\n    from pkg.sub import y\n",
        "pkg/y.py": "import other.z\n",
        "other/__init__.py": "",
        "other/z.py": "def f():\n    from pkg import y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    found = unseen_cycles(import_graph(["pkg", "other"], tmp_path))
    assert any("pkg.found -> pkg.found.e  (discovered)" in c for c in found), found
    assert any("pkg.sub -> pkg.sub.x  (line 1: from pkg.sub import x)" in c for c in found), found
    assert any("other.z -> pkg.y  (line 2: from pkg import y)" in c for c in found), found
    assert len(found) == 5, found   # found-c-d, found-d, found-e, sub-x, y-z


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return import_graph(PACKAGES, REPO)


def test_the_graph_holds_every_module(graph):
    """A source file outside the graph (a folder without ``__init__.py``) would be outside every contract."""
    sources = {".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
               for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    assert set(graph.modules) == sources


def test_no_import_cycles_the_contracts_cannot_see(graph):
    found = unseen_cycles(graph)
    assert not found, "import cycles:\n  " + "\n\n  ".join(found)


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(lines(contracts()["light-runtime"]["source_modules"])))
def test_runtime_hooks_do_not_load_the_training_stack(module):
    """The ``light-runtime`` contract at run time: import-linter does not follow the imports that third-party
    packages make in turn, so each module is imported in a fresh interpreter."""
    forbidden = sorted(lines(contracts()["light-runtime"]["forbidden_modules"]))
    code = (f"import sys, {module}\n"
            f"print(' '.join(sorted(m for m in {forbidden!r} if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", f"importing {module} loaded {proc.stdout.strip()}"
