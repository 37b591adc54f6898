"""CalculatorEnv, plus the safety guard the original lacked."""
from __future__ import annotations

import sys
import time

import pytest

from data_builders.environments import CalculatorEnv, serialize
from data_builders.environments.safe_arith import (
    MAX_INT_DIGITS,
    ExpressionTooLarge,
    decimal_digits,
    evaluate,
)


def calc(expression, env=None):
    return (env or CalculatorEnv()).call("evaluate_expression", {"expression": expression})


def runtime(msg):
    return {"success": False, "message": f"[TOOL_RUNTIME_ERROR] {msg}"}


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("20+20", 40),
        ("(372*79)-115+13", 29286),
        ("(40880268647*882767139926)-17904672", 36087757832918701795450),
        ("(1654//9)+(191*43)-149", 8247),
        ("7/2", 3.5),
        ("6/3", 2.0),
        ("7//-2", -4),
        ("-7%3", 2),
        ("7%-3", -2),
        ("2**-1", 0.5),
        ("1_000+0xff", 1255),
        ("1e3", 1000.0),
        ("0o17+0b11", 18),
        ("True+True", 2),
        ("-(+3)", -3),
        ("1 +\t2 \n", 3),
        ("(123456789012**2)", 15241578753153483936144),
        ("2.5*4", 10.0),
        ("1.5%1", 0.5),
    ],
)
def test_success_python_semantics(expression, result):
    out = calc(expression)
    assert out == {"success": True, "result": result, "expression": expression}
    assert type(out["result"]) is type(result)


def test_success_serialisation():
    assert serialize(calc("2**0.5")) == '{"success": true, "result": 1.4142135623730951, "expression": "2**0.5"}'
    assert serialize(calc("134/2")) == '{"success": true, "result": 67.0, "expression": "134/2"}'


@pytest.mark.parametrize(
    "expression",
    ["abs(-1)", "x+1", "2^3", "1<2", "[1, 2]", "(1, 2)", "{1}", "'a'", "None", "2j", "1+2j", "not 1",
     "~1", "1 if 1 else 2", "1 and 2", "(1).real", "...", "b'1'"],
)
def test_unsupported_expression(expression):
    assert calc(expression) == runtime("ValueError: Unsupported expression")


def test_benchmark_spot_check_abs():
    assert serialize(calc("abs(-1)")) == (
        '{"success": false, "message": "[TOOL_RUNTIME_ERROR] ValueError: Unsupported expression"}')


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1/0", "ZeroDivisionError: division by zero"),
        ("5//0", "ZeroDivisionError: integer division or modulo by zero"),
        ("5%0", "ZeroDivisionError: integer modulo by zero"),
        ("1 +", "SyntaxError: invalid syntax (<unknown>, line 1)"),
        ("", "SyntaxError: invalid syntax (<unknown>, line 0)"),
        ("1;2", "SyntaxError: invalid syntax (<unknown>, line 1)"),
        ("10.0**400", "OverflowError: (34, 'Numerical result out of range')"),
        ("(-8)**0.5", "ValueError: Complex result not supported"),
    ],
)
def test_python_errors(expression, message):
    assert calc(expression) == runtime(message)


def test_result_too_large_exact_length():
    out = calc("10**5000")  # 5001 characters
    assert out == {"success": False, "message": "Result too large (5001 digits). Simplify the expression."}
    out = calc("-(10**4999)")  # the minus sign counts: len(str(v)) == 5001
    assert out == {"success": False, "message": "Result too large (5001 digits). Simplify the expression."}


def test_result_at_limit_depends_on_int_str_limit():
    # 4999 digits: success when the interpreter can print it (harness limit 10,000),
    # "too large" when it cannot, so the payload is always serialisable.
    out = calc("10**4998")
    limit = sys.get_int_max_str_digits()
    if limit == 0 or limit >= 4999:
        assert out["success"] is True and len(serialize(out)) > 4999
    else:
        assert out == {"success": False, "message": "Result too large (4999 digits). Simplify the expression."}


def test_result_at_limit_with_harness_int_str_limit():
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(10_000)
    try:
        out = calc("-(10**4998)")  # 5000 characters: allowed
        assert out["success"] is True and out["result"] == -(10**4998)
        assert str(out["result"]) == "-1" + "0" * 4998
    finally:
        sys.set_int_max_str_digits(old)


def test_interpreter_int_str_limit_not_modified():
    before = sys.get_int_max_str_digits()
    calc("10**4400")
    calc("9**9**9")
    assert sys.get_int_max_str_digits() == before


def test_memory():
    env = CalculatorEnv()
    assert env.call("get_last_result", {}) == {"success": False, "message": "No previous result available."}
    calc("6*7", env)
    assert env.call("get_last_result", {}) == {"success": True, "data": {"last_result": 42}}
    calc("abs(1)", env)  # failures leave the memory alone
    calc("10**6000", env)
    assert env.call("get_last_result", {})["data"] == {"last_result": 42}
    calc("1/4", env)
    assert env.call("get_last_result", {})["data"] == {"last_result": 0.25}
    assert env.call("clear_last_result", {}) == {"success": True}
    assert env.call("get_last_result", {})["success"] is False
    # there is no LAST placeholder
    assert calc("LAST+1", env) == runtime("ValueError: Unsupported expression")


def test_memory_starts_from_parameters():
    env = CalculatorEnv(parameters={"last_result": 0})
    assert env.call("get_last_result", {}) == {"success": True, "data": {"last_result": 0}}


