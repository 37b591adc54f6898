"""``tasks=bfcl``: the Berkeley Function Calling Leaderboard's irrelevance, simple_python and multiple categories.

Three parts. (1) Loader, tool source and scorer on a small hand-written BFCL data folder, and the labels the
existing rules give on BFCL tasks with a scripted policy (no model, no download). (2) The real data, read from
the bfcl-eval wheel: counts and the tool specs. (3) A differential test against BFCL's own code, imported from
the wheel: the tool conversion on every record, and the AST checker on every possible answer of simple_python and
multiple and on systematic perturbations of each. Parts 2 and 3 need the wheel (TOOLWISE_BFCL_WHEEL, else
~/.cache/toolwise/bfcl/*.whl, where .ci/run downloads it) and skip, saying so, without it.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import types
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent, AgentConfig
from data_builders.agent.trajectory import executed_calls
from data_builders.environments import make_environment
from data_builders.points.labelers import label_commit, label_flip, label_probe
from data_builders.tasks import bfcl, bfcl_ast, load_tasks
from data_builders.tasks.scorers import SCORERS, BFCLASTScorer, ScorerError, score_task, scorer_from_spec
from data_builders.tasks.schema import Task, TaskFormatError
from data_builders.tool_sources import source_from_spec
from data_builders.tool_sources.bfcl import GORILLA_TO_OPENAPI, RECORDED_MESSAGE, openai_name, openai_tools
from tests.doubles import ScriptedBackend

# ---------------------------------------------------------------------------------------------- a small data folder
BMI = {"name": "determine_body_mass_index", "description": "Calculate body mass index given weight and height.",
       "parameters": {"type": "dict", "properties": {
           "weight": {"type": "float", "description": "Weight in kilograms."},
           "height": {"type": "float", "description": "Height in meters."}}, "required": ["weight", "height"]}}
FACTORIAL = {"name": "math.factorial", "description": "Calculate the factorial of a given number.",
             "parameters": {"type": "dict", "properties": {
                 "number": {"type": "integer", "description": "The number."}}, "required": ["number"]}}
TRIANGLE = {"name": "calculate_triangle_area", "description": "Calculate the area of a triangle.",
            "parameters": {"type": "dict", "properties": {
                "base": {"type": "integer", "description": "The base."},
                "height": {"type": "integer", "description": "The height."},
                "unit": {"type": "string", "description": "The unit of measure."}}, "required": ["base", "height"]}}
TRIANGLE_PROPS = {"name": "triangle_properties.get", "description": "Dimensions of a triangle from its sides.",
                  "parameters": {"type": "dict", "properties": {
                      "side1": {"type": "integer", "description": "First side."},
                      "side2": {"type": "integer", "description": "Second side."}}, "required": ["side1", "side2"]}}
CIRCLE_PROPS = {"name": "circle_properties.get", "description": "Dimensions of a circle from its radius.",
                "parameters": {"type": "dict", "properties": {
                    "radius": {"type": "float", "description": "The radius."},
                    "get_area": {"type": "boolean", "description": "Whether to compute the area.", "default": True,
                                 "optional": True}}, "required": ["radius"]}}

RECORDS = {
    "irrelevance": [("irrelevance_0", "What is the capital of Peru?", [BMI], None),
                    ("irrelevance_1", "Who wrote Hamlet?", [BMI], None)],
    "simple_python": [("simple_python_0", "What is five factorial?", [FACTORIAL],
                       [{"math.factorial": {"number": [5]}}]),
                      ("simple_python_1", "Area of a triangle of base ten and height five?", [TRIANGLE],
                       [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}])],
    "multiple": [("multiple_0", "Dimensions of a circle of radius three?", [TRIANGLE_PROPS, CIRCLE_PROPS],
                  [{"circle_properties.get": {"radius": [3.0], "get_area": ["", True]}}])],
}


def write_data(root: Path, records=RECORDS) -> Path:
    """A folder laid out like the wheel's bfcl_eval/data (JSON lines, possible answers beside)."""
    data = root / "bfcl_eval" / "data"
    (data / "possible_answer").mkdir(parents=True)
    for category, recs in records.items():
        (data / f"BFCL_v4_{category}.json").write_text("".join(json.dumps(
            {"id": i, "question": [[{"role": "user", "content": q}]], "function": f}) + "\n" for i, q, f, _ in recs))
        if category != "irrelevance":
            (data / "possible_answer" / f"BFCL_v4_{category}.json").write_text("".join(json.dumps(
                {"id": i, "ground_truth": gt}) + "\n" for i, _, _, gt in recs))
    return data


