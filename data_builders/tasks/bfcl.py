"""The ``bfcl`` task source: the Berkeley Function Calling Leaderboard (BFCL v4), single-turn Python categories.

    python -m data_builders.build tasks=bfcl kind=flip

Categories: ``irrelevance`` (240 questions none of the offered functions can answer: the right action is no call),
``simple_python`` (400: one function, one call) and ``multiple`` (200: two to four functions, one call to the
right one). The ``live_*`` categories are refused: they are kept out of everything toolwise builds or tunes on, as
an independent check. Other categories (parallel, Java, JavaScript, multi-turn, agentic) need checkers or
environments this source does not have, and are refused too.

The data ships in the ``bfcl-eval`` wheel (Apache-2.0), which is read as a zip, never installed (its pins on numpy
and other libraries conflict with toolwise's). Where it is looked for, first match wins: ``path`` (the wheel, a
folder holding it, an extracted ``bfcl_eval/data`` folder or a folder above one), then the default folder
``~/.cache/toolwise/bfcl/*.whl``, then an installed ``bfcl_eval`` package. To fetch the wheel::

    pip download --no-deps bfcl-eval==2026.3.23 -d ~/.cache/toolwise/bfcl

Each record becomes a :class:`~.schema.Task`: the instruction is its user message; the environment is one
``bfcl`` tool source (``data_builders/tool_sources/bfcl.py``) offering its functions as BFCL shows them to
OpenAI-style models; the scorer is ``bfcl_ast`` (``data_builders/tasks/scorers.py``), which reads the episode's
executed calls: correct on irrelevance iff there is none, on the others iff there is exactly one and BFCL's AST
checker (``data_builders/tasks/bfcl_ast.py``) accepts it. The gold (``expected.answer``) is the possible answer as
JSON (none for irrelevance). ``category`` is the BFCL category and the environment is named after it
(``bfcl_<category>``), so that selection cells (``per_cell``, the interleaving behind ``limit``) are categories.
Every task is ``easy`` (these are BFCL's basic single-call categories). The split is seeded by id, as for custom
task files: ``test_fraction`` of each category (in expectation) goes to test.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..tool_sources.bfcl import check_functions
from .schema import EnvSpec, Task, TaskFormatError, split_by_id, unique_ids

log = logging.getLogger(__name__)

__all__ = ["BFCL_VERSION", "CATEGORIES", "DEFAULT_DIR", "DOWNLOAD_COMMAND", "ENVS", "BFCLDataNotFound", "load_bfcl",
           "read_bfcl", "open_data", "env_name", "check_categories"]

BFCL_VERSION = "2026.3.23"       # the bfcl-eval release whose data, conversion and checker toolwise mirrors
VERSION_PREFIX = "BFCL_v4"
CATEGORIES = ("irrelevance", "simple_python", "multiple")
DEFAULT_DIR = "~/.cache/toolwise/bfcl"
DOWNLOAD_COMMAND = f"pip download --no-deps bfcl-eval=={BFCL_VERSION} -d {DEFAULT_DIR}"
DATA = "bfcl_eval/data"
DIFFICULTY = "easy"


def env_name(category: str) -> str:
    """The environment label of a category's tasks."""
    return f"bfcl_{category}"


ENVS = tuple(env_name(c) for c in CATEGORIES)


class BFCLDataNotFound(FileNotFoundError):
    """No BFCL data where it was looked for; the message says how to get it."""


def check_categories(categories: Any) -> tuple[str, ...]:
    """``categories`` as a tuple, or ValueError naming what is refused and why."""
    if isinstance(categories, str) or not isinstance(categories, (list, tuple)) or not categories \
            or not all(isinstance(c, str) for c in categories):
        raise ValueError(f"tasks.categories must be a non-empty list of BFCL categories, got {categories!r}; "
                         f"supported: {list(CATEGORIES)}")
    live = [c for c in categories if c.startswith("live")]
    if live:
        raise ValueError(f"tasks.categories: {live} refused: BFCL's live_* categories are held out of everything "
                         f"toolwise builds or tunes on, as an independent check; supported: {list(CATEGORIES)}")
    other = [c for c in categories if c not in CATEGORIES]
    if other:
        raise ValueError(f"tasks.categories: {other} not supported (they need parallel, Java/JavaScript or "
                         f"multi-turn checkers this source does not have); supported: {list(CATEGORIES)}")
    if len(set(categories)) != len(categories):
        raise ValueError(f"tasks.categories lists a category twice: {list(categories)}")
    return tuple(categories)


# ---------------------------------------------------------------------------- finding the data
def _pick_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob("bfcl_eval-*.whl"))
    if not wheels:
        return None
    pinned = [w for w in wheels if w.name.startswith(f"bfcl_eval-{BFCL_VERSION}-")]
    if pinned:
        return pinned[0]
    log.warning("no bfcl-eval %s wheel in %s; reading %s, whose data may differ from the version toolwise's "
                "checker and conversion mirror", BFCL_VERSION, folder, wheels[-1].name)
    return wheels[-1]


