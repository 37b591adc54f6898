"""CodeExecutorEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): "What is the exact output of this Python
code?"

Easy snippets are one-liners (built-ins, string methods, arithmetic), medium ones comprehensions,
small loops and collection methods, hard ones loops, recursion and dynamic programming, the same
families as When2Tool's but with content drawn here.

Each template returns ``(code, stdout)``. The stdout is worked out in plain Python next to the
code text, never by running the snippet (running each one in the sandbox would cost ~0.1 s per
task); for the hard families it uses a different method from the snippet (a closed form, an
iterative loop for a recursive snippet, patience sorting for the LIS DP), so the tests that run
generated snippets in the sandbox and compare with the gold check both.

:data:`MULTIHOP_GENERATOR` (``builtin.generate_multihop``, or ``generate_builtin(hops="multi")``) builds
When2Tool-style three-step chains (env 18) from the same snippets and When2Tool's step templates.
"""
from __future__ import annotations

import bisect
import math
import random
from collections import Counter
from typing import Callable

from .common import Draw, EnvGenerator

TOOLS = ("run_code",)

WORDS = ("apple", "banana", "cherry", "dragon", "python", "silver", "garden", "planet", "rocket", "window",
         "orange", "purple", "castle", "forest", "bridge", "summer", "winter", "coffee", "pencil", "marble",
         "hello", "world", "tiger", "lemon", "piano", "river", "cloud", "stone", "music", "light")
MIXED = ("Hello World", "Good Morning", "Open Source", "Data Science", "Deep Learning", "New York City",
         "Big Red Bus", "Quick Brown Fox", "Happy New Year", "Green Tea Latte")

Template = Callable[[random.Random], tuple[str, str]]


def _word(r: random.Random) -> str:
    return r.choice(WORDS)


def _ints(r: random.Random, n: int, lo: int, hi: int) -> list[int]:
    return [r.randint(lo, hi) for _ in range(n)]


# --------------------------------------------------------------------------- easy: one-liners

