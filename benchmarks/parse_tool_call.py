"""Tool-call parsing time against output length (measure only): ``parse_tool_call`` on 7 KB, 70 KB and 700 KB
model outputs of several shapes, to show the time grows linearly with the text.

    python benchmarks/parse_tool_call.py [--repeats 5]

A turn this long is far past any token budget, but a model looping until it is cut off, or a server passing a
client's text through, can produce one, and the parser sees every turn. Each shape is repeated to the size:
prose with a real call at its end (the parse must find it), code and string templates (many ``{...}`` that
cannot be calls), a degenerate loop of one broken call, a repeated and a distinct-per-span dict with a
``'name'`` key that no decoder accepts (the adversarial case: every span must be decoded). Per shape it prints
the best of ``--repeats`` times at each size, the ratios 70 KB / 7 KB and 700 KB / 70 KB (10 when the time is
linear in the length) and the decoder runs (``json.loads`` / ``ast.literal_eval`` calls) at 700 KB.
"""
from __future__ import annotations

import argparse
import ast
import json
import time

from data_builders.agent import parsing
from data_builders.agent.parsing import parse_tool_call

SIZES = (7_000, 70_000, 700_000)
PROSE = ("First I add the weights of the crates, then I compare the total with the truck's limit of 2,000 kg. "
         "The calculator handles the sum; no other tool is needed here.\n")
CALL = '\n<tool_call>{"name": "evaluate_expression", "arguments": {"expression": "3+4+5"}}</tool_call>'
CODE = ('def f(x):\n    d = {"a": 1, "b": [x]}\n    s = {x, 2}\n    print(f"{x} -> {d[0]:>8}")\n'
        '    return {k: v for k, v in d.items()}\n')


def repeated(unit: str, size: int) -> str:
    return unit * (size // len(unit))


def distinct(size: int) -> str:
    parts, n, i = [], 0, 0
    while n < size:
        parts.append("{'name': a%d}" % i)
        n, i = n + len(parts[-1]), i + 1
    return "".join(parts)


SHAPES = {
    "prose + call at the end": lambda n: repeated(PROSE, n - len(CALL)) + CALL,
    "python code": lambda n: repeated(CODE, n),
    "string templates": lambda n: repeated("Dear {name}, your order {order_id:>8} ships {date}. ", n),
    "looped broken call": lambda n: repeated('<tool_call>{"name": "evaluate_expression", "arguments": '
                                             '{"expression": "1+1"}</tool_call>\n', n),
    "repeated {'name': a}": lambda n: repeated("{'name': a}", n),
    "distinct {'name': aN}": distinct,
}


class Counting:
    """A module stand-in counting calls of its decoding functions (the parser's decode attempts)."""

    def __init__(self, module, name: str):
        self.module, self.calls, fn = module, 0, getattr(module, name)

        def counted(*a, **k):
            self.calls += 1
            return fn(*a, **k)
        setattr(self, name, counted)

    def __getattr__(self, name):
        return getattr(self.module, name)


def best_seconds(text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        parse_tool_call(text)
        times.append(time.perf_counter() - start)
    return min(times)


def decoder_runs(text: str) -> int:
    counters = Counting(json, "loads"), Counting(ast, "literal_eval")
    parsing.json, parsing.ast = counters
    try:
        parse_tool_call(text)
    finally:
        parsing.json, parsing.ast = json, ast
    return sum(c.calls for c in counters)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per size; the best is reported")
    args = ap.parse_args()
    print(f"{'shape':<26}" + "".join(f"{f'{n // 1000} KB':>11}" for n in SIZES)
          + f"{'70/7':>8}{'700/70':>8}{'decodes@700KB':>15}")
    for name, make in SHAPES.items():
        texts = [make(n) for n in SIZES]
        assert (parse_tool_call(texts[0]) is not None) == name.startswith("prose")
        ms = [1e3 * best_seconds(t, args.repeats) for t in texts]
        ratios = [b / a if a > 0 else float("nan") for a, b in zip(ms, ms[1:])]
        print(f"{name:<26}" + "".join(f"{m:>8.2f} ms" for m in ms) + "".join(f"{r:>8.1f}" for r in ratios)
              + f"{decoder_runs(texts[-1]):>15}")


if __name__ == "__main__":
    main()