def test_non_string_expression_is_a_runtime_error():
    out = calc(12)
    assert out["success"] is False and out["message"].startswith("[TOOL_RUNTIME_ERROR] TypeError")


# --- adversarial inputs: every one must give an error payload quickly ----------------------------

ADVERSARIAL = [
    "9**9**9",
    "(10**4000)**(10**4000)",
    "2**10**10",
    "2**2**2**2**2**2",
    "10**10**10**10",
    "(-3)**(10**8)",
    "9**9000*9**9000*9**9000",
    "+".join(["9**5200*9**5200//9**5200//9**5200"] * 136),  # ~4.8k chars of 10k-digit divisions
    "(" * 2450 + "1" + ")" * 2450,
    "-" * 4999 + "1",
    "((((" * 600 + "1" + "))))" * 600,
    "__import__('os').system('x')",
    "().__class__.__bases__[0].__subclasses__()",
    "(1).__class__",
    "(lambda: 1)()",
    "[x for x in range(10**9)]",
    "f'{1+1}'",
    "x",
    "open('/etc/passwd').read()",
    "eval('1+1')",
    "'a'*10**9",
    "1" * 5001,  # over the 5000-char argument limit (a 4999-digit literal is valid under the harness limit)
    "1+" * 2000 + "abs(1)",
    "10j**2",
    "(yield)",
    "await x",
    "x := 1",
    "1 +\x00 1",
]


@pytest.mark.parametrize("expression", ADVERSARIAL, ids=lambda s: s[:30])
def test_adversarial_inputs_fail_fast(expression):
    env = CalculatorEnv()
    start = time.perf_counter()
    out = env.call("evaluate_expression", {"expression": expression})
    elapsed = time.perf_counter() - start
    assert out["success"] is False, out
    assert isinstance(out["message"], str) and out["message"]
    assert elapsed < 0.5, f"{elapsed:.3f}s"
    serialize(out)  # always serialisable
    assert env.call("get_last_result", {})["success"] is False


def test_huge_power_reports_too_large():
    for expression in ("9**9**9", "(10**4000)**(10**4000)", "2**10**10"):
        assert calc(expression) == {
            "success": False,
            "message": f"Result too large (more than {MAX_INT_DIGITS} digits). Simplify the expression.",
        }


@pytest.mark.parametrize("arguments", [None, [], "9**9**9", 5, {"expr": "1"}])
def test_non_dict_or_wrong_arguments(arguments):
    assert CalculatorEnv().call("evaluate_expression", arguments) == {
        "success": False, "message": "Missing required parameter expression."}


class TestOriginalFidelity:
    """A non-string expression gets the original's ast.parse error."""

    def test_item_13_evaluate_expression_int(self):
        assert calc(5) == runtime("TypeError: compile() arg 1 must be a string, bytes or AST object")

    def test_item_13_evaluate_expression_other_json_types(self):
        for expression in (None, 2.5, [1, 2], {"a": 1}):
            assert calc(expression) == runtime("TypeError: compile() arg 1 must be a string, bytes or AST object")
        assert CalculatorEnv().call("get_last_result", {})["success"] is False


# --- safe_arith directly ------------------------------------------------------------------------

def test_evaluate_direct_errors():
    with pytest.raises(ValueError, match="Unsupported expression"):
        evaluate("2j")
    with pytest.raises(ExpressionTooLarge):
        evaluate("10**10000")  # 10,001 digits
    assert evaluate("10**9999") == 10**9999  # exactly at the intermediate limit
    with pytest.raises(ExpressionTooLarge):
        evaluate("10**9999*10")  # the product crosses it
    with pytest.raises(ValueError, match="too deeply nested"):
        evaluate("-" * 4999 + "1")
    with pytest.raises(ValueError, match="too long"):
        evaluate("1+" * 6000 + "1")
    with pytest.raises(ValueError, match="too expensive"):
        evaluate("+".join(["9**5200*9**5200//9**5200//9**5200"] * 136))


def test_long_flat_chain_is_not_a_recursion_problem():
    # 2,500 operands give an AST 2,500 levels deep; the evaluator is iterative.
    assert evaluate("+".join(["1"] * 2500)) == 2500
    assert evaluate("1**" * 2000 + "5") == 1  # right-associative, 2,000 levels


def test_float_overflow_follows_python():
    # float arithmetic overflows to inf (serialised as Infinity, as json.dumps does); float ** raises.
    assert calc("1e308*10") == {"success": True, "result": float("inf"), "expression": "1e308*10"}
    assert serialize(calc("-1e308*10")) == '{"success": true, "result": -Infinity, "expression": "-1e308*10"}'


def test_leading_whitespace_is_python_indentation_error():
    # The expression is parsed verbatim as Python, as the original does, not stripped.
    assert calc(" 1+1") == runtime("IndentationError: unexpected indent (<unknown>, line 1)")


DIGIT_CASES = [0, 1, 9, 10, 99, 10**17, 10**18 - 1, 10**18, 2**64, 10**400 - 1, 10**400,
               -(10**999), 10**9999, 3**20000]


# Explicit ids: pytest would otherwise str() the 10,000-digit ints for test names.
@pytest.mark.parametrize("n", DIGIT_CASES, ids=[f"case{i}" for i in range(len(DIGIT_CASES))])
def test_decimal_digits_exact(n):
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert decimal_digits(n) == len(str(abs(n)))
    finally:
        sys.set_int_max_str_digits(old)
