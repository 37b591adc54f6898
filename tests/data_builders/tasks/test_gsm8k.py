"""The gsm8k task source and its semantic distractors: gold parsing, difficulty, stable disjoint splits,
deterministic answer-preserving distractors, errors that name file, line and field, and a task that
runs through the CalculatorEnv."""
from __future__ import annotations

import json
import math
import random
import re

import pytest

import recipes

from data_builders.environments import make_environment
from data_builders.tasks import TaskFormatError, load_tasks
from data_builders.tasks.distractors import DISTRACTOR_KINDS, add_distractor, distractor_rng, split_sentences
from data_builders.tasks.gsm8k import ANSWER_FORMAT, calculator_annotations, load_gsm8k, question_split
from tests.conftest import REPO, SHARED

SHARED_FILE = SHARED / "data" / "gsm8k" / "train.jsonl"
CALC_TOOLS = tuple(t["name"] for t in json.loads(
    (REPO / "data_builders" / "environments" / "schemas" / "CalculatorEnv.json").read_text()))
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")

NATALIA = {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                       "How many clips did Natalia sell altogether in April and May?",
           "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
                     "altogether in April and May.\n#### 72"}
BETTY = {"question": "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she "
                     "needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much "
                     "as her parents. How much more money does Betty need to buy the wallet?",
         "answer": "Betty has 100 / 2 = $<<100/2=50>>50.\nGrandparents gave 15 * 2 = $<<15*2=30>>30.\n"
                   "Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5"}
FACTORY = {"question": "A factory makes 250 toys on Monday. On Tuesday it makes 150 toys. It makes 200 toys on "
                       "Wednesday and 400 toys on Thursday. How many toys did the factory make?",
           "answer": "<<250+150=400>>400, <<400+200=600>>600, <<600+400=1000>>1000, then <<1000*1=1000>>1000, "
                     "<<1000+0=1000>>1000\n#### 1,000"}
SIMPLE = {"question": "Sam has 7 marbles. How many marbles does Sam have?", "answer": "He has 7.\n#### 7"}


def _filler(i: int) -> dict:
    a, b = 3 + i, 11 + 2 * i
    return {"question": f"Tom has {a} apples. He buys {b} more apples at the market. How many apples does Tom have?",
            "answer": f"Tom has {a}+{b}=<<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"}


RECORDS = [NATALIA, BETTY, FACTORY, SIMPLE] + [_filler(i) for i in range(60)]


def _write(path, records, extra_lines=()):
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def gsm_file(tmp_path):
    return _write(tmp_path / "gsm.jsonl", RECORDS)


def _both(path, **kw):
    return load_gsm8k(path, "train", **kw) + load_gsm8k(path, "test", **kw)


def _by_id(tasks):
    return {t.id: t for t in tasks}


def _is_subsequence(needles, haystack):
    it = iter(haystack)
    return all(n in it for n in needles)


# ---------------------------------------------------------------------------------------- the source


def test_records_become_calculator_tasks_with_gold_difficulty_and_split(gsm_file):
    tasks = _by_id(_both(gsm_file))
    assert len(tasks) == len(RECORDS)
    natalia, betty, factory, simple = (tasks[f"gsm8k-{i}"] for i in range(4))
    assert natalia.answer == "72" and natalia.expected == {
        "answer": "72", "evidence": NATALIA["question"],
        "calculations": [{"expression": "48/2", "value": "24"}, {"expression": "48+24", "value": "72"}]}
    assert simple.expected["calculations"] == [] and natalia.expected_steps == 3   # no "steps" key: unchanged
    assert factory.answer == "1000"  # "#### 1,000": commas removed
    # <<...>> annotations: 2 -> easy, 3 -> medium, 5 -> hard, 0 -> easy and single-step
    assert [t.difficulty for t in (natalia, betty, factory, simple)] == ["easy", "medium", "hard", "easy"]
    assert [t.multi_step for t in (natalia, betty, factory, simple)] == [True, True, True, False]
    assert natalia.instruction == f"{NATALIA['question']} {ANSWER_FORMAT}"
    assert natalia.env.name == "CalculatorEnv" and natalia.env.tools == CALC_TOOLS and natalia.env.parameters == {}
    assert len(natalia.environments) == 1
    assert natalia.tags == ("gsm8k",) and natalia.category == "A"
    for t in tasks.values():
        assert t.split == question_split(t.instruction[: -len(ANSWER_FORMAT) - 1])


