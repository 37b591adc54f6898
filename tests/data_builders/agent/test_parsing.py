"""Tool-call parser and "reasoning present" test against the benchmark's rules
(docs/guide.md#when2tool-tool-call-formats-and-parsing, docs/guide.md#when2tool-the-protocol-state-machine)."""
from __future__ import annotations

import time

import pytest

from data_builders.agent.parsing import (
    MAX_LITERAL_CHARS,
    ToolCall,
    has_boxed,
    parse_tool_call,
    reasoning_present,
)


# ---------------------------------------------------------------- parse_tool_call: recognised calls

def test_tagged_call_xml_format():
    text = ('I will compute it.\n<tool_call>\n{"name": "evaluate_expression", '
            '"arguments": {"expression": "2+3"}}\n</tool_call>')
    call = parse_tool_call(text)
    assert call == ToolCall("evaluate_expression", {"expression": "2+3"},
                            '{"name": "evaluate_expression", "arguments": {"expression": "2+3"}}')


def test_tag_without_close_runs_to_end():
    call = parse_tool_call('<tool_call>\n{"name": "factorial", "arguments": {"n": 5}}')
    assert call is not None and call.name == "factorial" and call.arguments == {"n": 5}


def test_only_first_tag_is_used():
    text = ('<tool_call>{"name": "a", "arguments": {"x": {"y": 1}}}</tool_call>'
            '<tool_call>{"name": "b", "arguments": {}}</tool_call>')
    call = parse_tool_call(text)
    assert call.name == "a" and call.arguments == {"x": {"y": 1}}


def test_json_code_fences_are_deleted():
    text = '```json\n{"name": "is_prime", "arguments": {"n": 97}}\n```'
    call = parse_tool_call(text)
    assert call == ToolCall("is_prime", {"n": 97}, '{"name": "is_prime", "arguments": {"n": 97}}')
    bare = parse_tool_call('```\n{"name": "is_prime", "arguments": {"n": 7}}\n```')
    assert bare.arguments == {"n": 7}


def test_single_quotes_decoded_by_quote_replacement():
    call = parse_tool_call("<tool_call>{'name': 'nth_prime', 'arguments': {'n': 10}}</tool_call>")
    assert call.name == "nth_prime" and call.arguments == {"n": 10}


def test_python_literal_dict_with_true_none_and_tuple():
    # JSON fails (True/None), quote replacement fails too; literal_eval succeeds and is then
    # made JSON-shaped (tuple -> list).
    text = "<tool_call>{'name': 'f', 'arguments': {'flag': True, 'x': None, 'v': (1, 2)}}</tool_call>"
    call = parse_tool_call(text)
    assert call.name == "f" and call.arguments == {"flag": True, "x": None, "v": [1, 2]}


def test_python_literal_that_is_not_json_serialisable_is_rejected():
    assert parse_tool_call("<tool_call>{'name': 'f', 'arguments': {'s': {1, 2}}}</tool_call>") is None


def test_apostrophe_in_value_still_strict_json():
    call = parse_tool_call('{"name": "search_corpus", "arguments": {"query": "Spain\'s capital"}}')
    assert call.arguments == {"query": "Spain's capital"}


def test_nested_arguments_in_tag_are_recovered():
    text = ('Let me multiply.<tool_call>{"name": "matrix_multiply", "arguments": '
            '{"matrix_a": [[1, 2]], "matrix_b": [[3], [4]], "opts": {"k": 1}}}</tool_call>')
    call = parse_tool_call(text)
    assert call.name == "matrix_multiply"
    assert call.arguments["opts"] == {"k": 1}


def test_bare_json_whole_text_with_nested_arguments_is_recognised():
    # Candidate (b): the whole text is the object, so nesting does not matter.
    call = parse_tool_call('{"name": "g", "arguments": {"a": {"b": 2}}}')
    assert call.arguments == {"a": {"b": 2}}


def test_reasoning_then_untagged_nested_json_is_not_a_call():
    # A consequence of the benchmark's parser: (b) fails because of the prose, (c) stops at the first "}".
    text = 'I need the tool.\n{"name": "g", "arguments": {"a": {"b": 2}}}'
    assert parse_tool_call(text) is None


def test_reasoning_then_untagged_flat_json_is_recovered_lazily():
    # (b) fails because of the prose; the first lazy candidate (c) is the whole flat object.
    text = 'I need the tool.\n{"name": "get_last_result"}'
    call = parse_tool_call(text)
    assert call == ToolCall("get_last_result", {}, '{"name": "get_last_result"}')


def test_parameters_used_when_arguments_absent():
    call = parse_tool_call('{"name": "combination", "parameters": {"n": 5, "k": 2}}')
    assert call.arguments == {"n": 5, "k": 2}


