"""RegexMatchEnv: the four operations, their payloads and errors, and the backtracking guard."""
from __future__ import annotations

import math
import re
import time

import pytest

from data_builders.environments import regex_match, serialize
from data_builders.environments.regex_match import IN_PROCESS_STEP_BUDGET, RegexMatchEnv, backtracking_bound


def call(**arguments):
    return RegexMatchEnv().call("regex_match", arguments)


@pytest.fixture
def sandbox_calls(monkeypatch):
    """Records every sandboxed evaluation (the real one still runs)."""
    calls = []
    real = regex_match.run_python

    def spy(code, limits):
        calls.append(code)
        return real(code, limits)

    monkeypatch.setattr(regex_match, "run_python", spy)
    return calls


def test_findall_payload_and_tuples():
    out = call(pattern=r"(\w+)@(\w+)\.(\w+)", text="user@example.com admin@test.org")
    assert out == {"success": True, "result": [("user", "example", "com"), ("admin", "test", "org")],
                   "match_count": 2, "pattern": r"(\w+)@(\w+)\.(\w+)", "text_length": 31}
    assert list(out) == ["success", "result", "match_count", "pattern", "text_length"]
    # str() of the result is the When2Tool gold format; JSON turns the tuples into arrays
    assert str(out["result"]) == "[('user', 'example', 'com'), ('admin', 'test', 'org')]"
    assert serialize(out).startswith('{"success": true, "result": [["user", "example", "com"], ')
    assert call(pattern=r"\d+", text="no digits")["result"] == []
    assert call(pattern=r"(?=([a-z]{3}))", text="abcd")["result"] == ["abc", "bcd"]


def test_search_and_match():
    out = call(pattern=r"(a)|(b)(c)?", text="xxb", operation="search")
    assert out == {"success": True, "result": "b", "groups": [None, "b", None], "span": [2, 3]}
    assert list(out) == ["success", "result", "groups", "span"]
    assert serialize(out) == '{"success": true, "result": "b", "groups": [null, "b", null], "span": [2, 3]}'
    assert call(pattern=r"^[A-Z]", text="Hello world", operation="search") == {
        "success": True, "result": "H", "groups": [], "span": [0, 1]}
    # match is anchored at the start; no match is a success with a null result
    assert call(pattern=r"world", text="hello world", operation="match") == {"success": True, "result": None}
    assert call(pattern=r"xyz", text="hello", operation="search") == {"success": True, "result": None}


def test_sub_separator():
    assert call(pattern=r"(\d+)|||<\1>", text="a1b22", operation="sub") == {"success": True, "result": "a<1>b<22>"}
    # split at the first separator only: the rest is the replacement
    assert call(pattern="a|||b|||c", text="aXa", operation="sub") == {"success": True, "result": "b|||cXb|||c"}
    assert call(pattern=r"\d+", text="a1", operation="sub") == {
        "success": False, "message": "For sub operation, use pattern format: 'regex|||replacement'"}
    assert call(pattern=r"a|||\9", text="a", operation="sub") == {
        "success": False, "message": "Regex error: invalid group reference 9 at position 1"}


def test_operation_normalisation():
    expected = call(pattern="o", text="foo")
    assert expected["result"] == ["o", "o"]
    for op in ("findall", " FindAll ", "", None):  # whitespace-only is unknown: see item 10 below
        assert call(pattern="o", text="foo", operation=op) == expected
    assert call(pattern="o", text="foo", operation=" SEARCH ")["span"] == [1, 2]
    assert call(pattern="o", text="foo", operation="split") == {
        "success": False, "message": "Unknown operation: split. Use findall, search, match, or sub."}


def test_errors():
    assert call(pattern="(", text="a") == {
        "success": False, "message": "Regex error: missing ), unterminated subpattern at position 0"}
    # the unknown-operation check comes first, as in the original
    assert call(pattern="(", text="a", operation="scan")["message"].startswith("Unknown operation: scan.")
    assert call(pattern="a") == {"success": False, "message": "Missing required parameter text."}
    assert call(pattern="a", text="a" * 5001) == {
        "success": False, "message": "Argument 'text' too long (5001 chars, max 5000)."}
    assert call(pattern="a", text=["a"])["message"].startswith("[TOOL_RUNTIME_ERROR] TypeError: expected string")
    assert call(pattern="a", text="a", operation=3)["message"] == (
        "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'")


