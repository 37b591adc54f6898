"""GameRuleEnv.lookup_rule (HistoricalYear's matching rule, its own payload) and the
oracle's number reader."""
from __future__ import annotations

import json

import pytest

from data_builders.environments import game_rule, historical_year, make_environment
from data_builders.environments.game_rule import GameRuleEnv
from data_builders.oracle.solvers.game_rule import question_of, read_number
from tests.conftest import SHARED

DATA = SHARED / "data" / "when2tool"

CORPUS = {
    "How many squares are on a standard chessboard?": "A standard chessboard has 64 squares.",
    "How many black squares are on a standard chessboard?": "It has 32 black squares out of 64.",
    "How many pawns does each player start with in chess?": "Each player starts with 8 pawns.",
    "How many cards are in a standard deck?": "A standard deck has 52 cards.",
    "How many players are on a soccer team?": "Each side fields 11 players.",
    "How many holes are in a round of golf?": "A round has 18 holes.",
}
KEYS = list(CORPUS)


def lookup(query, corpus=CORPUS):
    return GameRuleEnv(parameters={"corpus": corpus}).call("lookup_rule", {"query": query})


def test_success_payload_exact_query_is_the_matched_key():
    out = lookup("  how many CARDS are in a standard deck? ")
    assert out == {
        "success": True,
        "query": "How many cards are in a standard deck?",  # the key, not the caller's argument
        "passage": "A standard deck has 52 cards.",
        "source": "game_rules_database",
        "confidence": "exact_match",
        "related_rules": KEYS[:5],
    }
    assert list(out) == ["success", "query", "passage", "source", "confidence", "related_rules"]


def test_first_match_in_stored_order():
    # "squares are on a standard chessboard" is inside the first two keys: the first stored one wins.
    assert lookup("squares are on a standard chessboard")["query"] == KEYS[0]
    reordered = dict(reversed(list(CORPUS.items())))
    assert lookup("squares are on a standard chessboard", reordered)["query"] == KEYS[1]


def test_key_contained_in_query_and_empty_query():
    out = lookup("Please answer: How many holes are in a round of golf? Answer with only the number.")
    assert out["query"] == "How many holes are in a round of golf?"
    assert lookup("")["query"] == KEYS[0]
    assert lookup(" \t ")["query"] == KEYS[0]


def test_not_found_payload_exact():
    out = lookup("How many dice are used in Yahtzee?")
    assert out == {
        "success": False,
        "message": "Rule not found: How many dice are used in Yahtzee?",
        "query": "How many dice are used in Yahtzee?",
        "available_entries": 6,
    }
    assert list(out) == ["success", "message", "query", "available_entries"]
    assert GameRuleEnv().call("lookup_rule", {"query": "x"}) == {
        "success": False, "message": "Rule not found: x", "query": "x", "available_entries": 0}


def test_one_matching_rule_shared_with_historical_year():
    assert game_rule.match_corpus_key is historical_year.match_corpus_key


def test_bad_arguments():
    e = GameRuleEnv(parameters={"corpus": CORPUS})
    assert e.call("lookup_rule", {}) == {"success": False, "message": "Missing required parameter query."}
    assert e.call("lookup_rule", {"query": 64}) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'"}
    assert e.call("lookup_rule", {"query": "x" * 5001}) == {
        "success": False, "message": "Argument 'query' too long (5001 chars, max 5000)."}
    assert [s["function"]["name"] for s in e.tool_specs()] == ["lookup_rule"]


def test_lookup_is_mechanical_on_when2tool_tasks():
    """The benchmark's oracle check: the question (instruction minus " Answer with only the number.") returns the
    intended key in 100% of tasks, and the gold appears verbatim in the passage."""
    n = 0
    for name in ("tasks_v1_train.json", "tasks_v1_test.json"):
        path = DATA / name
        if not path.is_file():
            pytest.skip(f"When2Tool data not available at {path}")
        for t in json.loads(path.read_text(encoding="utf-8")):
            if t["id"] // 10000 != 8:
                continue
            question = question_of(t["instruction"])
            out = make_environment(t["environments"][0]).call("lookup_rule", {"query": question})
            assert out["success"] and out["query"] == question, t["id"]
            assert t["expected"]["answer"] in out["passage"], t["id"]
            n += 1
    assert n == 210


# --------------------------------------------------------------------------- the oracle's reader


@pytest.mark.parametrize("question, passage, answer", [
    ("How many black squares are on a standard chessboard?",
     "A standard chessboard has 32 black squares, half of the 64 total squares.", "32"),
    ("How many players per team are on the ice in ice hockey?",
     "Within 20-minute periods each team has 6 players on the ice: 3 forwards, 2 defensemen and a goalie.", "6"),
    ("How many intersections are on a 19x19 Go board?",
     "A 19x19 Go board has 361 intersections.", "361"),  # numbers the question states are skipped
    ("How many regions are in a standard 9x9 Sudoku grid?",
     "A standard 9x9 Sudoku grid is divided into 9 regions of 3x3 cells.", "9"),  # ... unless they answer
    ("How many maximum points can be scored in a single turn in Yahtzee?",
     "The maximum points in a single turn is 50. Bonus Yahtzees are worth 100 additional points.", "50"),
    ("How many unique two-card starting hands exist in Texas Hold'em?",
     "There are 1,326 unique two-card starting hands.", "1326"),  # separators dropped for the scorer
    ("How many darts does a player throw?", "No count here at all, 3 of them.", "3"),  # fallback: first
])
def test_reader_picks_the_counted_number(question, passage, answer):
    assert read_number(question, passage) == answer


def test_question_of_strips_the_suffix():
    assert question_of("How many dice are rolled? Answer with only the number.") == "How many dice are rolled?"