def test_arguments_key_wins_over_parameters_even_when_null():
    call = parse_tool_call('{"name": "f", "arguments": null, "parameters": {"n": 1}}')
    assert call.arguments == {}


def test_string_encoded_arguments_are_json_decoded():
    call = parse_tool_call('{"name": "f", "arguments": "{\\"n\\": 3}"}')
    assert call.arguments == {"n": 3}


def test_undecodable_string_arguments_fall_back_to_empty():
    assert parse_tool_call('{"name": "f", "arguments": "n=3"}').arguments == {}
    # Decodes, but not to an object.
    assert parse_tool_call('{"name": "f", "arguments": "[1, 2]"}').arguments == {}


@pytest.mark.parametrize("args", ['[1, 2]', '5', '"x"', 'true'])
def test_non_object_arguments_become_empty_dict(args):
    call = parse_tool_call('{"name": "f", "arguments": %s}' % args)
    assert call is not None and call.arguments == {}


def test_missing_arguments_gives_empty_dict():
    assert parse_tool_call('{"name": "clear_last_result"}').arguments == {}


@pytest.mark.parametrize("text", [
    '{"tool": "f", "arguments": {}}',
    '<tool_call>{"arguments": {"n": 1}}</tool_call>',
    '["name", "f"]',
    '"name"',
    '',
    '   ',
    'The answer is \\boxed{42}.',
])
def test_no_object_with_name_is_not_a_call(text):
    assert parse_tool_call(text) is None


def test_non_string_name_is_stringified():
    assert parse_tool_call('{"name": 7, "arguments": {}}').name == "7"
    assert parse_tool_call('{"name": null}').name == "None"


def test_tool_call_wins_over_boxed_answer():
    text = 'The answer is \\boxed{5}. <tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    assert parse_tool_call(text).name == "f"
    assert has_boxed(text)


def test_later_candidate_used_when_tag_body_is_invalid():
    # (a) is garbage, (b) the whole text is not JSON, (c) finds the flat object.
    text = '<tool_call>oops</tool_call> {"name": "h"}'
    assert parse_tool_call(text).name == "h"


def test_first_lazy_candidate_with_name_wins():
    text = 'x {"a": 1} y {"name": "first"} z {"name": "second"}'
    assert parse_tool_call(text) == ToolCall("first", {}, '{"name": "first"}')


def test_name_spelled_with_escapes_or_concatenation_is_found():
    # The fast pre-filter must not drop keys that do not contain the letters "name" verbatim.
    assert parse_tool_call('{"na\\u006de": "e"}').name == "e"
    assert parse_tool_call("x {'na' 'me': 'c'}").name == "c"
    assert parse_tool_call("x {'na' # split\n 'me': 'd'}").name == "d"


def test_powers_are_never_evaluated():
    start = time.perf_counter()
    assert parse_tool_call("<tool_call>{'name': 'f', 'arguments': {'x': 10**10**10}}</tool_call>") is None
    assert time.perf_counter() - start < 1.0


def test_non_str_input_is_not_a_call():
    assert parse_tool_call(None) is None  # type: ignore[arg-type]


# ---------------------------------------------------------------- adversarial input

ADVERSARIAL = {
    "open_braces": "{" * 100_000,
    "brace_pairs": "{}" * 50_000,
    "sets": "{a}" * 33_000,
    "quoted_bad_dicts": "{'a':x}" * 14_000,
    "deep_lists": "[" * 50_000 + "]" * 50_000,
    "deep_dict_keys": "{'name':" * 20_000,
    "deep_tag": "<tool_call>" + "[" * 100_000,
    "deep_arguments": "{'name':'x','arguments':" + "{" * 5_000 + "}" * 5_000,
    "parens": "(" * 100_000,
    "huge_int": "9" * 1_000_000,
    "huge_int_in_call": '{"name": "x", "arguments": {"a": ' + "9" * 20_000 + "}}",
    "quotes": "'" * 100_000,
    "names": "{'name': a}" * 9_000,
}


@pytest.mark.parametrize("key", sorted(ADVERSARIAL))
def test_adversarial_input_returns_quickly_without_raising(key):
    text = ADVERSARIAL[key]
    start = time.perf_counter()
    result = parse_tool_call(text)
    reasoning_present(text, kind="call")
    reasoning_present(text, kind="answer")
    assert time.perf_counter() - start < 2.0
    assert result is None or isinstance(result, ToolCall)


# 700 KB outputs (a turn far past any token budget, e.g. a model looping), each of a shape that used to cost up
# to three failing decodes per {...}: what is bounded is how many times a decoder runs, not the seconds.
LONG = 700_000