def test_distracted_task_keeps_the_clean_question_as_evidence(gsm_file):
    clean = _by_id(_both(gsm_file))
    for t in _both(gsm_file, distractor="hedged"):
        base = clean[t.id.rsplit("-", 1)[0]]
        assert t.expected["evidence"] == base.expected["evidence"] != t.instruction[: -len(ANSWER_FORMAT) - 1]
        assert t.expected["calculations"] == base.expected["calculations"]


def test_calculator_annotations_are_expression_value_pairs():
    assert calculator_annotations(BETTY["answer"]) == [("100/2", "50"), ("15*2", "30"), ("100-50-30-15", "5")]
    assert calculator_annotations(SIMPLE["answer"]) == []


def test_train_and_test_are_disjoint_stable_and_independent_of_file_order(gsm_file, tmp_path):
    train, test = load_gsm8k(gsm_file, "train"), load_gsm8k(gsm_file, "test")
    assert train and test
    assert {t.id for t in train}.isdisjoint({t.id for t in test})
    assert {t.instruction for t in train}.isdisjoint({t.instruction for t in test})
    assert len(train) + len(test) == len(RECORDS)
    assert [t.id for t in load_gsm8k(gsm_file, "test")] == [t.id for t in test]  # stable across calls
    # the split is a function of the question text: reversing the file moves no question across
    reversed_file = _write(tmp_path / "reversed.jsonl", RECORDS[::-1])
    assert {t.instruction for t in load_gsm8k(reversed_file, "test")} == {t.instruction for t in test}
    # and of nothing else: distractors and seeds keep each problem in its split
    assert {t.id.rsplit("-", 1)[0] for t in load_gsm8k(gsm_file, "test", distractor="hedged",
                                                        distractor_seed=9)} == {t.id for t in test}


def test_test_split_is_about_a_tenth():
    share = sum(question_split(f"question number {i}?") == "test" for i in range(2000)) / 2000
    assert 0.08 < share < 0.12


def test_load_tasks_routes_gsm8k_and_applies_filters_and_limit(gsm_file):
    every = load_tasks("gsm8k", split="train", path=str(gsm_file))
    assert {t.id for t in every} == {t.id for t in load_gsm8k(gsm_file, "train")}
    hard = load_tasks("gsm8k", split="train", path=str(gsm_file), difficulties=["hard"])
    assert hard and {t.difficulty for t in hard} == {"hard"}
    assert len(load_tasks("gsm8k", split="train", path=str(gsm_file), limit=5)) == 5
    with pytest.raises(ValueError, match=r"tasks\.envs: \['HashEnv'\].*valid: \['CalculatorEnv'\]"):
        load_tasks("gsm8k", split="train", path=str(gsm_file), envs=["HashEnv"])


def test_load_tasks_without_path_says_how_to_pass_one():
    with pytest.raises(ValueError, match=r"tasks\.path=.*\.jsonl"):
        load_tasks("gsm8k", split="train")


def test_unknown_distractor_and_distractor_on_another_source_are_refused(gsm_file):
    with pytest.raises(ValueError, match="unknown distractor"):
        load_gsm8k(gsm_file, "train", distractor="sarcasm")
    with pytest.raises(ValueError, match="gsm8k"):
        load_tasks("builtin", split="train", distractor="hedged")
    with pytest.raises(ValueError, match="split"):
        load_gsm8k(gsm_file, "validation")


def test_hydra_config_passes_path_and_distractor_through(gsm_file):
    from hydra import compose, initialize_config_dir

    from data_builders.tasks import tasks_from_config
    from recipes import CONFIG_DIR

    recipes.register()     # the schemas, as a command's own imports store them
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("rollout", overrides=["tasks=gsm8k", f"tasks.path={gsm_file}", "tasks.distractor=hedged",
                                            "tasks.distractor_seed=4", "split=train", "limit=3"])
    tasks = tasks_from_config(cfg)
    assert len(tasks) == 3 and all(t.tags == ("gsm8k", "hedged") for t in tasks)
    direct = _by_id(load_gsm8k(gsm_file, "train", distractor="hedged", distractor_seed=4))
    assert all(direct[t.id] == t for t in tasks)