class TestOriginalFidelity:
    """The original's payloads, written out literally (from a differential test against its code)."""

    def test_item_10_whitespace_operation_is_unknown(self):
        assert call(pattern="o", text="foo", operation="   ") == {
            "success": False, "message": "Unknown operation:    . Use findall, search, match, or sub."}

    def test_item_10_unknown_operation_keeps_callers_case(self):
        assert call(pattern="o", text="foo", operation="Replace") == {
            "success": False, "message": "Unknown operation: Replace. Use findall, search, match, or sub."}
        assert call(pattern="o", text="foo", operation=" Split ") == {
            "success": False, "message": "Unknown operation:  Split . Use findall, search, match, or sub."}

    def test_item_10_non_string_sub_pattern_is_pythons_error(self):
        assert call(pattern=5, text="foo", operation="sub") == {
            "success": False, "message": "[TOOL_RUNTIME_ERROR] TypeError: argument of type 'int' is not iterable"}


# --------------------------------------------------------------------------- backtracking guard

@pytest.mark.parametrize("pattern, n", [
    (r"\b\w+ful\b", 60), (r"(\w+)=(\w+)", 200), (r"(?=([a-z]{3}))", 60), (r"[a-z]+(?=\d)", 5000),
    (r"(?:\d{1,3}\.){3}\d{1,3}", 5000), (r"\b(\w+)\s+\1\b", 60), (r"<(\w+)>[^<]+</\1>", 90),
])
def test_benign_patterns_run_in_process(pattern, n):
    assert backtracking_bound(pattern, n) <= IN_PROCESS_STEP_BUDGET


@pytest.mark.parametrize("pattern, n", [
    (r"(a+)+$", 30), (r"(a|aa)*b", 30), (r"(\w+\s?)*$", 10), (r"a*a*a*a*b", 5000), (r"(.*)*x", 5),
    (r"(?:a{1,10}){1,10}" * 3, 100),
])
def test_risky_patterns_are_flagged(pattern, n):
    assert backtracking_bound(pattern, n) > IN_PROCESS_STEP_BUDGET


def test_bound_is_monotone_in_text_length():
    assert backtracking_bound(r"a*a*b", 10) < backtracking_bound(r"a*a*b", 1000) < math.inf
    assert backtracking_bound("(", 10) == math.inf  # unparseable: never trusted in-process


def test_catastrophic_backtracking_is_cut_off(monkeypatch, sandbox_calls):
    monkeypatch.setattr(RegexMatchEnv, "risky_time_limit_s", 0.5)
    start = time.monotonic()
    out = call(pattern=r"(a+)+$", text="a" * 40 + "b")
    assert time.monotonic() - start < 3
    assert out == {"success": False, "message": "[TOOL_RUNTIME_ERROR] TimeoutError: regex evaluation exceeded "
                                                "the 0.5s limit (catastrophic backtracking)"}
    assert len(sandbox_calls) == 1


def test_sandboxed_evaluation_gives_the_in_process_answer(sandbox_calls):
    pattern, text = r"\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)+", "John Smith met Mary Jane at New York City"
    out = call(pattern=pattern, text=text)
    assert out["result"] == re.findall(pattern, text) == ["John Smith", "Mary Jane", "New York City"]
    groups = call(pattern=r"(\w+)(?:\s(\w+))+$|(z)", text="ab cd ef", operation="search")
    assert groups == {"success": True, "result": "ab cd ef", "groups": ["ab", "ef", None], "span": [0, 8]}
    assert call(pattern=r"(\w+\s?)+|||<\1>", text="ab cd!", operation="sub") == {
        "success": True, "result": re.sub(r"(\w+\s?)+", r"<\1>", "ab cd!")}
    assert call(pattern=r"(a+)+|||\9", text="aa", operation="sub") == {
        "success": False, "message": "Regex error: invalid group reference 9 at position 1"}
    assert len(sandbox_calls) == 4
