"""Built-in task generators: schema, determinism, split hygiene and independently re-derived gold."""
from __future__ import annotations

import ast
import collections
import json
import re
from pathlib import Path

import pytest

from data_builders.tasks.builtin import BUILTIN_ENVS, generate_builtin, load_historical_facts
from data_builders.tasks.generators import GENERATORS
from data_builders.tasks.schema import DIFFICULTIES, ENV_CATEGORY, Task

N = 20
# When2Tool env_tags, in env_no order.
W2T_TAGS = dict(zip(ENV_CATEGORY, ["calculator", "statistics", "counting", "matrix", "prime", "retrieval",
                                   "historical_year", "game_rule", "hash", "decoding", "list", "datetime",
                                   "code_executor", "schedule", "regex_match"]))
ENV_TAG = {env: gen.tag for env, gen in GENERATORS.items()}
TOOLS = {
    ("CalculatorEnv", d): ["evaluate_expression", "get_last_result", "clear_last_result"] for d in DIFFICULTIES
} | {("HistoricalYearEnv", d): ["lookup_year"] for d in DIFFICULTIES} | {
    ("ListManipulationEnv", "easy"): ["append", "remove", "insert", "reverse"],
    ("ListManipulationEnv", "medium"): ["append", "remove", "insert", "sort", "reverse"],
    ("ListManipulationEnv", "hard"): ["append", "remove", "insert", "sort", "reverse"],
}

CALC_RE = re.compile(r"^(Answer with only the number|Compute exactly and return only number): ([0-9+\-*/%()]+)$")
HIST_RE = re.compile(r"^In what year was (.+)\? Answer with only the year as a number\.$")
LIST_RE = re.compile(
    r"^Single operation only( on 2D list)?\. Initial (\[.*\])\. Apply (append|remove|insert|sort|reverse)\((.*)\)\. "
    r"Return final (2D )?list\.$"
)

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "when2tool"


@pytest.fixture(scope="module")
def tasks():
    return {split: generate_builtin(split, n_per_cell=N) for split in ("train", "test")}


def cell(ts, env, difficulty):
    return [t for t in ts if t.env.name == env and t.difficulty == difficulty]


# --------------------------------------------------------------------------- contract


def test_registry_is_in_env_no_order_with_when2tool_tags():
    assert list(BUILTIN_ENVS) == [e for e in ENV_CATEGORY if e in GENERATORS]
    for env, gen in GENERATORS.items():
        assert gen.env == env and gen.tag == W2T_TAGS[env]
    assert {"CalculatorEnv", "HistoricalYearEnv", "ListManipulationEnv"} <= set(BUILTIN_ENVS)


def test_counts_order_and_ids(tasks):
    for split, ts in tasks.items():
        assert len(ts) == len(BUILTIN_ENVS) * len(DIFFICULTIES) * N
        expected_order = [(e, d) for e in BUILTIN_ENVS for d in DIFFICULTIES for _ in range(N)]
        assert [(t.env.name, t.difficulty) for t in ts] == expected_order
        for t in ts:
            i = len(cell(ts[: ts.index(t)], t.env.name, t.difficulty))
            assert t.id == f"builtin/{ENV_TAG[t.env.name]}/{t.difficulty}/{split}/{i:04d}"
        assert len({t.id for t in ts}) == len(ts)


def test_schema_fields(tasks):
    for split, ts in tasks.items():
        for t in ts:
            assert isinstance(t, Task)
            assert len(t.environments) == 1
            assert list(t.env.tools) == list(GENERATORS[t.env.name].tools(t.difficulty))
            if (t.env.name, t.difficulty) in TOOLS:
                assert list(t.env.tools) == TOOLS[(t.env.name, t.difficulty)]
            assert t.tags == (ENV_TAG[t.env.name], "single_round")
            assert t.category == ENV_CATEGORY[t.env.name]
            assert t.split == split and t.multi_step is False and t.expected_steps == 1
            assert isinstance(t.expected["answer"], str) and t.answer == t.expected["answer"]
            if t.env.name in ("CalculatorEnv", "ListManipulationEnv"):
                assert t.env.parameters == {}


