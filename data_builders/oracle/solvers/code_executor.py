"""CodeExecutorEnv: run the quoted snippet (single-hop); three chained runs (multi-hop).

Single-hop is mechanical: the code between the ``` fences, run once; the answer is the tool's
``result`` (stdout without trailing newlines).

Multi-hop steps 2 and 3 are prose ("count the number of 1-bits in binary representation of x
using a loop"), so this oracle is not exact by construction. When2Tool writes them from
a small set of templates; :data:`PROSE` maps each known template to the code a careful programmer
would write for it, with the previous step's value bound to its variable. An unknown description
raises :class:`OracleParseError`. Each step is its own ``run_code`` call, as a model would do.
"""
from __future__ import annotations

import re
from typing import Callable

from ...tasks.schema import Task
from ..base import CallFn, OracleParseError

_FENCE = re.compile(r"```(?:python)?\n(.*?)```", re.S)
_STEPS = re.compile(r"Step 2: Using x, run: (.*?)\. Call the result y\.\s*"
                    r"Step 3: Using y, run: (.*?)\. Call the result z\.", re.S)

# Reusable snippet bodies; ``n`` holds the value.
_FACTORIZE = """\
def factorize(n):
    factors, d = {}, 2
    while d * d <= n:
        while n % d == 0:
            factors[d] = factors.get(d, 0) + 1
            n //= d
        d += 1
    if n > 1:
        factors[n] = factors.get(n, 0) + 1
    return factors
"""
_COUNT_DIVISORS = _FACTORIZE + """\
def count_divisors(n):
    if n == 0:
        return 0
    count = 1
    for e in factorize(n).values():
        count *= e + 1
    return count
"""
_COLLATZ = """\
steps = 0
while n != 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
print(steps)
"""

# (description regex, code builder). ``v`` is the variable name the step uses (x or y); every
# builder's code starts from ``n`` (or the named variable) already bound to the value.
Builder = Callable[[re.Match], str]
_V = r"([xy])"
_INT = r"(-?\d+)"
_LIST = r"(\[[-\d, ]*\])"