def _locate(path: str | Path | None) -> Path | Any:
    """A wheel file, a data folder, or an installed package's data Traversable (the module docstring's order)."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_file():
            return p
        if p.is_dir():
            for folder in (p, p / "data", p / DATA):
                if any(folder.glob(f"{VERSION_PREFIX}_*.json")):
                    return folder
            wheel = _pick_wheel(p)
            if wheel is not None:
                return wheel
        raise BFCLDataNotFound(
            f"no BFCL data at tasks.path={str(path)!r}: expected the bfcl-eval wheel, a folder holding it, or an "
            f"extracted {DATA} folder ({VERSION_PREFIX}_*.json files). Fetch the wheel with: {DOWNLOAD_COMMAND}")
    default = Path(DEFAULT_DIR).expanduser()
    wheel = _pick_wheel(default) if default.is_dir() else None
    if wheel is not None:
        return wheel
    # find_spec first: resources.files() imports the package, only worth doing when there is one
    if importlib.util.find_spec("bfcl_eval") is not None:
        root = resources.files("bfcl_eval") / "data"
        if root.is_dir():
            return root
    raise BFCLDataNotFound(
        f"BFCL data not found: no wheel at {DEFAULT_DIR}/*.whl, no installed bfcl_eval package, and no tasks.path. "
        f"Fetch the wheel (it is read as a zip, not installed) with:\n    {DOWNLOAD_COMMAND}\n"
        f"or pass tasks.path=<the wheel, or an extracted {DATA} folder>")


@contextlib.contextmanager
def open_data(path: str | Path | None = None) -> Iterator[Any]:
    """The folder of BFCL's data files, found as the module docstring says: a Path, a zipfile.Path inside the
    wheel (read in place, closed on exit), or an installed package's Traversable; all three read alike
    (``joinpath``, ``is_file``, ``read_text``). :class:`BFCLDataNotFound` says how to get the data."""
    found = _locate(path)
    if not (isinstance(found, Path) and found.is_file()):
        yield found
        return
    try:
        zf = zipfile.ZipFile(found)
    except (zipfile.BadZipFile, OSError) as exc:
        raise BFCLDataNotFound(f"{found} is not a readable wheel ({exc}); fetch it again: {DOWNLOAD_COMMAND}") \
            from None
    with zf:
        yield zipfile.Path(zf, DATA + "/")


# ---------------------------------------------------------------------------- reading it
def _read_lines(root, name: str, where: str) -> list[dict]:
    node = root.joinpath(name)
    if not node.is_file():
        raise BFCLDataNotFound(f"{where}: {name} is missing (is this BFCL v4 data? {DOWNLOAD_COMMAND})")
    out = []
    for n, line in enumerate(node.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TaskFormatError(f"{where}/{name}", f"line {n}", "<json>", f"not valid JSON: {exc}") from None
    return out


def _instruction(rec: dict, source: str) -> str:
    question = rec.get("question")
    # single-turn: one turn holding the user's message (BFCL's non-live single-turn data has nothing else)
    if not (isinstance(question, list) and len(question) == 1 and isinstance(question[0], list)
            and len(question[0]) == 1 and isinstance(question[0][0], dict)
            and question[0][0].get("role") == "user" and isinstance(question[0][0].get("content"), str)):
        raise TaskFormatError(source, rec.get("id"), "question", "expected one turn with one user message")
    return question[0][0]["content"]


def read_bfcl(path: str | Path | None = None, categories: Sequence[str] = CATEGORIES, *,
              test_fraction: float = 0.3, split_seed: int = 0) -> list[Task]:
    """Every task (both splits) of ``categories``."""
    categories = check_categories(categories)
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"tasks.test_fraction must be in [0, 1], got {test_fraction}")
    files = {}
    with open_data(path) as root:
        where = str(path) if path is not None else str(root)
        for category in categories:
            name = f"{VERSION_PREFIX}_{category}.json"
            files[category] = (name, _read_lines(root, name, where), [] if category == "irrelevance" else
                               _read_lines(root.joinpath("possible_answer"), name, where))
    tasks: list[Task] = []
    for category, (name, records, answer_records) in files.items():
        answers = {a.get("id"): a.get("ground_truth") for a in answer_records}
        source = f"{where}/{name}"
        for rec in records:
            tid = rec.get("id")
            if not isinstance(tid, str):
                raise TaskFormatError(source, tid, "id", "missing or not a string")
            functions = rec.get("function")
            problem = check_functions(functions)
            if problem:
                raise TaskFormatError(source, tid, "function", problem)
            scorer: dict[str, Any] = {"kind": "bfcl_ast", "category": category}
            gold = None
            if category != "irrelevance":
                truth = answers.get(tid)
                if not (isinstance(truth, list) and truth):
                    raise TaskFormatError(source, tid, "possible_answer", "no ground truth for this id")
                gold = json.dumps(truth, ensure_ascii=False)
                scorer["functions"] = functions      # the checker reads BFCL's own types, not the converted ones
            env = EnvSpec(env_name(category), (), {}, sources=({"kind": "bfcl", "functions": functions},))
            tasks.append(Task(id=tid, instruction=_instruction(rec, source), environments=(env,),
                              expected={"answer": gold}, difficulty=DIFFICULTY, tags=("bfcl", category),
                              category=category, split=split_by_id(tid, test_fraction, split_seed), scorer=scorer))
    log.info("BFCL: %d tasks from %s (%s)", len(tasks), where, ", ".join(categories))
    return unique_ids(tasks, where)


def load_bfcl(path: str | Path | None = None, categories: Sequence[str] = CATEGORIES, split: str | None = None, *,
              test_fraction: float = 0.3, split_seed: int = 0) -> list[Task]:
    """The tasks of ``categories`` (one ``split``, or both with None), in file order, category after category."""
    tasks = read_bfcl(path, categories, test_fraction=test_fraction, split_seed=split_seed)
    return tasks if split is None else [t for t in tasks if t.split == split]