# ------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("bad_line, field, problem", [
    ("{not json", "<json>", "not valid JSON"),
    ('["a list"]', "<record>", "expected an object"),
    ('{"answer": "x #### 3"}', "question", "missing"),
    ('{"question": "   ", "answer": "x #### 3"}', "question", "empty"),
    ('{"question": "How many?"}', "answer", "missing"),
    ('{"question": "How many?", "answer": 3}', "answer", "expected a string"),
    ('{"question": "How many?", "answer": "it is 3"}', "answer", "####"),
    ('{"question": "How many?", "answer": "it is #### ,"}', "answer", "empty gold"),
    # accepted before: a gold no answer could ever match
    ('{"question": "How many?", "answer": "it is #### seventy-two"}', "answer", "gold 'seventy-two' after '####' "
                                                                               "is not a number"),
    ('{"question": "How many?", "answer": "it is #### 7 apples"}', "answer", "is not a number"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path, bad_line, field, problem):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(SIMPLE) + "\n\n" + bad_line + "\n", encoding="utf-8")  # the bad record is line 3
    with pytest.raises(TaskFormatError) as info:
        load_gsm8k(path, "train")
    err = info.value
    assert (err.source, err.record, err.field_name) == (str(path), 3, field)
    assert problem in err.problem
    assert str(path) in str(err) and "record 3" in str(err) and f"'{field}'" in str(err)