def test_round_trip_through_dict(tasks):
    for ts in tasks.values():
        for t in ts:
            d = t.to_dict()
            assert Task.from_dict(json.loads(json.dumps(d))) == t


def test_deterministic_and_seed_sensitive():
    a = [t.to_dict() for t in generate_builtin("test", n_per_cell=5, seed=3)]
    b = [t.to_dict() for t in generate_builtin("test", n_per_cell=5, seed=3)]
    assert a == b
    c = [t.to_dict() for t in generate_builtin("test", n_per_cell=5, seed=4)]
    assert [t["instruction"] for t in a] != [t["instruction"] for t in c]


def test_smaller_request_is_a_prefix_and_envs_filter_is_independent():
    small = generate_builtin("train", n_per_cell=4, seed=1, envs=["ListManipulationEnv"])
    big = generate_builtin("train", n_per_cell=9, seed=1)
    big_list = [t for t in big if t.env.name == "ListManipulationEnv"]
    for d in DIFFICULTIES:
        assert [t.to_dict() for t in cell(small, "ListManipulationEnv", d)] == [
            t.to_dict() for t in cell(big_list, "ListManipulationEnv", d)[:4]
        ]
    assert {t.env.name for t in small} == {"ListManipulationEnv"}


def test_splits_disjoint_across_seeds():
    sampled = ["CalculatorEnv", "ListManipulationEnv"]
    train = [t for s in (0, 1, 2) for t in generate_builtin("train", n_per_cell=30, seed=s, envs=sampled)]
    test = [t for s in (0, 1, 2) for t in generate_builtin("test", n_per_cell=30, seed=s, envs=sampled)]
    assert not {t.instruction for t in train} & {t.instruction for t in test}
    for ts in (train[:180], test[:180]):  # one seed: no duplicates inside a cell that the pools can fill
        for e in ("CalculatorEnv", "ListManipulationEnv"):
            for d in DIFFICULTIES:
                instr = [t.instruction for t in cell(ts, e, d)]
                assert len(instr) == len(set(instr)) == 30


def test_historical_events_never_in_both_splits_even_when_cycling():
    # 60 per cell exceeds every split's share of the fact tables, forcing repeats.
    asked = {}
    for split in ("train", "test"):
        ts = [t for t in generate_builtin(split, n_per_cell=60, envs=["HistoricalYearEnv"])]
        assert len(ts) == 3 * 60
        asked[split] = {(t.difficulty, HIST_RE.match(t.instruction).group(1)) for t in ts}
    assert not asked["train"] & asked["test"]
    for d in DIFFICULTIES:
        pool = {f.event for f in load_historical_facts(d)}
        used = {e for dd, e in asked["train"] | asked["test"] if dd == d}
        assert used == pool  # cycling reaches every event, and only events from the table


def test_no_tasks_and_bad_arguments():
    assert generate_builtin("train", n_per_cell=0) == []
    with pytest.raises(ValueError):
        generate_builtin("validation")
    with pytest.raises(ValueError):
        generate_builtin("train", envs=["NoSuchEnv"])
    with pytest.raises(ValueError):
        generate_builtin("train", n_per_cell=-1)


# --------------------------------------------------------------------------- Calculator


def test_calculator_gold_and_ranges(tasks):
    prefix = {"easy": "Answer with only the number", "medium": "Compute exactly and return only number",
              "hard": "Compute exactly and return only number"}
    for ts in tasks.values():
        for d in DIFFICULTIES:
            for t in cell(ts, "CalculatorEnv", d):
                m = CALC_RE.match(t.instruction)
                assert m and m.group(1) == prefix[d], t.instruction
                expr = m.group(2)
                assert "/" not in expr.replace("//", "")  # no true division: gold must be an exact int
                value = eval(expr, {"__builtins__": {}}, {})  # noqa: S307 - charset checked by CALC_RE
                assert type(value) is int and t.answer == str(value)
                nums = [int(x) for x in re.findall(r"\d+", expr)]
                if d == "easy":
                    assert max(nums) <= 60 and value >= 0
                elif d == "medium":
                    assert any(x >= 100 for x in nums) and max(nums) < 10_000
                else:
                    big = [x for x in nums if x >= 100]
                    assert all(10 ** 5 <= x <= 10 ** 12 for x in big)
                    assert all(x in (2,) or 3 <= x <= 19 for x in nums if x < 100)
                    assert len(big) >= 2


