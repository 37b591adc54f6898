"""HistoricalYearEnv.lookup_year."""
from __future__ import annotations

from data_builders.environments import HistoricalYearEnv

CORPUS = {
    "humans first landed on the Moon": "In 1969, humans first landed on the Moon.",
    "the Berlin Wall fell": "The Berlin Wall fell in 1989.",
    "the Moon landing was televised": "Televised in 1969 worldwide.",
    "Rome was founded": "Rome was founded in 753 BC (753).",
    "the printing press was invented": "Around 1440.",
    "the Great Fire of London": "The Great Fire of London happened in 1666.",
}
KEYS = list(CORPUS)


def lookup(event, corpus=CORPUS):
    return HistoricalYearEnv(parameters={"corpus": corpus}).call("lookup_year", {"event": event})


def test_success_payload_exact():
    out = lookup("  The Berlin Wall FELL ")
    assert out == {
        "success": True,
        "event": "the Berlin Wall fell",
        "passage": "The Berlin Wall fell in 1989.",
        "query": "  The Berlin Wall FELL ",
        "source": "historical_records",
        "confidence": "exact_match",
        "related_entries": KEYS[:5],
    }
    assert list(out) == ["success", "event", "passage", "query", "source", "confidence", "related_entries"]


def test_query_contained_in_key_first_in_stored_order():
    # "moon" is a substring of two keys: the first stored one wins.
    assert lookup("moon")["event"] == "humans first landed on the Moon"
    reordered = dict(reversed(list(CORPUS.items())))
    assert lookup("moon", reordered)["event"] == "the Moon landing was televised"


def test_key_contained_in_query():
    out = lookup("In what year was Rome was founded by Romulus?")
    assert out["event"] == "Rome was founded"


def test_empty_query_matches_first_key():
    assert lookup("")["event"] == KEYS[0]
    assert lookup("   ")["event"] == KEYS[0]


def test_not_found_payload_exact():
    out = lookup("the invention of the wheel")
    assert out == {
        "success": False,
        "message": "Event not found: the invention of the wheel",
        "query": "the invention of the wheel",
        "available_entries": 6,
    }
    assert list(out) == ["success", "message", "query", "available_entries"]


def test_empty_or_missing_corpus():
    env = HistoricalYearEnv()
    assert env.call("lookup_year", {"event": ""}) == {
        "success": False, "message": "Event not found: ", "query": "", "available_entries": 0}


def test_non_string_event_is_runtime_error_and_missing_is_param_error():
    env = HistoricalYearEnv(parameters={"corpus": CORPUS})
    assert env.call("lookup_year", {"event": 1969}) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'"}
    assert env.call("lookup_year", {}) == {"success": False, "message": "Missing required parameter event."}
    assert [s["function"]["name"] for s in env.tool_specs()] == ["lookup_year"]