def _long(unit: str) -> str:
    return unit * (LONG // len(unit))


def _distinct(make) -> str:
    parts, n, i = [], 0, 0
    while n < LONG:
        parts.append(make(i))
        n, i = n + len(parts[-1]), i + 1
    return "".join(parts)


CODE = ('def f(x):\n    d = {"a": 1, "b": [x]}\n    s = {x, 2}\n    print(f"{x} -> {d[0]:>8}")\n'
        '    return {k: v for k, v in d.items()}\n')
LONG_OUTPUTS = {   # name -> (text, the most decoder runs its parse may take)
    "code": (_long(CODE), 4),
    "templates": (_long("Dear {name}, your order {order_id:>8} ships {date}. "), 4),
    "empty_braces": (_long("{}"), 4),
    "hash_sets": (_long("{#}"), 4),
    "backslash_sets": (_long("{\\}"), 4),
    "repeated_name_dicts": (_long("{'name': a}"), 6),
    "repeated_broken_call": (_long('<tool_call>{"name": "evaluate_expression", "arguments": {"expression": '
                                   '"1+1"}</tool_call>\n'), 6),
    "quoted_bad_dicts": (_long("{'a':x}"), 4),
    # distinct spans that may each hold a call: each is decoded (at most three decoders), none twice
    "distinct_name_dicts": (_distinct(lambda i: "{'name': a%d}" % i), 3 * (LONG // len("{'name': a0}") + 2)),
}


class _Counting:
    """Stands in for a module in data_builders.agent.parsing, counting calls of its decoding functions."""

    def __init__(self, module, names):
        self._module, self.calls = module, 0
        for name in names:
            setattr(self, name, self._counted(getattr(module, name)))

    def _counted(self, fn):
        def wrapper(*a, **k):
            self.calls += 1
            return fn(*a, **k)
        return wrapper

    def __getattr__(self, name):
        return getattr(self._module, name)


@pytest.fixture
def decoder_runs(monkeypatch):
    """The number of json.loads and ast.literal_eval calls the parser makes (its decode attempts)."""
    import ast
    import json

    from data_builders.agent import parsing
    counters = [_Counting(json, ["loads"]), _Counting(ast, ["literal_eval"])]
    monkeypatch.setattr(parsing, "json", counters[0])
    monkeypatch.setattr(parsing, "ast", counters[1])
    return lambda: sum(c.calls for c in counters)


@pytest.mark.parametrize("key", sorted(LONG_OUTPUTS))
def test_decode_attempts_on_a_700kb_output_are_bounded(key, decoder_runs):
    text, bound = LONG_OUTPUTS[key]
    assert len(text) >= LONG - 100
    assert parse_tool_call(text) is None
    assert decoder_runs() <= bound, f"{decoder_runs()} decoder runs on {key} (at most {bound})"


def test_a_call_after_700kb_of_repeated_junk_is_still_found(decoder_runs):
    # nothing is capped: the first candidate that holds a call still decides, however late it comes (untagged, so
    # every {...} before it is a candidate first)
    for junk in ("{'name': a}", "{}", "{#}", CODE):
        call = parse_tool_call(_long(junk) + '\nThen {"name": "get_last_result"}')
        assert call == ToolCall("get_last_result", {}, '{"name": "get_last_result"}')
    assert decoder_runs() < 40


def _reference(text: str) -> ToolCall | None:
    """The benchmark's rule written plainly (every candidate, every decoder, the quadratic regex): slow, short
    inputs only."""
    import ast
    import json
    import re

    from data_builders.agent.parsing import _as_call

    cleaned = text.strip().replace("```json", "").replace("```", "")
    candidates = []
    if "<tool_call>" in cleaned:
        body = cleaned.split("<tool_call>", 1)[1]
        candidates.append(body.split("</tool_call>", 1)[0])
    candidates += [cleaned, *re.findall(r"\{.*?\}", cleaned, re.DOTALL)]
    for c in candidates:
        c = c.strip()
        if not c:
            continue
        for decode in (json.loads, lambda c: json.loads(c.replace("'", '"')),
                       lambda c: json.loads(json.dumps(ast.literal_eval(c)))):
            try:
                value = decode(c)
            except Exception:  # noqa: BLE001
                continue
            call = _as_call(value, c)
            if call is not None:
                return call
            break
    return None


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("scan", ["this interpreter's", "atomic"])
def test_the_pre_filters_and_the_span_scan_change_no_result(scan, monkeypatch):
    """Random short outputs from the characters the pre-filters look at (quotes, ':', '#', backslashes,
    whitespace, "name" and its halves) against the plain rule: the same call or None on each. The atomic-group
    scan is the one an interpreter whose possessive repeats are broken (CPython < 3.11.5) runs: checked on every
    interpreter."""
    import random

    from data_builders.agent import parsing
    if scan == "atomic":
        monkeypatch.setattr(parsing, "_SKIP_TO_SPAN", parsing._ATOMIC_SCAN)

    rng = random.Random(0)
    tokens = ["{", "}", ":", "'", '"', "name", "na", "me", " ", "\n", "#", "\\", "x", "1", ",", "True", "[", "]",
              "<tool_call>", "</tool_call>", "{'name': 'f'}", '{"name": "g", "arguments": {"a": 1}}', "'na' 'me'",
              "\\u006e", "```json"]
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(1, 14)))
        want = _reference(text)
        assert parse_tool_call(text) == want, repr(text)
        found += want is not None
    assert found > 1_000          # the draw holds calls, not only junk


def test_literal_eval_is_skipped_beyond_length_cap():
    # Valid as a Python literal, invalid as JSON (True), and far longer than any model turn.
    call = "{'name': 'f', 'arguments': {'x': True}}"
    assert parse_tool_call(call) is not None
    # The trailing comment keeps strip() from shortening it; the only lazy candidate
    # "{'name': 'f', 'arguments': {'x': True}" is unbalanced, so nothing else can match.
    assert parse_tool_call(call + " " * 200_000 + "#") is None


def test_length_cap_keeps_long_real_calls():
    # A long code argument in Python-literal form (True) still parses: the cap is only a
    # bound for pathological input, not for turns a model can produce.
    code = "print(1)\\n" * 4_000
    text = "<tool_call>{'name': 'run_code', 'arguments': {'code': '%s', 'strict': True}}</tool_call>" % code
    assert len(text) < MAX_LITERAL_CHARS
    call = parse_tool_call(text)
    assert call is not None and call.arguments["strict"] is True
    assert call.arguments["code"] == "print(1)\n" * 4_000


# ---------------------------------------------------------------- has_boxed

def test_has_boxed():
    assert has_boxed("so \\boxed{4}")
    assert not has_boxed("so \\boxed 4")
    assert not has_boxed("boxed{4}")


# ---------------------------------------------------------------- reasoning_present

def test_call_with_tag_uses_text_before_tag():
    assert reasoning_present("I should use the calculator.<tool_call>{}</tool_call>", kind="call")
    assert not reasoning_present("<tool_call>I should use the calculator tool</tool_call>", kind="call")


def test_call_without_tag_uses_text_before_first_brace():
    assert reasoning_present('Use the calculator now: {"name": "f"}', kind="call")
    assert not reasoning_present('Call: {"name": "f", "arguments": {}}', kind="call")


def test_call_without_brace_or_brace_first_is_absent():
    assert not reasoning_present("A long sentence with plenty of letters but no object", kind="call")
    assert not reasoning_present('{"name": "f"} and then a long explanation afterwards', kind="call")


def test_twelve_character_threshold_after_whitespace_collapse():
    assert reasoning_present("abcdefghijkl{", kind="call")          # exactly 12
    assert not reasoning_present("abcdefghijk{", kind="call")       # 11
    # "ab   cd" collapses to "ab cd"; leading/trailing whitespace is trimmed.
    assert not reasoning_present("  ab     cd      ef  \n\n {", kind="call")   # "ab cd ef" = 8
    assert reasoning_present("ab cd ef gh i<tool_call>", kind="call")          # 13


def test_needs_an_ascii_letter():
    assert not reasoning_present("1234567890123 + 456 = ?<tool_call>", kind="call")
    assert not reasoning_present("ééééééééééééééé<tool_call>", kind="call")
    assert reasoning_present("1234567890123 x<tool_call>", kind="call")


def test_boxed_spans_are_deleted_before_measuring():
    # Before the tag: "\boxed{long answer text}" alone is not reasoning.
    assert not reasoning_present("\\boxed{a very long boxed answer}<tool_call>", kind="call")
    # Nested braces inside the box are removed with it, leaving only "ok".
    assert not reasoning_present("ok \\boxed{\\frac{1234567}{2345678}}<tool_call>", kind="call")
    assert reasoning_present("Reasoning text \\boxed{1}<tool_call>", kind="call")


def test_answer_uses_text_before_first_box():
    assert reasoning_present("The sum of the numbers is 42, so \\boxed{42}", kind="answer")
    assert not reasoning_present("\\boxed{The sum of the numbers is 42}", kind="answer")
    assert not reasoning_present("Answer: \\boxed{42}", kind="answer")


def test_answer_without_box_uses_whole_text():
    assert reasoning_present("I think the answer is forty-two.", kind="answer")
    assert not reasoning_present("42", kind="answer")


def test_unknown_kind_is_a_programming_error():
    with pytest.raises(ValueError):
        reasoning_present("text", kind="other")