def test_non_utf8_bytes_name_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    # line 2 is Latin-1, not UTF-8: "á" is the single byte 0xe1
    path.write_bytes(json.dumps(SIMPLE).encode() + b"\n" +
                     json.dumps(NATALIA).replace("Natalia", "Nat\u00e1lia").encode("latin-1") + b"\n")
    with pytest.raises(TaskFormatError) as info:
        load_gsm8k(path, "train")
    err = info.value
    assert (err.source, err.record, err.field_name) == (str(path), 2, "<encoding>")
    assert "UTF-8" in err.problem and "0xe1" in err.problem


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="GSM8K file not found"):
        load_gsm8k(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------------------------- distractors


def _check_distractor(original: str, distracted: str, kind: str):
    """The answer-preservation rules, checked on the question text."""
    assert distracted != original
    before, after = NUMBER.findall(original), NUMBER.findall(distracted)
    assert _is_subsequence(before, after), (original, distracted)  # every number kept, in order
    if kind == "parallel_entity":
        assert set(after) - set(before), distracted  # a number the problem does not use
    elif kind == "paraphrase":
        assert set(after) <= set(before), distracted  # repeats numbers, never a new one
    else:
        assert after == before, distracted  # no digits at all


@pytest.mark.parametrize("kind", DISTRACTOR_KINDS)
def test_every_distractor_kind_changes_the_text_and_keeps_the_numbers(gsm_file, kind):
    clean = _by_id(_both(gsm_file))
    noisy = _both(gsm_file, distractor=kind, distractor_seed=1)
    assert len(noisy) == len(clean)
    for t in noisy:
        base = clean[t.id[: -len(kind) - 1]]
        assert t.id == f"{base.id}-{kind}" and t.tags == ("gsm8k", kind)
        assert (t.answer, t.difficulty, t.multi_step, t.split, t.env) == \
            (base.answer, base.difficulty, base.multi_step, base.split, base.env)
        assert t.instruction.endswith(ANSWER_FORMAT)
        _check_distractor(base.instruction, t.instruction, kind)


def _inserted(original: str, distracted: str) -> str:
    """The one sentence added between two sentences of ``original`` (or before it); fails otherwise."""
    for at in split_sentences(original):
        tail = original[at:]
        if distracted.startswith(original[:at]) and distracted.endswith(tail):
            added = distracted[at:len(distracted) - len(tail)]
            if re.fullmatch(r"[A-Z][^?]*[.] ", added):  # one sentence and a space (a repeat may match twice)
                return added
    raise AssertionError(f"not one sentence inserted into the original: {distracted!r}")


@pytest.mark.parametrize("kind", DISTRACTOR_KINDS)
def test_distractor_is_one_sentence_inserted_before_the_question(kind):
    for record in (NATALIA, BETTY, FACTORY):
        question = record["question"]
        for seed in range(20):
            out = add_distractor(question, kind, distractor_rng(seed, 0, kind))
            assert _inserted(question, out)
            assert out.endswith(question[split_sentences(question)[-1]:])  # the question stays last


def test_thematic_and_hedged_add_no_number_words():
    number_words = re.compile(r"\b(one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|hundred|"
                              r"thousand|dozen|half|twice|double|first|once)\b", re.I)
    for kind in ("thematic", "hedged"):
        for record in (NATALIA, BETTY, FACTORY, SIMPLE):
            for seed in range(30):
                added = _inserted(record["question"], add_distractor(record["question"], kind,
                                                                      distractor_rng(seed, 0, kind)))
                assert not number_words.search(added), added


def test_add_distractor_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown distractor kind"):
        add_distractor("Sam has 7 marbles.", "loud", random.Random(0))


def test_distractors_are_deterministic_per_seed_and_independent_of_limit(gsm_file, tmp_path):
    for kind in DISTRACTOR_KINDS:
        first = load_gsm8k(gsm_file, "train", distractor=kind, distractor_seed=3)
        assert first == load_gsm8k(gsm_file, "train", distractor=kind, distractor_seed=3)
        other_seed = load_gsm8k(gsm_file, "train", distractor=kind, distractor_seed=4)
        assert [t.instruction for t in first] != [t.instruction for t in other_seed]
        full = _by_id(first)
        # a limit is a prefix of the interleaved list: its tasks are exactly the full load's
        limited = load_tasks("gsm8k", split="train", path=str(gsm_file), distractor=kind, distractor_seed=3, limit=4)
        assert len(limited) == 4 and all(full[t.id] == t for t in limited)
        # and loading fewer lines (a truncated file) changes no task's distractor
        short = _write(tmp_path / f"short-{kind}.jsonl", RECORDS[:10])
        assert all(full[t.id] == t for t in load_gsm8k(short, "train", distractor=kind, distractor_seed=3))


# -------------------------------------------------------------------------------- the environment


def test_a_gsm8k_task_runs_through_the_calculator_env(gsm_file):
    task = _by_id(_both(gsm_file))["gsm8k-1"]  # Betty
    env = make_environment(task.env)
    for expression, value in calculator_annotations(BETTY["answer"]):
        out = env.call("evaluate_expression", {"expression": expression})
        assert out["success"] and math.isclose(float(out["result"]), float(value)), out
    assert env.call("get_last_result", {})["data"]["last_result"] == 5
    assert str(int(env.call("get_last_result", {})["data"]["last_result"])) == task.answer


# ----------------------------------------------------------------------------- the shared GSM8K file


def test_shared_gsm8k_train_file():
    if not SHARED_FILE.is_file():
        pytest.skip(f"{SHARED_FILE} is absent")
    train, test = load_gsm8k(SHARED_FILE, "train"), load_gsm8k(SHARED_FILE, "test")
    n_lines = sum(1 for line in SHARED_FILE.open(encoding="utf-8") if line.strip())
    assert len(train) + len(test) == n_lines
    assert 0.08 < len(test) / n_lines < 0.12
    assert {t.difficulty for t in test} == {"easy", "medium", "hard"}
    assert all(NUMBER.fullmatch(t.answer.lstrip("-")) for t in train + test)  # every gold is a plain number
    clean = _by_id(test)
    for kind in DISTRACTOR_KINDS:
        for t in load_gsm8k(SHARED_FILE, "test", distractor=kind)[:300]:
            _check_distractor(clean[t.id[: -len(kind) - 1]].instruction, t.instruction, kind)
    # the solutions' own annotations replay through the calculator
    env = make_environment(test[0].env)
    pairs = [p for line in list(SHARED_FILE.open(encoding="utf-8"))[:100]
             for p in calculator_annotations(json.loads(line)["answer"])]
    hits = 0
    for expression, value in pairs:
        out = env.call("evaluate_expression", {"expression": expression})
        hits += bool(out.get("success")) and math.isclose(float(out["result"]), float(value), abs_tol=1e-6)
    assert hits >= 0.99 * len(pairs)