@pytest.fixture
def small(tmp_path) -> dict[str, Task]:
    data = write_data(tmp_path)
    return {t.id: t for t in bfcl.load_bfcl(data)}


def call(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# ---------------------------------------------------------------------------------------------- loader
def test_a_record_becomes_a_task_with_bfcl_tools_gold_and_scorer(small):
    t = small["multiple_0"]
    assert (t.category, t.difficulty, t.env.name, t.split in ("train", "test")) == \
        ("multiple", "easy", "bfcl_multiple", True)
    assert t.instruction == "Dimensions of a circle of radius three?"
    assert json.loads(t.answer) == RECORDS["multiple"][0][3]
    assert t.scorer == {"kind": "bfcl_ast", "category": "multiple", "functions": [TRIANGLE_PROPS, CIRCLE_PROPS]}
    assert small["irrelevance_0"].gold is None and small["irrelevance_0"].scorer == {"kind": "bfcl_ast",
                                                                                   "category": "irrelevance"}
    # the tools the model sees: BFCL's conversion for OpenAI-style models, "." replaced by "_"
    specs = make_environment(t.env).tool_specs()
    assert [s["function"]["name"] for s in specs] == ["circle_properties_get", "triangle_properties_get"]
    radius = specs[0]["function"]["parameters"]["properties"]["radius"]
    assert radius == {"type": "number", "format": "float",
                      "description": "The radius. This is a float type value."}
    assert specs[0]["function"]["parameters"]["type"] == "object"
    assert specs[0]["function"]["description"].endswith(" Note that the provided function is in Python 3 syntax.")
    assert scorer_from_spec(t.scorer).spec() == t.scorer        # the recorded spec rebuilds the same scorer


def test_the_split_is_seeded_by_id_and_the_source_is_wired(tmp_path):
    data = write_data(tmp_path)
    everything = bfcl.read_bfcl(data)
    for seed in (0, 1):
        parts = {s: {t.id for t in load_tasks("bfcl", split=s, path=str(data), split_seed=seed, test_fraction=0.5)}
                 for s in ("train", "test")}
        assert not parts["train"] & parts["test"] and parts["train"] | parts["test"] == {t.id for t in everything}
    assert {t.split for t in bfcl.read_bfcl(data, test_fraction=1.0)} == {"test"}
    first = load_tasks("bfcl", split="train", path=str(data), test_fraction=0.0, limit=3)
    # the interleaving behind limit covers the categories (one environment per category)
    assert sorted(t.category for t in first) == ["irrelevance", "multiple", "simple_python"]
    only = load_tasks("bfcl", split="train", path=str(data), test_fraction=0.0, categories=["multiple"])
    assert [t.id for t in only] == ["multiple_0"]
    assert [t.id for t in load_tasks("bfcl", split="train", path=str(data), test_fraction=0.0,
                                     envs=["bfcl_irrelevance"])] == ["irrelevance_0", "irrelevance_1"]


@pytest.mark.parametrize("categories,match", [
    (["live_simple"], r"\['live_simple'\] refused: BFCL's live_\* categories are held out"),
    (["irrelevance", "live_irrelevance"], r"live_\* categories are held out"),
    (["parallel"], r"\['parallel'\] not supported"),
    (["simple_java"], r"not supported"),
    ("irrelevance", r"must be a non-empty list"),
    ([], r"must be a non-empty list"),
])
def test_live_and_unsupported_categories_are_refused(tmp_path, categories, match):
    data = write_data(tmp_path)
    with pytest.raises(ValueError, match=match):
        bfcl.load_bfcl(data, categories)


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(bfcl, "DEFAULT_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(bfcl.importlib.util, "find_spec", lambda name: None)   # no installed bfcl_eval either
    with pytest.raises(bfcl.BFCLDataNotFound) as err:
        bfcl.load_bfcl()
    assert "pip download --no-deps bfcl-eval==2026.3.23 -d ~/.cache/toolwise/bfcl" in str(err.value)
    assert str(tmp_path / "empty") + "/*.whl" in str(err.value)
    with pytest.raises(bfcl.BFCLDataNotFound, match=r"no BFCL data at tasks.path=.*pip download --no-deps "
                                                    r"bfcl-eval==2026.3.23"):
        bfcl.load_bfcl(tmp_path)
    with pytest.raises(ValueError, match="the bfcl task source selected no task"):
        load_tasks("bfcl", split="train", path=str(write_data(tmp_path / "d")), difficulties=["hard"])


def test_a_malformed_record_names_file_record_and_field(tmp_path):
    bad = {**RECORDS, "simple_python": [("simple_python_0", "What is five factorial?", [FACTORIAL], None)]}
    data = write_data(tmp_path, bad)
    with pytest.raises(TaskFormatError, match=r"BFCL_v4_simple_python.json: record simple_python_0: field "
                                              r"'possible_answer'"):
        bfcl.load_bfcl(data)


def test_the_wheel_a_folder_holding_it_and_its_extracted_data_read_alike(tmp_path):
    data = write_data(tmp_path / "x")
    wheel = tmp_path / "w" / "bfcl_eval-2026.3.23-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in data.rglob("*.json"):
            zf.write(f, f.relative_to(tmp_path / "x").as_posix())
    dicts = [[t.to_dict() for t in bfcl.read_bfcl(p)] for p in (data, tmp_path / "x", wheel, wheel.parent)]
    assert all(d == dicts[0] for d in dicts) and len(dicts[0]) == 5


# ---------------------------------------------------------------------------------------------- tool source
def test_the_bfcl_source_records_every_call_neutrally():
    source = source_from_spec({"kind": "bfcl", "functions": [FACTORIAL]})
    assert [t["function"]["name"] for t in source.tools()] == ["math_factorial"]
    for args in ({"number": 5}, {"number": "five"}, {}):            # arguments are the scorer's to judge
        result = source.call("math_factorial", args)
        assert result.ok and result.content == RECORDED_MESSAGE
    assert source.call("math.factorial", {}).error_kind == "unknown_tool"
    assert source.call("math_factorial", [1]).error_kind == "bad_arguments"
    with pytest.raises(ValueError, match="collide once '.' becomes '_'"):
        source_from_spec({"kind": "bfcl", "functions": [FACTORIAL, {**FACTORIAL, "name": "math_factorial"}]})
    with pytest.raises(ValueError, match="field 'functions'"):
        source_from_spec({"kind": "bfcl", "functions": []})


# ---------------------------------------------------------------------------------------------- scorer
def test_the_scorer_judges_the_executed_calls(small):
    irr, fact, tri, mult = (small[i] for i in ("irrelevance_0", "simple_python_0", "simple_python_1", "multiple_0"))
    assert score_task(irr, "", calls=[]) is True
    assert score_task(irr, "\\boxed{Lima}", calls=[("determine_body_mass_index", {"weight": 1, "height": 1})]) is False
    assert score_task(fact, "", calls=[("math_factorial", {"number": 5})]) is True      # the name mapped back
    assert score_task(fact, "", calls=[("math_factorial", {"number": 6})]) is False
    assert score_task(fact, "\\boxed{120}", calls=[]) is False                          # text never counts
    assert score_task(fact, "", calls=[("math_factorial", {"number": 5})] * 2) is False  # exactly one call
    assert score_task(tri, "", calls=[("calculate_triangle_area", {"base": 10, "height": 5})]) is True
    assert score_task(tri, "", calls=[("calculate_triangle_area", {"base": 10, "height": 5, "unit": "Units."})])
    assert not score_task(tri, "", calls=[("calculate_triangle_area", {"base": 10, "height": 5, "unit": "cm"})])
    assert score_task(mult, "", calls=[("circle_properties_get", {"radius": 3})]) is True  # an int for a float
    assert not score_task(mult, "", calls=[("triangle_properties_get", {"side1": 3, "side2": 3})])
    # a shape the checker cannot walk is a wrong call, not a crash of the episode's record
    assert not score_task(mult, "", calls=[("circle_properties_get", {"radius": 3, "get_area": [[{}]]})])
    with pytest.raises(ValueError, match="judges the episode's executed calls, and none were passed"):
        score_task(fact, "\\boxed{120}")


def test_only_scorers_that_need_calls_get_them(small):
    exact = Task(id=1, instruction="q", environments=small["irrelevance_0"].environments,
                 expected={"answer": "4"}, difficulty="easy", scorer={"kind": "exact"})
    assert score_task(exact, "4", calls=[("x", {})]) is True and score_task(exact, "4") is True
    assert SCORERS["bfcl_ast"] is BFCLASTScorer and BFCLASTScorer.needs_calls
    assert not scorer_from_spec("exact").needs_calls
    for spec, field in ((({"kind": "bfcl_ast", "category": "live_simple"}), "category"),
                        ({"kind": "bfcl_ast", "category": "multiple"}, "functions"),
                        ({"kind": "bfcl_ast", "category": "irrelevance", "functions": [BMI]}, "functions")):
        with pytest.raises(ScorerError, match=f"scorer.{field}"):
            scorer_from_spec(spec)


def test_the_loop_scores_executed_calls_and_a_skipped_call_is_none(small):
    fact, irr = small["simple_python_0"], small["irrelevance_0"]
    scripts = {"five factorial": [call("math_factorial", {"number": 5}), "\\boxed{120}"],
               "capital of Peru": [call("determine_body_mass_index", {"weight": 1, "height": 2}), "\\boxed{Lima}"]}
    cfg = AgentConfig(mode="default", max_rounds=3, max_new_tokens=32, call_format="xml")
    ran = Agent(ScriptedBackend(scripts), cfg).run([fact, irr])
    assert [t.correct for t in ran] == [True, False] and [t.tool_calls for t in ran] == [1, 1]
    assert ran[0].calls[0].result == {"success": True, "result": RECORDED_MESSAGE}
    assert executed_calls(ran[0].calls) == [("math_factorial", {"number": 5})]

    class Skip(Hooks):
        def pre_call(self, episode, call):
            return "skip"

    skipped = Agent(ScriptedBackend(scripts), cfg, Skip()).run([fact, irr])
    assert [t.correct for t in skipped] == [False, True] and executed_calls(skipped[1].calls) == []
# ------------------------------------------------------------------------------------------ labels from the category

# ---------------------------------------------------------------------------------------------- labels from the category
CFG = OmegaConf.create({"max_rounds": 4, "max_new_tokens": 32, "feature_mode": "default", "layers": None,
                        "forced_answer_tokens": 8, "verify_rounds": 2, "call_format": "xml", "commit_label": "wrong"})


def test_probe_labels_follow_the_category(small):
    # Without tools (hard_no_tool rejects every call) no call runs: irrelevance is right, the others wrong,
    # whatever the policy writes.
    tasks = [small[i] for i in ("irrelevance_0", "simple_python_0", "multiple_0")]
    scripts = {"capital of Peru": ["\\boxed{Lima}"],
               "five factorial": [call("math_factorial", {"number": 5}), "\\boxed{120}"],
               "radius three": ["\\boxed{28.27}"]}
    rows, _ = label_probe(ScriptedBackend(scripts), tasks, ["train"] * 3, CFG)
    assert [(r["task_id"], r["label"]) for r in rows] == [("irrelevance_0", 0), ("simple_python_0", 1),
                                                          ("multiple_0", 1)]


def test_flip_labels_execute_iff_the_call_passes_the_ast_check(small):
    tasks = [small[i] for i in ("simple_python_0", "simple_python_1", "irrelevance_0", "multiple_0")]
    radius = call("circle_properties_get", {"radius": 3})
    scripts = {"five factorial": [call("math_factorial", {"number": 5}), "\\boxed{120}"],        # right call
               "base ten": [call("calculate_triangle_area", {"base": 5, "height": 10}), "\\boxed{25}"],  # wrong
               "capital of Peru": [call("determine_body_mass_index", {"weight": 1, "height": 2}), "\\boxed{x}"],
               "radius three": [radius, radius, "\\boxed{28.27}"]}          # right, then called again
    rows, _ = label_flip(ScriptedBackend(scripts), tasks, ["train"] * 4, CFG)
    got = [(r["point_id"], r["flip_class"], r["before_correct"], r["after_correct"], r["episode_correct"], r["label"])
           for r in rows]
    assert got == [("simple_python_0:0", "helpful", False, True, True, 1),
                   ("simple_python_1:0", "unchanged", False, False, False, 0),
                   ("irrelevance_0:0", "harmful", True, False, False, 0),      # any call on irrelevance is wrong
                   ("multiple_0:0", "helpful", False, True, False, 0),         # right, but the episode called again
                   ("multiple_0:1", "harmful", True, False, False, 0)]


def test_commit_labels_score_the_answer_with_the_calls_made_by_then(small):
    tasks = [small[i] for i in ("simple_python_0", "simple_python_1", "irrelevance_0", "irrelevance_1")]
    scripts = {"five factorial": [call("math_factorial", {"number": 5}), "\\boxed{120}", "\\boxed{120}"],
               "base ten": ["\\boxed{25}", "\\boxed{25}"],
               "capital of Peru": ["\\boxed{Lima}", "\\boxed{Lima}"],
               "Hamlet": [call("determine_body_mass_index", {"weight": 1, "height": 2}), "\\boxed{x}", "\\boxed{x}"]}
    rows, _ = label_commit(ScriptedBackend(scripts), tasks, ["train"] * 4, CFG)
    assert [(r["task_id"], r["first_correct"], r["label"]) for r in rows] == [
        ("simple_python_0", True, 0), ("simple_python_1", False, 1), ("irrelevance_0", True, 0),
        ("irrelevance_1", False, 1)]


# ---------------------------------------------------------------------------------------------- the real data
def wheel_path() -> Path | None:
    env = os.environ.get("TOOLWISE_BFCL_WHEEL")
    if env:
        return Path(env).expanduser()
    wheels = sorted(Path(bfcl.DEFAULT_DIR).expanduser().glob(f"bfcl_eval-{bfcl.BFCL_VERSION}-*.whl"))
    return wheels[0] if wheels else None


@pytest.fixture(scope="module")
def wheel() -> Path:
    path = wheel_path()
    if path is None or not path.is_file():
        pytest.skip(f"no bfcl-eval wheel (TOOLWISE_BFCL_WHEEL, or {bfcl.DEFAULT_DIR}/*.whl); fetch it with: "
                    f"{bfcl.DOWNLOAD_COMMAND}")
    return path


@pytest.fixture(scope="module")
def real(wheel) -> list[Task]:
    return bfcl.read_bfcl(wheel)


def test_the_real_categories_load_whole(real):
    assert Counter(t.category for t in real) == {"irrelevance": 240, "simple_python": 400, "multiple": 200}
    assert len({t.id for t in real}) == 840
    tests = Counter(t.category for t in real if t.split == "test")
    assert all(0.2 < tests[c] / n < 0.4 for c, n in (("irrelevance", 240), ("simple_python", 400),
                                                       ("multiple", 200)))
    by = {t.id: t for t in real}
    assert json.loads(by["simple_python_1"].answer) == [{"math.factorial": {"number": [5]}}]
    assert [s["function"]["name"] for s in make_environment(by["simple_python_1"].env).tool_specs()] == \
        ["math_factorial"]
    assert all(len(make_environment(t.env).tool_specs()) == len(t.env.sources[0]["functions"]) for t in real)


# ---------------------------------------------------------------------------------------------- against the original
@pytest.fixture(scope="module")
def original(wheel, tmp_path_factory):
    """BFCL's own checker and conversion, imported from the extracted wheel. Its imports reach further than the
    Python paths need, so these modules are stubbed (in sys.modules, for this module's tests only):
    ``bfcl_eval.constants.model_config`` imports every provider's SDK to build MODEL_CONFIG_MAPPING, of which the
    checker reads one flag (underscore_to_dot), given here for two model names; the Java and JavaScript call
    parsers need tree-sitter; ``tenacity`` (retries of API calls) if it is not installed. bfcl_eval also writes
    result folders at import, under BFCL_PROJECT_ROOT (a temporary folder here)."""
    root = tmp_path_factory.mktemp("bfcl_eval")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(root, [n for n in zf.namelist() if n.startswith("bfcl_eval/")])
    stubs = {"bfcl_eval.constants.model_config": {"MODEL_CONFIG_MAPPING": {
                 "plain": types.SimpleNamespace(underscore_to_dot=False),
                 "oai": types.SimpleNamespace(underscore_to_dot=True)}},
             "bfcl_eval.model_handler.parser.java_parser": {"parse_java_function_call": None},
             "bfcl_eval.model_handler.parser.js_parser": {"parse_javascript_function_call": None}}
    try:
        import tenacity  # noqa: F401
    except ImportError:
        stubs["tenacity"] = {n: (lambda *a, **k: None) for n in ("retry", "retry_if_exception_message",
                                                                 "retry_if_exception_type", "wait_random_exponential")}
    owned = lambda name: name == "bfcl_eval" or name.startswith("bfcl_eval.") or name in stubs  # noqa: E731
    saved_modules = {k: v for k, v in sys.modules.items() if owned(k)}
    saved_path = list(sys.path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BFCL_PROJECT_ROOT", str(root / "project"))
        for name, attrs in stubs.items():
            module = types.ModuleType(name)
            module.__dict__.update(attrs)
            sys.modules[name] = module
        sys.path.insert(0, str(root))
        try:
            from bfcl_eval import utils as bfcl_utils
            from bfcl_eval.constants import type_mappings
            from bfcl_eval.constants.enums import Language, ModelStyle
            from bfcl_eval.eval_checker.ast_eval import ast_checker
            from bfcl_eval.model_handler import utils as handler_utils

            yield types.SimpleNamespace(data=root / "bfcl_eval" / "data", checker=ast_checker, Language=Language,
                                        ModelStyle=ModelStyle, utils=bfcl_utils, handler_utils=handler_utils,
                                        type_mappings=type_mappings)
        finally:
            sys.path[:] = saved_path
            for k in [k for k in sys.modules if owned(k)]:
                del sys.modules[k]
            sys.modules.update(saved_modules)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_tool_specs_equal_bfcls_own_conversion_on_every_record(original):
    assert GORILLA_TO_OPENAPI == original.type_mappings.GORILLA_TO_OPENAPI
    n = 0
    for category in bfcl.CATEGORIES:
        for rec in read_jsonl(original.data / f"BFCL_v4_{category}.json"):
            theirs = original.handler_utils.convert_to_tool(
                original.utils._func_doc_language_specific_pre_processing(copy.deepcopy(rec["function"]), category),
                original.type_mappings.GORILLA_TO_OPENAPI, original.ModelStyle.OPENAI_COMPLETIONS)
            assert openai_tools(rec["function"]) == theirs, rec["id"]
            n += 1
    assert n == 840
    print(f"\nBFCL differential, tool conversion: {n} records, all identical")


# -- perturbations of a possible answer
_MISSING = object()


def _other_type(value):
    """A value of another JSON type than ``value``."""
    if isinstance(value, bool):
        return "true"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return "value"


def _string_variants(s: str) -> list[tuple[str, str]]:
    same = [s.upper(), s.title(), s + ".", s.replace(" ", "-"), f" {s}, ", s.replace("'", '"')]
    return [("string_case_punctuation", v) for v in same] + [("string_changed", s + "x"), ("string_changed", s[:-1])]


def cases(record_functions: list[dict], truth: list[dict]):
    """(kind, model_output) pairs: the ground truth's first allowed value per parameter, each other allowed value
    ("" = left out), and systematic perturbations."""
    name, allowed = next(iter(truth[0].items()))
    doc = next(f for f in record_functions if f["name"] == name)
    props, required = doc["parameters"]["properties"], doc["parameters"]["required"]

    def concrete(p, v):
        # An allowed value of a dict parameter (or of a list of dicts) holds, per key, the key's allowed values.
        def one(d):
            return {k: vals[0] for k, vals in d.items() if vals and vals[0] != ""} if isinstance(d, dict) else d
        kind = props.get(p, {}).get("type")
        if kind == "dict":
            return one(v)
        if kind == "array" and props[p].get("items", {}).get("type") == "dict" and isinstance(v, list):
            return [one(d) for d in v]
        return v

    # "" in an allowed list means "may be left out", not a value: the first real value stands for the parameter
    # (a few answers list "" first for a parameter the function requires)
    first = {p: next((v for v in vals if v != ""), _MISSING) for p, vals in allowed.items()}
    base = {p: concrete(p, v) for p, v in first.items() if v is not _MISSING}

    def with_(p, v):
        args = dict(base)
        if v is _MISSING:
            args.pop(p, None)
        else:
            args[p] = v
        return [{name: args}]

    yield "ground_truth", [{name: dict(base)}]
    for p, vals in allowed.items():
        for i, v in enumerate(vals):
            if i != (vals.index(first[p]) if first[p] is not _MISSING else -1):
                yield "other_allowed_value", with_(p, _MISSING if v == "" else concrete(p, v))
    yield "wrong_function_name", [{name + "_x": dict(base)}]
    for other in record_functions:
        if other["name"] != name:
            yield "another_offered_function", [{other["name"]: dict(base)}]
    yield "no_call", []
    yield "two_calls", [{name: dict(base)}, {name: dict(base)}]
    yield "extra_unknown_param", [{name: {**base, "unknown_param_xyz": 1}}]
    for p in props:
        if p not in allowed:
            yield "documented_param_not_in_answer", with_(p, "x")
    for p in required:
        if p in base:
            yield "missing_required", with_(p, _MISSING)
    for p in base:
        if p not in required:
            yield "optional_omitted", with_(p, _MISSING)
    for p, v in base.items():
        yield "wrong_type", with_(p, _other_type(v))
        kind = props.get(p, {}).get("type")
        if kind == "float" and isinstance(v, float):
            yield "int_for_float", with_(p, int(v))
            yield "int_for_float_off_by_one", with_(p, int(v) + 1)
        if kind == "integer" and isinstance(v, int) and not isinstance(v, bool):
            yield "float_for_int", with_(p, float(v))
        if isinstance(v, str):
            for variant, s in _string_variants(v):
                yield variant, with_(p, s)
        if isinstance(v, list) and v:
            yield "list_reversed", with_(p, v[::-1])
            yield "list_shorter", with_(p, v[:-1])
            if isinstance(v[0], str):
                yield "list_item_case", with_(p, [v[0].upper()] + v[1:])
            if isinstance(v[0], (int, float)) and not isinstance(v[0], bool):
                yield "list_item_type", with_(p, [str(v[0])] + v[1:])
            if isinstance(v[0], dict) and v[0]:
                k = next(iter(v[0]))
                yield "list_dict_key_dropped", with_(p, [{kk: vv for kk, vv in v[0].items() if kk != k}] + v[1:])
        if isinstance(v, dict) and v:
            k = next(iter(v))
            yield "dict_key_dropped", with_(p, {kk: vv for kk, vv in v.items() if kk != k})
            yield "dict_key_added", with_(p, {**v, "unknown_key": 1})
            if isinstance(v[k], str):
                yield "dict_value_case", with_(p, {**v, k: v[k].upper()})


def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:          # the same failure on both sides counts as agreement
        return f"raised {type(exc).__name__}"


@pytest.mark.slow
def test_the_ast_checker_port_agrees_with_the_original(original):
    """On every possible answer of simple_python and multiple: the ground truth passes both, and on each case the
    port's result (verdict, error type and message) equals the original's. Then the same cases as an
    OpenAI-style model writes them ("." in names as "_"): the bfcl_ast scorer, which maps names back, against the
    original with underscore_to_dot."""
    counts, verdicts, records = Counter(), Counter(), 0
    py = original.Language.PYTHON
    for category in bfcl_ast.SUPPORTED_CATEGORIES:
        prompts = {r["id"]: r for r in read_jsonl(original.data / f"BFCL_v4_{category}.json")}
        for answer in read_jsonl(original.data / "possible_answer" / f"BFCL_v4_{category}.json"):
            records += 1
            functions, truth = prompts[answer["id"]]["function"], answer["ground_truth"]
            scorer = BFCLASTScorer(category, functions)
            for kind, output in cases(functions, truth):
                theirs = outcome(original.checker.ast_checker, copy.deepcopy(functions), copy.deepcopy(output),
                                 copy.deepcopy(truth), py, category, "plain")
                ours = outcome(bfcl_ast.ast_checker, copy.deepcopy(functions), copy.deepcopy(output),
                               copy.deepcopy(truth), category)
                assert ours == theirs, (answer["id"], kind, output)
                if kind == "ground_truth":
                    assert ours["valid"] is True, (answer["id"], ours)
                renamed = [{openai_name(n): a for n, a in c.items()} for c in output]
                theirs_oai = outcome(original.checker.ast_checker, copy.deepcopy(functions), copy.deepcopy(renamed),
                                     copy.deepcopy(truth), py, category, "oai")
                ours_oai = scorer("", json.dumps(truth), calls=[(n, a) for c in renamed for n, a in c.items()])
                assert ours_oai == (isinstance(theirs_oai, dict) and theirs_oai["valid"]), (answer["id"], kind)
                counts[kind] += 1
                verdicts["raised" if isinstance(theirs, str) else "valid" if theirs["valid"] else "invalid"] += 1
    assert records == 600
    total = sum(counts.values())
    print(f"\nBFCL differential, AST checker: {records} possible answers, {total} cases x 2 paths "
          f"(documented names; OpenAI-style names through the scorer), verdicts {dict(verdicts)}, "
          f"by kind {dict(sorted(counts.items()))}")
    assert counts["ground_truth"] == 600 and verdicts["valid"] > 600 and verdicts["invalid"] > 3000