def _e_arith(r):
    a, b = r.randint(2, 99), r.randint(2, 40)
    op = r.choice(["+", "-", "*", "//", "%"])
    value = {"+": a + b, "-": a - b, "*": a * b, "//": a // b, "%": a % b}[op]
    return f"print({a} {op} {b})", str(value)


def _e_power(r):
    a, b = r.randint(2, 9), r.randint(2, 10)
    if r.random() < 0.5:
        return f"print({a} ** {b})", str(a ** b)
    return f"print(pow({a}, {b}))", str(a ** b)


def _e_compare(r):
    a, b = r.randint(1, 20), r.randint(1, 20)
    op = r.choice(["<", ">", "==", "!=", ">=", "<="])
    value = {"<": a < b, ">": a > b, "==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b}[op]
    return f"print({a} {op} {b})", str(value)


def _e_str_case(r):
    w = _word(r)
    method = r.choice(["upper", "capitalize", "title"])
    value = {"upper": w.upper(), "capitalize": w[0].upper() + w[1:], "title": w[0].upper() + w[1:]}[method]
    return f"print('{w}'.{method}())", value


def _e_str_lower(r):
    w = _word(r).upper()
    return f"print('{w}'.lower())", "".join(chr(ord(c) + 32) for c in w)


def _e_len(r):
    if r.random() < 0.5:
        w = _word(r)
        return f"print(len('{w}'))", str(len(w))
    xs = _ints(r, r.randint(0, 7), 1, 20)
    return f"print(len({xs}))", str(len(xs))


def _e_index(r):
    w = _word(r)
    i = r.randint(-len(w), len(w) - 1)
    return f"print('{w}'[{i}])", w[i % len(w)]


def _e_replace(r):
    w = _word(r)
    old = r.choice(sorted(set(w)))
    new = r.choice([c for c in "xyzq" if c != old])
    return f"print('{w}'.replace('{old}', '{new}'))", "".join(new if c == old else c for c in w)


def _e_count(r):
    w = _word(r)
    c = r.choice(sorted(set(w)) + ["z"])
    return f"print('{w}'.count('{c}'))", str(sum(1 for ch in w if ch == c))


def _e_find(r):
    w = _word(r)
    c = r.choice(sorted(set(w)) + ["q"])
    return f"print('{w}'.find('{c}'))", str(next((i for i, ch in enumerate(w) if ch == c), -1))


def _e_affix(r):
    w = _word(r)
    k = r.randint(1, 3)
    if r.random() < 0.5:
        part = w[:k] if r.random() < 0.6 else _word(r)[:k]
        return f"print('{w}'.startswith('{part}'))", str(w[:k] == part)
    part = w[-k:] if r.random() < 0.6 else _word(r)[-k:]
    return f"print('{w}'.endswith('{part}'))", str(w[-k:] == part)


def _e_join(r):
    ws = r.sample(WORDS, r.randint(2, 4))
    sep = r.choice(["-", ", ", " ", "+", ""])
    return f"print('{sep}'.join({ws}))", sep.join(ws)


def _e_repeat(r):
    w, k = _word(r)[:r.randint(1, 3)], r.randint(2, 4)
    return f"print('{w}' * {k})", "".join([w] * k)


def _e_base(r):
    n = r.randint(2, 300)
    fn = r.choice(["bin", "hex", "oct"])
    base, prefix = {"bin": (2, "0b"), "hex": (16, "0x"), "oct": (8, "0o")}[fn]
    digits, m = "", n
    while m:
        digits = "0123456789abcdef"[m % base] + digits
        m //= base
    return f"print({fn}({n}))", prefix + digits


def _e_minmax(r):
    xs = _ints(r, r.randint(3, 5), 1, 50)
    fn = r.choice(["max", "min", "sum"])
    value = {"max": max(xs), "min": min(xs), "sum": sum(xs)}[fn]
    if fn == "sum":
        return f"print(sum({xs}))", str(value)
    return f"print({fn}({', '.join(map(str, xs))}))", str(value)


def _e_sorted(r):
    xs = _ints(r, r.randint(3, 6), 1, 30)
    return f"print(sorted({xs}))", "[" + ", ".join(str(x) for x in sorted(xs)) + "]"


def _e_range(r):
    n = r.randint(1, 8)
    return f"print(list(range({n})))", "[" + ", ".join(str(i) for i in range(n)) + "]"


def _e_chr_ord(r):
    k = r.randint(0, 25)
    if r.random() < 0.5:
        return f"print(chr({65 + k}))", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[k]
    return f"print(ord('{'abcdefghijklmnopqrstuvwxyz'[k]}'))", str(97 + k)


def _e_convert(r):
    n = r.randint(1, 500)
    kind = r.choice(["int", "float", "str", "abs"])
    if kind == "int":
        return f"print(int('{n}'))", str(n)
    if kind == "float":
        return f"print(float({n}))", f"{n}.0"
    if kind == "str":
        return f"print(str({n}) + '{n % 10}')", f"{n}{n % 10}"
    return f"print(abs(-{n}))", str(n)


def _e_in(r):
    xs = _ints(r, r.randint(3, 5), 1, 9)
    v = r.randint(1, 9)
    return f"print({v} in {xs})", str(any(x == v for x in xs))


def _e_bool(r):
    a, b = r.choice([True, False]), r.choice([True, False])
    op = r.choice(["and", "or"])
    value = (a and b) if op == "and" else (a or b)
    return f"print({a} {op} {b})", str(value)


def _e_chain(r):
    a, b, c = r.randint(2, 20), r.randint(2, 6), r.randint(1, 15)
    return f"x = {a}; y = x * {b}; print(y - {c})", str(a * b - c)


EASY: tuple[Template, ...] = (_e_arith, _e_power, _e_compare, _e_str_case, _e_str_lower, _e_len, _e_index,
                              _e_replace, _e_count, _e_find, _e_affix, _e_join, _e_repeat, _e_base, _e_minmax,
                              _e_sorted, _e_range, _e_chr_ord, _e_convert, _e_in, _e_bool, _e_chain)


# --------------------------------------------------------------------------- medium: comprehensions, loops

def _list_str(xs) -> str:
    return "[" + ", ".join(repr(x) for x in xs) + "]"


def _m_filter_comp(r):
    lo, hi, k = r.randint(0, 5), r.randint(15, 40), r.randint(2, 7)
    keep = [x for x in range(lo, hi) if x % k == 0]
    return f"print([x for x in range({lo}, {hi}) if x % {k} == 0])", _list_str(keep)


def _m_map_comp(r):
    n, p = r.randint(3, 8), r.choice([2, 3])
    vals = [1] * n
    for i in range(n):
        vals[i] = i * i if p == 2 else i * i * i
    return f"print([x**{p} for x in range({n})])", _list_str(vals)


def _m_dict_comp(r):
    n, k = r.randint(3, 6), r.randint(2, 5)
    body = ", ".join(f"{i}: {i * k}" for i in range(n))
    return f"print({{i: i * {k} for i in range({n})}})", "{" + body + "}"


def _m_sum_gen(r):
    n, k = r.randint(10, 60), r.randint(2, 5)
    total = 0
    for x in range(1, n + 1):
        if x % k == 0:
            total += x
    return f"print(sum(x for x in range(1, {n + 1}) if x % {k} == 0))", str(total)


def _m_loop_append(r):
    n, k = r.randint(8, 20), r.randint(2, 4)
    code = f"result = []\nfor i in range({n}):\n    if i % {k} == 0:\n        result.append(i)\nprint(result)"
    return code, _list_str(range(0, n, k))


def _m_loop_sum_squares(r):
    n = r.randint(4, 15)
    return f"s = 0\nfor i in range({n}):\n    s += i * i\nprint(s)", str((n - 1) * n * (2 * n - 1) // 6)


def _m_loop_product(r):
    n = r.randint(4, 10)
    return f"p = 1\nfor i in range(1, {n + 1}):\n    p *= i\nprint(p)", str(math.factorial(n))


def _m_sorted_chars(r):
    w = _word(r)
    return f"print(''.join(sorted('{w}')))", "".join(sorted(w))


def _m_reverse(r):
    w = _word(r)
    if r.random() < 0.5:
        return f"print('{w}'[::-1])", "".join(reversed(w))
    return f"print(''.join(reversed('{w}')))", "".join(w[i] for i in range(len(w) - 1, -1, -1))


def _m_swapcase(r):
    s = r.choice(MIXED)
    return f"print('{s}'.swapcase())", "".join(c.lower() if c.isupper() else c.upper() for c in s)


def _m_case_filter(r):
    s = r.choice(MIXED)
    if r.random() < 0.5:
        return f"print([c for c in '{s}' if c.isupper()])", _list_str([c for c in s if "A" <= c <= "Z"])
    return f"print(sum(1 for c in '{s}' if c.islower()))", str(sum(1 for c in s if "a" <= c <= "z"))


def _m_zip(r):
    n = r.randint(2, 4)
    a, b = _ints(r, n, 1, 9), _ints(r, n, 1, 9)
    pairs = ", ".join(f"({x}, {y})" for x, y in zip(a, b))
    return f"print(list(zip({a}, {b})))", f"[{pairs}]"


def _m_enumerate(r):
    w = _word(r)[:r.randint(2, 4)]
    return f"print(list(enumerate('{w}')))", "[" + ", ".join(f"({i}, {c!r})" for i, c in enumerate(w)) + "]"


def _m_set_len(r):
    w = _word(r)
    return f"print(len(set('{w}')))", str(len({c: None for c in w}))


def _m_sorted_rev(r):
    xs = _ints(r, r.randint(5, 9), 1, 50)
    return f"print(sorted({xs}, reverse=True))", _list_str(sorted(xs)[::-1])


def _m_zfill(r):
    n, width = r.randint(1, 999), r.randint(4, 7)
    return f"print('{n}'.zfill({width}))", str(n).rjust(width, "0")


def _m_char_count(r):
    w = _word(r)
    code = f"d = {{}}\nfor c in '{w}':\n    d[c] = d.get(c, 0) + 1\nprint(d)"
    counts = Counter(w)  # insertion-ordered by first occurrence, like the snippet's dict
    return code, "{" + ", ".join(f"{c!r}: {n}" for c, n in counts.items()) + "}"


def _m_map_filter(r):
    xs = _ints(r, r.randint(4, 6), 1, 12)
    if r.random() < 0.5:
        k = r.randint(2, 5)
        return f"print(list(map(lambda x: x * {k}, {xs})))", _list_str([x * k for x in xs])
    t = r.randint(3, 9)
    return f"print(list(filter(lambda x: x > {t}, {xs})))", _list_str([x for x in xs if x > t])


def _m_list_ops(r):
    xs = _ints(r, r.randint(4, 6), 1, 20)
    op = r.choice(["append", "insert", "pop"])
    out = list(xs)
    if op == "append":
        v = r.randint(1, 99)
        out = out + [v]
        return f"a = {xs}; a.append({v}); print(a)", _list_str(out)
    if op == "insert":
        i, v = r.randint(0, len(xs)), r.randint(1, 99)
        out = out[:i] + [v] + out[i:]
        return f"a = {xs}; a.insert({i}, {v}); print(a)", _list_str(out)
    i = r.randrange(len(xs))
    out = out[:i] + out[i + 1:]
    return f"a = {xs}; a.pop({i}); print(a)", _list_str(out)


def _m_nested_comp(r):
    n, m = r.randint(2, 4), r.randint(2, 4)
    vals = [i * j for i in range(1, n + 1) for j in range(1, m + 1)]
    return f"print([i*j for i in range(1, {n + 1}) for j in range(1, {m + 1})])", _list_str(vals)


MEDIUM: tuple[Template, ...] = (_m_filter_comp, _m_map_comp, _m_dict_comp, _m_sum_gen, _m_loop_append,
                                _m_loop_sum_squares, _m_loop_product, _m_sorted_chars, _m_reverse, _m_swapcase,
                                _m_case_filter, _m_zip, _m_enumerate, _m_set_len, _m_sorted_rev, _m_zfill,
                                _m_char_count, _m_map_filter, _m_list_ops, _m_nested_comp)


# --------------------------------------------------------------------------- hard: loops, recursion, DP

def _fib(n: int) -> int:
    """F(0)=0, F(1)=1 by fast doubling (a different method from every snippet below)."""
    def pair(k: int) -> tuple[int, int]:
        if k == 0:
            return 0, 1
        a, b = pair(k // 2)
        c, d = a * (2 * b - a), a * a + b * b
        return (d, c + d) if k % 2 else (c, d)
    return pair(n)[0]


def _h_triple_loop(r):
    n = r.randint(3, 12)
    code = (f"s = 0\nfor i in range({n}):\n    for j in range(i, {n}):\n        for k in range(j, {n}):\n"
            f"            s += 1\nprint(s)")
    return code, str(math.comb(n + 2, 3))  # multisets of size 3 from n values


def _h_table(r):
    rows, cols = r.randint(3, 10), r.randint(3, 12)
    code = (f"t = [[0]*{cols} for _ in range({rows})]\nfor i in range({rows}):\n    for j in range({cols}):\n"
            f"        t[i][j] = i * j + i + j\n"
            f"s = sum(t[i][j] for i in range({rows}) for j in range({cols}))\nprint(s)")
    si, sj = rows * (rows - 1) // 2, cols * (cols - 1) // 2
    return code, str(si * sj + si * cols + sj * rows)  # closed form of the double sum


def _h_factorial(r):
    n = r.randint(8, 20)
    return f"def f(n):\n    return 1 if n <= 1 else n * f(n-1)\nprint(f({n}))", str(math.factorial(n))


def _h_fib_dp(r):
    n = r.randint(10, 30)
    code = (f"dp = [0] * ({n}+1)\ndp[0] = dp[1] = 1\nfor i in range(2, {n}+1):\n    dp[i] = dp[i-1] + dp[i-2]\n"
            f"print(dp[{n}])")
    return code, str(_fib(n + 1))  # dp[i] = F(i+1)


def _h_fib_memo(r):
    n = r.randint(12, 35)
    code = ("memo = {}\ndef fib(n):\n    if n in memo: return memo[n]\n    if n < 2: return n\n"
            f"    memo[n] = fib(n-1) + fib(n-2)\n    return memo[n]\nprint(fib({n}))")
    return code, str(_fib(n))


def _min_coins(coins: list[int], amount: int) -> int:
    """Fewest coins by breadth-first search over amounts (the snippet uses bottom-up DP)."""
    seen, frontier, steps = {0}, [0], 0
    while frontier:
        if amount in frontier:
            return steps
        steps += 1
        frontier = sorted({v + c for v in frontier for c in coins if v + c <= amount} - seen)
        seen.update(frontier)
    raise ValueError("amount unreachable")  # never: coin 1 is always present


def _h_coins(r):
    coins = [1] + sorted(r.sample(range(3, 14), 2))
    amount = r.randint(10, 40)
    code = (f"coins = {coins}\namount = {amount}\ndp = [float('inf')] * (amount+1)\ndp[0] = 0\n"
            "for i in range(1, amount+1):\n    for c in coins:\n        if c <= i and dp[i-c]+1 < dp[i]:\n"
            "            dp[i] = dp[i-c]+1\nprint(dp[amount])")
    return code, str(_min_coins(coins, amount))


def _h_lis(r):
    a = _ints(r, r.randint(6, 9), 1, 12)
    code = (f"a = {a}\nn = len(a)\ndp = [1]*n\nfor i in range(1, n):\n    for j in range(i):\n"
            "        if a[j] < a[i] and dp[j]+1 > dp[i]:\n            dp[i] = dp[j]+1\nprint(max(dp))")
    tails: list[int] = []  # patience sorting: strictly increasing subsequence length
    for x in a:
        i = bisect.bisect_left(tails, x)
        tails[i:i + 1] = [x]
    return code, str(len(tails))


def _h_collatz(r):
    start = r.randint(6, 99)
    code = (f"n = {start}\nsteps = 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
            "    steps += 1\nprint(steps)")
    n, steps = start, 0
    while n > 1:
        n, steps = (n >> 1, steps + 1) if n & 1 == 0 else ((3 * n + 1) >> 1, steps + 2)  # odd: two steps at once
    return code, str(steps)


HARD: tuple[Template, ...] = (_h_triple_loop, _h_table, _h_factorial, _h_fib_dp, _h_fib_memo, _h_coins, _h_lis,
                              _h_collatz)

TEMPLATES = {"easy": EASY, "medium": MEDIUM, "hard": HARD}


def instruction_for(code: str) -> str:
    return (f"What is the exact output of this Python code?\n```\n{code}\n```\n"
            "Answer with only the output, nothing else.")


def make(difficulty: str, r: random.Random) -> Draw:
    code, stdout = r.choice(TEMPLATES[difficulty])(r)
    return instruction_for(code), stdout, {}


GENERATOR = EnvGenerator("CodeExecutorEnv", "code_executor", tools=lambda difficulty: TOOLS, make=make)


# ============================================ multi-hop (env 18, docs/guide.md#when2tool-multi-hop-tasks)
# ``MULTIHOP_GENERATOR`` (``generate_builtin(hops="multi")``) builds When2Tool-style
# three-step chains. Step 1 is code; steps 2 and 3 are prose from When2Tool's step templates, each
# chain family pairing a step-1 snippet with the two step descriptions When2Tool pairs it with (so
# every intermediate value stays in range). Step values are computed here in plain Python.

def _digits(v: int) -> str:
    return str(abs(v))


def _popcount(v: int) -> int:
    count = 0
    while v:
        v &= v - 1
        count += 1
    return count


def _factor_exponents(v: int) -> list[int]:
    exps, p = [], 2
    while p * p <= v:
        e = 0
        while v % p == 0:
            v //= p
            e += 1
        if e:
            exps.append(e)
        p += 1
    return exps + ([1] if v > 1 else [])


def _divisor_count(v: int) -> int:
    return math.prod(e + 1 for e in _factor_exponents(v)) if v > 0 else 0


def _proper_divisor_sum(v: int) -> int:
    if v == 1:
        return 0
    return sum(d + (v // d if d * d != v and d != 1 else 0) for d in range(1, math.isqrt(v) + 1) if v % d == 0)


def _collatz(v: int) -> int:
    steps = 0
    while v != 1:
        v = 3 * v + 1 if v % 2 else v // 2
        steps += 1
    return steps


def _min_coins_1ab(a: int, b: int, amount: int) -> int:
    """Fewest coins from {1, a, b} (1 < a < b): for each count of b-coins, the rest is paid greedily,
    which is optimal for the two coins {1, a}."""
    return min(k + (amount - k * b) // a + (amount - k * b) % a for k in range(amount // b + 1))


def _primes_upto(v: int) -> int:
    return sum(1 for k in range(2, v + 1) if all(k % d for d in range(2, math.isqrt(k) + 1)))


def _lis(a: list[int]) -> int:
    tails: list[int] = []
    for x in a:
        i = bisect.bisect_left(tails, x)
        tails[i:i + 1] = [x]
    return len(tails)


# A chain returns (step-1 code, x, step-2 description, y, step-3 description, z), or None to redraw
# (an intermediate value out of the range its next step is meant for).
Chain = Callable[[random.Random], "tuple[str, int, str, int, str, int] | None"]


def _easy_chain(r: random.Random):
    first, second, third = r.choice([("*", "+", "*"), ("*", "-", "+"), ("**", "%", "*"), ("+", "*", "-"),
                                     ("+", "+", "*"), ("-", "*", "+")])
    a, b = (r.randint(2, 9), r.randint(3, 8)) if first == "**" else (r.randint(2, 25), r.randint(2, 15))
    if first == "-":
        a += b
    x = {"*": a * b, "**": a ** b, "+": a + b, "-": a - b}[first]

    def apply(op: str, v: int, k: int) -> int:
        return {"+": v + k, "-": v - k, "*": v * k, "%": v % k}[op]

    k2 = r.randint(11, 99) if second == "%" else r.randint(2, 12)
    y = apply(second, x, k2)
    k3 = r.randint(2, 12)
    return (f"print({a} {first} {b})", x, f"print(x {second} {k2})", y, f"print(y {third} {k3})",
            apply(third, y, k3))


PHRASES = ("hello world", "machine learning", "neural network", "open source", "data science", "python code")
LONG_WORDS = ("optimization", "augmentation", "benchmark", "regression", "transformer", "probability",
              "generalization", "calibration", "inference", "embedding")


def _medium_chain(r: random.Random):
    family = r.randrange(12)
    nums = lambda k, lo=1, hi=60: _ints(r, k, lo, hi)  # noqa: E731 - local shorthand
    if family == 0:
        fs = nums(r.randint(3, 5), 2, 9)
        x = math.prod(fs)
        y = _popcount(x)
        return (f"print({' * '.join(map(str, fs))})", x, "convert x to binary and count the number of 1-bits", y,
                "compute sum of factorials from 0! to y!", sum(math.factorial(i) for i in range(y + 1)))
    if family == 1:
        w, vals = r.choice(LONG_WORDS), nums(12, 2, 15)
        x = len(w)
        y = sum(vals[:x])
        return (f"print(len(''.join(reversed('{w}'))))", x, f"take first x elements of {vals} and sum them", y,
                "for each digit char in str(y), compute ord(c)-ord('0'), then sum", sum(int(c) for c in str(y)))
    if family == 2:
        w, vals, idx = r.choice(LONG_WORDS + WORDS), sorted(nums(5, 2, 20)), r.randint(0, 5)
        x = len(w)
        y = sorted(vals + [x])[idx]
        return (f"print(len('{w}'))", x, f"insert x into {vals}, sort, and take the element at index {idx}", y,
                "find the most frequent digit in y (return its count)", max(Counter(_digits(y)).values()))
    if family == 3:
        lo, hi, k, off = r.randint(1, 10), r.randint(30, 90), r.randint(3, 9), r.randint(1, 3)
        x = sum(1 for v in range(lo, hi) if v % k == 0)
        y = sum(i * (i + off) for i in range(x))
        return (f"print(len([x for x in range({lo}, {hi}) if x % {k} == 0]))", x,
                f"zip range(x) with range({off}, x+{off}), sum element-wise products", y,
                "count the number of unique digits in y", len(set(_digits(y))))
    if family == 4:
        w, t = r.choice(LONG_WORDS + WORDS), r.randint(2, 6)
        x = len(set(w))
        y = sum(v for v in range(1, x + 1) if v % 2)
        return (f"print(len(set('{w}')))", x, "sum all odd numbers from 1 to x (inclusive)", y,
                f"count how many digits of y are greater than {t}", sum(1 for c in _digits(y) if int(c) > t))
    if family == 5:
        vals = nums(r.randint(5, 8))
        x = max(vals) - min(vals)
        y = sum(v * v for v in range(2, x + 1, 2))
        return (f"print(max({vals}) - min({vals}))", x, "sum of squares of even numbers from 2 to x", y,
                "sort the digits of y in descending order and take the largest digit", max(int(c) for c in _digits(y)))
    if family == 6:
        vals, t = nums(r.randint(5, 9), 10, 999), r.randint(2, 6)
        x = min(vals)
        y = sum(i for i, c in enumerate(str(x)) if int(c) > t)
        return (f"print(min({vals}))", x, f"for each digit in str(x), sum the indices where the digit > {t}", y,
                "sort the digits of y in ascending order, join, and convert to int", int("".join(sorted(str(y)))))
    if family == 7:
        vals, k = nums(r.randint(5, 9), 10, 200), r.randint(1, 3)
        x = sorted(vals)[-k]
        y = sum(1 for i in range(1, x) if i * i > x)
        return (f"print(sorted({vals})[-{k}])", x, "count how many i in range(1, x) have i**2 > x", y,
                "compute y squared, then sum its digits", sum(int(c) for c in str(y * y)))
    if family == 8:
        vals, k, d = nums(6, 10, 200), r.randint(0, 5), r.randint(2, 7)
        x = sorted(vals)[k]
        y = sum(1 for i in range(x) if i % d == 0)
        return (f"print(sorted({vals})[{k}])", x, f"count how many integers in range(x) are divisible by {d}", y,
                "compute the sum of digits of y", sum(int(c) for c in str(y)))
    if family == 9:
        phrase = r.choice(PHRASES)
        x = sum(1 for c in phrase if c in "aeiou")
        y = (x - 1) ** 2
        return (f"print(sum(1 for c in '{phrase}' if c in 'aeiou'))", x,
                "build dict {i: i**2 for i in range(x)} and access key x-1", y,
                "reverse the string of y and convert back to int", int(str(y)[::-1]))
    if family == 10:
        vals = nums(r.randint(4, 7), 10, 99)
        x = sum(vals)
        y = sum(int(c) for c in str(x))
        return (f"print(sum({vals}))", x, "sum the digits of x", y,
                "build list of cubes [1^3, 2^3, ..., y^3] and take the last element", y ** 3)
    lo, hi = r.randint(1, 5), r.randint(10, 60)
    x = (lo + hi - 1) * (hi - lo) // 2
    y = sum(1 for c in str(x) if int(c) % 2)
    return (f"print(sum(range({lo}, {hi})))", x, "count the number of odd digits in x", y,
            "compute sum of i*y for i in range(y)", y * y * (y - 1) // 2)


def _hard_chain(r: random.Random):
    family = r.randrange(7)
    if family == 0:
        code, out = _h_coins(r)
        x = int(out)
        evens, a, b = 0, 0, 1
        for _ in range(2 * x):
            evens += a if a % 2 == 0 else 0
            a, b = b, a + b
        arr = _ints(r, r.randint(8, 12), 1, 50)
        y = evens
        return (code, x, "generate first x*2 Fibonacci numbers and sum the even ones", y,
                f"compute LIS of array {arr} with first element replaced by y%50", _lis([y % 50] + arr[1:]))
    if family == 1:
        code, out = _h_factorial(r)
        x = int(out)
        y = _popcount(x)
        return (code, x, "count the number of 1-bits in binary representation of x using a loop", y,
                "count Collatz steps from max(y,2) to 1", _collatz(max(y, 2)))
    if family == 2:
        code, out = _h_fib_dp(r)
        x = int(out)
        y = _collatz(x)
        return (code, x, "count Collatz steps from x to 1", y, "count primes up to y using sieve of Eratosthenes",
                _primes_upto(y))
    if family == 3:
        code, out = _h_fib_memo(r)
        x = int(out)
        y = _proper_divisor_sum(x)
        if y > 200_000:
            return None  # keep the coin DP of step 3 small
        coins = [1] + sorted(r.sample(range(3, 10), 2))
        return (code, x, "compute sum of all proper divisors of x (excluding x itself)", y,
                f"compute min coins for amount=y with coins={coins}", _min_coins_1ab(coins[1], coins[2], y))
    if family == 4:
        code, out = _h_collatz(r)
        x = int(out)
        y = x
        while y >= 10:
            y = sum(int(c) for c in str(y))
        base, mod = r.randint(2, 7), r.choice([97, 101, 103, 107, 109, 113, 127, 131])
        return (code, x, "compute digital root of x (repeatedly sum digits until single digit)", y,
                f"compute pow({base}, y, {mod}) using modular exponentiation loop", pow(base, y, mod))
    if family == 5:
        code, out = _h_triple_loop(r)
        x = int(out)
        y = len(_factor_exponents(x))
        return (code, x, "count distinct prime factors of x via trial division", y,
                "compute the y-th triangular number T(y)=y*(y+1)/2 then count its divisors",
                _divisor_count(y * (y + 1) // 2))
    lo, hi = r.randint(1, 3), r.randint(8, 25)
    code = f"s = 0\nfor i in range({lo}, {hi}):\n    s += i * i\nprint(s)"
    x = (hi - 1) * hi * (2 * hi - 1) // 6 - (lo - 1) * lo * (2 * lo - 1) // 6
    y = _divisor_count(x)
    return code, x, "count the number of divisors of x", y, "compute the y-th Fibonacci number", _fib(y)


CHAINS: dict[str, Chain] = {"easy": _easy_chain, "medium": _medium_chain, "hard": _hard_chain}


def multihop_instruction(code: str, step2: str, step3: str) -> str:
    return (f"Three-step code execution: Step 1: Run the following code. Call the result x.\n```\n{code}\n```\n"
            f"Step 2: Using x, run: {step2}. Call the result y.\nStep 3: Using y, run: {step3}. Call the result z.\n"
            "Return only z.")


def make_multihop(difficulty: str, r: random.Random) -> tuple[str, list[str]]:
    """One chain: (instruction, [x, y, z] as strings)."""
    while True:
        chain = CHAINS[difficulty](r)
        if chain is not None:
            code, x, step2, y, step3, z = chain
            return multihop_instruction(code, step2, step3), [str(x), str(y), str(z)]


def _multihop_draw(difficulty: str, r: random.Random):
    instruction, steps = make_multihop(difficulty, r)
    return instruction, steps[-1], {}, steps


MULTIHOP_GENERATOR = EnvGenerator("CodeExecutorEnv", "code_executor", tools=lambda difficulty: TOOLS,
                                  make=_multihop_draw, multi_hop=True)
