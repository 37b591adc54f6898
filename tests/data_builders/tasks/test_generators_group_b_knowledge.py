"""Built-in RetrieverEnv and GameRuleEnv generators: fact tables, templates, split hygiene, and a
cross-check of every generated gold against the real environment (not the generator's own code)."""
from __future__ import annotations

import collections
import json
import re
from functools import lru_cache

import pytest

from data_builders.environments import make_environment
from data_builders.oracle import run_oracle
from data_builders.tasks.builtin import generate_builtin
from data_builders.tasks.generators.game_rule import load_game_rule_facts
from data_builders.tasks.generators.retriever import PREFIX, load_retriever_facts
from data_builders.tasks.schema import DIFFICULTIES
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"
ENVS = ("RetrieverEnv", "GameRuleEnv")
TOOLS = {"RetrieverEnv": ["search_corpus", "read_doc"], "GameRuleEnv": ["lookup_rule"]}
TAGS = {"RetrieverEnv": "retrieval", "GameRuleEnv": "game_rule"}
N = 20
RULE_RE = re.compile(r"^How many [^?]+\? Answer with only the number\.$")
RETRIEVER_RE = re.compile(r"^(From local corpus(?: only)?: )?([^?]+\?) (Return [^?]+\.)$")


@lru_cache(maxsize=None)
def tasks(split: str, seed: int = 0, n: int = N):
    return tuple(generate_builtin(split, n_per_cell=n, seed=seed, envs=list(ENVS)))


def cell(ts, env, difficulty):
    return [t for t in ts if t.env.name == env and t.difficulty == difficulty]


# --------------------------------------------------------------------------- fact tables


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_fact_tables_are_large_and_valid(difficulty):
    rules = load_game_rule_facts(difficulty)
    facts = load_retriever_facts(difficulty)
    assert len(rules) >= 40 and len(facts) >= 40
    for f in rules:
        assert re.search(rf"(?<![\d,.]){f.answer}(?![\d,])", f.paragraph), f.question
    for f in facts:
        assert f.answer in f.text and f.title.endswith(" reference")


def test_tables_do_not_repeat_across_difficulties():
    rule_qs = [f.question.lower() for d in DIFFICULTIES for f in load_game_rule_facts(d)]
    titles = [f.title.lower() for d in DIFFICULTIES for f in load_retriever_facts(d)]
    assert len(rule_qs) == len(set(rule_qs)) and len(titles) == len(set(titles))


# --------------------------------------------------------------------------- contract


def test_schema_tools_tags_and_counts():
    for split in ("train", "test"):
        ts = tasks(split)
        assert len(ts) == len(ENVS) * len(DIFFICULTIES) * N
        for t in ts:
            assert list(t.env.tools) == TOOLS[t.env.name]
            assert t.tags == (TAGS[t.env.name], "single_round") and t.category == "B"
            assert t.multi_step is False and t.split == split


def test_tools_match_when2tool_files():
    path = DATA / "tasks_v1_train.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    seen = collections.defaultdict(set)
    for t in json.loads(path.read_text(encoding="utf-8")):
        env = t["environments"][0]
        if env["name"] in ENVS:
            seen[(env["name"], t["difficulty"])].add(tuple(env["tools"]))
            assert t["tags"][0] == TAGS[env["name"]]
    assert {k: v for k, v in seen.items()} == {
        (e, d): {tuple(TOOLS[e])} for e in ENVS for d in DIFFICULTIES}


def test_deterministic_and_seed_sensitive():
    assert [t.to_dict() for t in tasks("train")] == [t.to_dict() for t in generate_builtin(
        "train", n_per_cell=N, envs=list(ENVS))]
    other = tasks("train", seed=1)
    assert [t.instruction for t in other] != [t.instruction for t in tasks("train")]
    # A smaller request is a prefix of a larger one.
    small = tasks("test", n=5)
    big = tasks("test")
    for env in ENVS:
        for d in DIFFICULTIES:
            assert [t.to_dict() for t in cell(small, env, d)] == [t.to_dict() for t in cell(big, env, d)[:5]]


@pytest.mark.parametrize("seeds", [(0, 0), (0, 7)])
def test_train_and_test_never_ask_the_same_fact(seeds):
    train, test = tasks("train", seeds[0], 40), tasks("test", seeds[1], 40)
    for env in ENVS:
        for d in DIFFICULTIES:
            asked_train = {t.instruction for t in cell(train, env, d)}
            asked_test = {t.instruction for t in cell(test, env, d)}
            assert asked_train and asked_test and not asked_train & asked_test