PROSE: list[tuple[re.Pattern, Builder]] = [(re.compile(p + r"\Z", re.S), b) for p, b in [
    # easy: the description is itself a print statement over the variable
    (r"(print\(.*\))", lambda m: m.group(1)),
    # medium, step 2
    (r"build dict \{i: i\*\*(\d+) for i in range\([xy]\)\} and access key [xy]-(\d+)",
     lambda m: f"d = {{i: i**{m[1]} for i in range(n)}}\nprint(d[n - {m[2]}])"),
    (rf"convert {_V} to binary and count the number of ([01])-bits",
     lambda m: f"print(bin(n)[2:].count('{m[2]}'))"),
    (rf"count how many i in range\({_INT}, [xy]\) have i\*\*(\d+) > [xy]",
     lambda m: f"print(sum(1 for i in range({m[1]}, n) if i**{m[2]} > n))"),
    (rf"count how many integers in range\({_V}\) are divisible by (\d+)",
     lambda m: f"print(sum(1 for i in range(n) if i % {m[2]} == 0))"),
    (rf"count the number of odd digits in {_V}",
     lambda m: "print(sum(1 for c in str(abs(n)) if int(c) % 2 == 1))"),
    (rf"for each digit in str\({_V}\), sum the indices where the digit > (\d+)",
     lambda m: f"print(sum(i for i, c in enumerate(str(n)) if c.isdigit() and int(c) > {m[2]}))"),
    (rf"insert {_V} into {_LIST}, sort, and take the element at index (\d+)",
     lambda m: f"print(sorted({m[2]} + [n])[{m[3]}])"),
    (rf"sum all odd numbers from {_INT} to {_V} \(inclusive\)",
     lambda m: f"print(sum(i for i in range({m[1]}, n + 1) if i % 2 == 1))"),
    (rf"sum of squares of even numbers from {_INT} to {_V}",
     lambda m: f"print(sum(i * i for i in range({m[1]}, n + 1) if i % 2 == 0))"),
    (rf"(?:compute )?(?:sum the digits|the sum of digits) of {_V}",
     lambda m: "print(sum(int(c) for c in str(abs(n))))"),
    (rf"take first {_V} elements of {_LIST} and sum them", lambda m: f"print(sum({m[2]}[:n]))"),
    (rf"zip range\({_V}\) with range\({_INT}, [xy]\+(\d+)\), sum element-wise products",
     lambda m: f"print(sum(a * b for a, b in zip(range(n), range({m[2]}, n + {m[3]}))))"),
    # medium, step 3
    (rf"build list of cubes \[1\^3, 2\^3, \.\.\., {_V}\^3\] and take the last element",
     lambda m: "print([i**3 for i in range(1, n + 1)][-1])"),
    (rf"compute sum of factorials from (\d+)! to {_V}!",
     lambda m: f"import math\nprint(sum(math.factorial(i) for i in range({m[1]}, n + 1)))"),
    (rf"compute sum of i\*{_V} for i in range\([xy]\)", lambda m: "print(sum(i * n for i in range(n)))"),
    (rf"compute {_V} squared, then sum its digits", lambda m: "print(sum(int(c) for c in str(n * n)))"),
    (rf"count how many digits of {_V} are greater than (\d+)",
     lambda m: f"print(sum(1 for c in str(abs(n)) if int(c) > {m[2]}))"),
    (rf"count the number of unique digits in {_V}", lambda m: "print(len(set(str(abs(n)))))"),
    (rf"find the most frequent digit in {_V} \(return its count\)",
     lambda m: "from collections import Counter\nprint(max(Counter(str(abs(n))).values()))"),
    (rf"for each digit char in str\({_V}\), compute ord\(c\)-ord\('(\d)'\), then sum",
     lambda m: f"print(sum(ord(c) - ord('{m[2]}') for c in str(n)))"),
    (rf"reverse the string of {_V} and convert back to int", lambda m: "print(int(str(n)[::-1]))"),
    (rf"sort the digits of {_V} in ascending order, join, and convert to int",
     lambda m: "print(int(''.join(sorted(str(n)))))"),
    (rf"sort the digits of {_V} in descending order and take the largest digit",
     lambda m: "print(int(sorted(str(abs(n)), reverse=True)[0]))"),
    # hard, step 2
    (rf"compute digital root of {_V} \(repeatedly sum digits until single digit\)",
     lambda m: "while n >= 10:\n    n = sum(int(c) for c in str(n))\nprint(n)"),
    (rf"compute sum of all proper divisors of {_V} \(excluding [xy] itself\)",
     lambda m: _FACTORIZE + "total = 1\nfor p, e in factorize(n).items():\n"
                            "    total *= (p ** (e + 1) - 1) // (p - 1)\nprint(total - n)"),
    (rf"count Collatz steps from {_V} to 1", lambda m: _COLLATZ),
    (rf"count Collatz steps from max\({_V},(\d+)\) to 1", lambda m: f"n = max(n, {m[2]})\n" + _COLLATZ),
    (rf"count distinct prime factors of {_V} via trial division",
     lambda m: _FACTORIZE + "print(len(factorize(n)))"),
    (rf"count the number of ([01])-bits in binary representation of {_V} using a loop",
     lambda m: f"count = 0\nwhile n > 0:\n    if n % 2 == {m[1]}:\n        count += 1\n    n //= 2\nprint(count)"),
    (rf"count the number of divisors of {_V}", lambda m: _COUNT_DIVISORS + "print(count_divisors(n))"),
    (rf"generate first {_V}\*(\d+) Fibonacci numbers and sum the even ones",
     lambda m: f"a, b, total = 0, 1, 0\nfor _ in range(n * {m[2]}):\n    if a % 2 == 0:\n        total += a\n"
               "    a, b = b, a + b\nprint(total)"),
    # hard, step 3
    (rf"compute LIS of array {_LIST} with first element replaced by {_V}%(\d+)",
     lambda m: f"a = {m[1]}\na[0] = n % {m[3]}\ndp = [1] * len(a)\nfor i in range(1, len(a)):\n"
               "    for j in range(i):\n        if a[j] < a[i] and dp[j] + 1 > dp[i]:\n            dp[i] = dp[j] + 1\n"
               "print(max(dp))"),
    (rf"compute min coins for amount={_V} with coins={_LIST}",
     lambda m: f"coins = {m[2]}\ndp = [0] + [float('inf')] * n\nfor i in range(1, n + 1):\n    for c in coins:\n"
               "        if c <= i and dp[i - c] + 1 < dp[i]:\n            dp[i] = dp[i - c] + 1\nprint(dp[n])"),
    (rf"compute pow\({_INT}, {_V}, (\d+)\) using modular exponentiation loop",
     lambda m: f"base, exp, mod, result = {m[1]} % {m[3]}, n, {m[3]}, 1\nwhile exp > 0:\n"
               "    if exp % 2 == 1:\n        result = result * base % mod\n    base = base * base % mod\n"
               "    exp //= 2\nprint(result)"),
    (rf"compute the {_V}-th Fibonacci number",
     lambda m: "a, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)"),
    (rf"compute the {_V}-th triangular number T\([xy]\)=[xy]\*\([xy]\+1\)/2 then count its divisors",
     lambda m: _COUNT_DIVISORS + "print(count_divisors(n * (n + 1) // 2))"),
    (rf"count primes up to {_V} using sieve of Eratosthenes",
     lambda m: "if n < 2:\n    print(0)\nelse:\n    sieve = [True] * (n + 1)\n    sieve[0] = sieve[1] = False\n"
               "    for i in range(2, int(n**0.5) + 1):\n        if sieve[i]:\n"
               "            for j in range(i * i, n + 1, i):\n                sieve[j] = False\n    print(sum(sieve))"),
]]


def step_code(description: str, var: str, value: str) -> str:
    """The program for one prose step, with ``var`` (and ``n``) bound to the previous result."""
    try:
        literal = repr(int(value))
    except ValueError:
        literal = repr(value)  # a non-integer result is passed on as a string
    for pattern, build in PROSE:
        m = pattern.match(description.strip())
        if m:
            return f"{var} = n = {literal}\n{build(m)}"
    raise OracleParseError(f"unknown step description: {description!r}")


def _run(call: CallFn, code: str) -> str:
    out = call("run_code", {"code": code})
    return out["result"]


def _code_block(instruction: str) -> str:
    m = _FENCE.search(instruction)
    if not m:
        raise OracleParseError("no ``` code block in the instruction")
    return m.group(1)


def solve(task: Task, call: CallFn) -> str:
    return _run(call, _code_block(task.instruction))


def solve_multihop(task: Task, call: CallFn) -> str:
    m = _STEPS.search(task.instruction)
    if not m:
        raise OracleParseError("not a three-step code execution chain")
    x = _run(call, _code_block(task.instruction))
    y = _run(call, step_code(m.group(1), "x", x))
    return _run(call, step_code(m.group(2), "y", y))


SOLVERS = {("CodeExecutorEnv", False): solve, ("CodeExecutorEnv", True): solve_multihop}