# --------------------------------------------------------------------------- ListManipulation


def transpose(m):
    return [list(c) for c in zip(*m)]


def reference_list_op(values, op, args):
    """Independent re-implementation of the benchmark's list operations (transpose-based for 2-D) used to check gold."""
    if values and all(isinstance(r, list) for r in values):
        axis = args["axis"]
        if op == "sort":  # axis=0 sorts each column: sort the rows of the transpose
            return transpose([sorted(c) for c in transpose(values)]) if axis == 0 else [sorted(r) for r in values]
        if op == "reverse":
            return values[::-1] if axis == 0 else [r[::-1] for r in values]
        # Column edits (axis=1) are row edits on the transpose.
        m = values if axis == 0 else transpose(values)
        v = args.get("value") if axis == 0 else [args.get("value")] * len(m[0])
        if op == "remove":
            m = m[: args["index"]] + m[args["index"] + 1:]
        elif op == "insert":
            m = m[: args["index"]] + [v] + m[args["index"]:]
        else:
            m = m + [v]
        return m if axis == 0 else transpose(m)
    if op == "remove":
        i = values.index(args["value"])
        return values[:i] + values[i + 1:]
    if op == "insert":
        return values[: args["index"]] + [args["value"]] + values[args["index"]:]
    if op == "append":
        return values + [args["value"]]
    if op == "sort":
        return sorted(values)
    return values[::-1]


def parse_list_args(raw):
    if not raw:
        return {}
    if "=" not in raw:
        return {"value": int(raw)}
    out = {}
    for m in re.finditer(r"(\w+)=(\[[^\]]*\]|-?\d+)", raw):
        out[m.group(1)] = ast.literal_eval(m.group(2))
    assert ",".join(f"{k}={v}" for k, v in out.items()) == raw  # nothing unparsed, canonical order
    return out


def test_list_gold_and_ranges(tasks):
    spec = {"easy": ((3, 4), (1, 40)), "medium": ((6, 8), (40, 260)), "hard": ((10, 13), (300, 5000))}
    for ts in tasks.values():
        for d in DIFFICULTIES:
            ops = collections.Counter()
            for t in cell(ts, "ListManipulationEnv", d):
                m = LIST_RE.match(t.instruction)
                assert m, t.instruction
                two_d = d == "hard"
                assert bool(m.group(1)) == two_d and bool(m.group(5)) == two_d
                values, op, args = ast.literal_eval(m.group(2)), m.group(3), parse_list_args(m.group(4))
                ops[op] += 1
                (n_lo, n_hi), (lo, hi) = spec[d]
                flat = [x for r in values for x in r] if two_d else values
                assert all(type(x) is int and lo <= x <= hi for x in flat)
                if two_d:
                    assert n_lo <= len(values) <= n_hi and n_lo <= len(values[0]) <= n_hi
                    assert len({len(r) for r in values}) == 1 and args.get("axis") in (0, 1)
                else:
                    assert n_lo <= len(values) <= n_hi and "axis" not in args
                expected = reference_list_op(values, op, args)
                assert t.answer == str(expected)
                assert ast.literal_eval(t.answer) == expected
            assert ("sort" in ops) == (d != "easy")


# --------------------------------------------------------------------------- HistoricalYear


def lookup_key(corpus, query):
    """The benchmark's matching rule, verbatim: first key (stored order) equal to, containing, or inside q."""
    q = query.strip().lower()
    for k in corpus:
        kl = k.lower()
        if kl == q or q in kl or kl in q:
            return k
    return None