def test_cells_are_spread_over_the_table():
    for env in ENVS:
        for d in DIFFICULTIES:
            size = len(load_retriever_facts(d) if env == "RetrieverEnv" else load_game_rule_facts(d))
            for split in ("train", "test"):
                ts = cell(tasks(split), env, d)
                # Sampling without replacement within a pass over the split's half of the table.
                assert len({t.instruction for t in ts}) == min(N, size // 2)


# --------------------------------------------------------------------------- GameRule


def test_game_rule_templates_corpus_and_gold_through_the_environment():
    for split in ("train", "test"):
        for t in (t for t in tasks(split) if t.env.name == "GameRuleEnv"):
            assert RULE_RE.match(t.instruction), t.instruction
            assert re.fullmatch(r"\d+", t.answer)
            corpus = t.env.parameters["corpus"]
            # The whole difficulty table, in table order (first-match lookup depends on it).
            assert list(corpus) == [f.question for f in load_game_rule_facts(t.difficulty)]
            question = t.instruction.removesuffix(" Answer with only the number.")
            out = make_environment(t.env).call("lookup_rule", {"query": question})
            assert out["success"] and out["query"] == question
            assert re.search(rf"(?<![\d,.]){t.answer}(?![\d,])", out["passage"])


def test_game_rule_instructions_follow_when2tool_template():
    path = DATA / "tasks_v1_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    real = [t for t in json.loads(path.read_text(encoding="utf-8")) if t["id"] // 10000 == 8]
    assert real and all(RULE_RE.match(t["instruction"]) for t in real)
    assert all(len(t["environments"][0]["parameters"]["corpus"]) == 72 for t in real)


def test_every_game_rule_fact_is_found_by_its_own_question():
    for d in DIFFICULTIES:
        facts = load_game_rule_facts(d)
        env = make_environment({"name": "GameRuleEnv", "tools": ["lookup_rule"],
                                "parameters": {"corpus": {f.question: f.paragraph for f in facts}}})
        for f in facts:
            assert env.call("lookup_rule", {"query": f.question})["query"] == f.question


# --------------------------------------------------------------------------- Retriever


def test_retriever_templates_and_corpus_layout():
    for split in ("train", "test"):
        targets = collections.Counter()
        for t in (t for t in tasks(split) if t.env.name == "RetrieverEnv"):
            m = RETRIEVER_RE.match(t.instruction)
            assert m, t.instruction
            assert (m.group(1) or "") == PREFIX[t.difficulty]
            corpus = t.env.parameters["corpus"]
            assert [d["id"] for d in corpus] == [f"doc{i}" for i in range(1, 11)]
            assert len({d["title"] for d in corpus}) == 10
            table = {f.title: f for f in load_retriever_facts(t.difficulty)}
            assert all(table[d["title"]].text == d["text"] for d in corpus)  # same-table distractors
            target = [d for d in corpus if table[d["title"]].question == m.group(2) + " " + m.group(3)]
            assert len(target) == 1 and t.answer in target[0]["text"]
            targets[target[0]["id"]] += 1
        assert len(targets) >= 6  # ids are assigned after shuffling: the answer moves around


def test_retriever_gold_is_readable_through_the_environment():
    """Cross-check against the environment (not the generator's tables): searching the question's
    words and reading the hits through the tools yields a document stating the gold verbatim."""
    for t in (t for t in tasks("test") if t.env.name == "RetrieverEnv"):
        env = make_environment(t.env)
        question = RETRIEVER_RE.match(t.instruction).group(2)
        words = " ".join(w.strip("?,.").lower() for w in question.split())
        hits = env.call("search_corpus", {"query": words, "top_k": 10})["data"]["hits"]
        found = [h["id"] for h in hits if t.answer in env.call("read_doc", {"doc_id": h["id"]})["data"]["content"]]
        assert found, t.instruction


def test_retriever_prefixes_match_when2tool():
    path = DATA / "tasks_v1_test.json"
    if not path.is_file():
        pytest.skip(f"When2Tool data not available at {path}")
    for t in json.loads(path.read_text(encoding="utf-8")):
        if t["id"] // 10000 == 6:
            m = RETRIEVER_RE.match(t["instruction"])
            assert m and (m.group(1) or "") == PREFIX[t["difficulty"]], t["id"]


# --------------------------------------------------------------------------- the reference reader


def test_oracle_reads_generated_tasks():
    """The generated documents follow When2Tool's answer-first style closely enough for the
    mechanical reader; a fact written otherwise (answer buried mid-sentence) shows up here."""
    for split in ("train", "test"):
        runs = [run_oracle(t) for t in tasks(split)]
        by_env = collections.Counter(r.task.env.name for r in runs if r.correct)
        assert by_env["GameRuleEnv"] == 3 * N
        assert by_env["RetrieverEnv"] >= 0.95 * 3 * N