def test_fact_tables_sane():
    for d, minimum in (("easy", 40), ("medium", 40), ("hard", 40)):
        facts = load_historical_facts(d)
        assert len(facts) >= minimum
        assert len({f.event.lower() for f in facts}) == len(facts)
        for f in facts:
            assert re.search(rf"(?<!\d){f.year}(?!\d)", f.paragraph), f.event
            assert 2 <= len(re.findall(r"[.!?](?:\s|$)", f.paragraph)) <= 4, f.event
            assert f.event == f.event.strip() and "?" not in f.event
            if d != "hard":
                assert 1000 <= f.year <= 2010  # real events: textbook dates, none BC in this table
            assert lookup_key({g.event: g.paragraph for g in facts}, f.event) == f.event
    # Several paragraphs carry a second, distracting number, as in When2Tool.
    for d in DIFFICULTIES:
        with_distractor = [f for f in load_historical_facts(d)
                           if any(n != str(f.year) for n in re.findall(r"\d+", f.paragraph))]
        assert len(with_distractor) >= 10
    assert not {f.event for f in load_historical_facts("easy")} & {f.event for f in load_historical_facts("medium")}


def test_historical_tasks_gold_corpus_and_lookup(tasks):
    for ts in tasks.values():
        for d in DIFFICULTIES:
            facts = load_historical_facts(d)
            by_event = {f.event: f for f in facts}
            corpora = []
            for t in cell(ts, "HistoricalYearEnv", d):
                phrase = HIST_RE.match(t.instruction).group(1)
                corpus = t.env.parameters["corpus"]
                assert list(corpus.items()) == [(f.event, f.paragraph) for f in facts]  # whole pool, fixed order
                assert t.answer == str(by_event[phrase].year)
                assert t.answer in corpus[phrase]
                assert lookup_key(corpus, phrase) == phrase
                # A model that passes the whole question still lands on the intended entry.
                assert lookup_key(corpus, t.instruction) == phrase
                corpora.append(corpus)
            assert len({id(c) for c in corpora}) == len(corpora)  # no shared mutable corpus dicts


# --------------------------------------------------------------------------- When2Tool format parity


def shape(t_instruction):
    s = re.sub(r"Initial \[.*\]\. Apply", "Initial L. Apply", t_instruction)
    s = re.sub(r"value=\[[^\]]*\]", "value=ROW", s)
    return re.sub(r"\d+", "N", s)


@pytest.mark.skipif(not (SHARED / "tasks_v1_train.json").exists(), reason="When2Tool shared data not present")
def test_templates_match_when2tool_files(tasks):
    real = json.loads((SHARED / "tasks_v1_train.json").read_text()) + json.loads(
        (SHARED / "tasks_v1_test.json").read_text())
    env_no = {"CalculatorEnv": 1, "HistoricalYearEnv": 7, "ListManipulationEnv": 11}
    mine = tasks["train"] + tasks["test"]
    for env, no in env_no.items():
        for di, d in enumerate(DIFFICULTIES, start=1):
            ref = [r for r in real if r["id"] // 10000 == no and r["id"] // 1000 % 10 == di]
            ours = cell(mine, env, d)
            assert ref and ours
            assert {tuple(r["environments"][0]["tools"]) for r in ref} == {t.env.tools for t in ours}
            assert {tuple(r["tags"]) for r in ref} == {t.tags for t in ours}
            if env == "HistoricalYearEnv":
                for text in [r["instruction"] for r in ref] + [t.instruction for t in ours]:
                    assert HIST_RE.match(text), text
                assert all(r["expected"]["answer"].isdigit() for r in ref)
                continue
            ref_shapes = {shape(r["instruction"]) for r in ref}
            our_shapes = {shape(t.instruction) for t in ours}
            assert our_shapes <= ref_shapes, our_shapes - ref_shapes
            pattern = CALC_RE if env == "CalculatorEnv" else LIST_RE
            for text in [r["instruction"] for r in ref]:
                assert pattern.match(text), text
            for r in ref:  # gold formats agree: exact int, or a Python list literal
                a = r["expected"]["answer"]
                if env == "CalculatorEnv":
                    assert str(int(a)) == a
                else:
                    assert str(ast.literal_eval(a)) == a
