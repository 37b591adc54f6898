"""RegexMatchEnv (docs/guide.md#when2tool-environments): Python ``re`` findall / search / match / sub on
model-given input.

**Backtracking guard.** Python's ``re`` cannot be interrupted from another thread, and a model can
send a pattern that backtracks exponentially (``(a+)+$`` on 30 ``a``s and a ``b``) or
polynomially with a high degree (``a*a*a*b`` on 5000 ``a``s); the original would hang. Each
call therefore gets a cheap static worst-case estimate (:func:`backtracking_bound`, from the
parsed pattern and the text length). When the bound is small, which covers all but two When2Tool
tasks (the largest bound is ~4*10^7 steps, for ``<(\\w+)>[^<]+</\\1>`` on a hard text), the match runs
in-process, exactly as the original. Otherwise it runs in a fresh sandboxed interpreter
(:func:`sandbox.run_python`, same interpreter, so identical ``re`` semantics) under a wall-clock
limit, and an over-long match raises ``TimeoutError``, which the runtime reports as
``[TOOL_RUNTIME_ERROR] TimeoutError: ...`` (as any exception a tool raises). The estimate is deliberately
conservative: a false alarm only costs one subprocess (~60 ms), never a different answer.

**Operation name** (as the original): stripped and lowercased for matching; only a missing or
empty ``operation`` means ``findall``, so a whitespace-only one is unknown
(``Unknown operation:    . Use ...``), and the message quotes the operation as the caller wrote it
(``Unknown operation: Replace. ...``). Non-string arguments fail with Python's own error, as there.
"""
from __future__ import annotations

import ast
import inspect
import math
import re
from typing import Any, ClassVar

from . import regex_worker
from .base import ToolEnvironment
from .sandbox import SandboxLimits, run_python

try:  # CPython's regex parser (private, but stable across 3.11+); without it every call is "risky"
    from re import _constants as _C
    from re import _parser as _P
except ImportError:  # pragma: no cover - other interpreters
    _C = _P = None

SUB_SEPARATOR = "|||"
OPERATIONS = ("findall", "search", "match", "sub")
# Worst-case regex-engine steps allowed in-process. Measured: shapes whose bound is ~10^8
# (a*a*a*b on 155 "a"s, \w*\w*\w*= on 155, .*.*= on 580) take 0.05-0.2 s.
IN_PROCESS_STEP_BUDGET = 10**8
# A bounded repeat with at most this many iterations is costed by enumeration; above it, it is
# treated like an unbounded one.
SMALL_REPEAT = 10

# A cost is (log c, k): at most c * (ways to split the text among k unbounded repeats) paths
# through the pattern from one start position. Logs, so that no product can overflow. None marks
# an exponential shape.
_ONE = (0.0, 0)


def _mul(a, b):
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])


def _cost(items: Any, refs: list) -> Any:
    """Backtracking paths through ``items`` as a cost ``(log c, k)``, or None if exponential.
    Back-references do not branch, but comparing one is linear work, so they are noted in
    ``refs`` and charged once by the caller."""
    total: Any = _ONE
    for op, av in items:
        if op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT):
            lo, hi, body = av
            inner = _cost(body, refs)
            if hi > SMALL_REPEAT:  # includes MAXREPEAT (unbounded)
                # A repeated body that can itself match in several ways ((a+)+, (a|aa)*): exponential.
                part = (0.0, 1) if inner == _ONE else None
            else:
                part = None if inner is None else (inner[0] * hi + math.log(hi - lo + 1), inner[1] * hi)
        elif op == _C.SUBPATTERN:
            part = _cost(av[3], refs)
        elif op == _C.ATOMIC_GROUP:
            part = _cost(av, refs)
        elif op in (_C.ASSERT, _C.ASSERT_NOT):
            part = _cost(av[1], refs)
        elif op in (_C.BRANCH, _C.GROUPREF_EXISTS):
            alts = av[1] if op == _C.BRANCH else [av[1], av[2] or []]
            costs = [_cost(alt, refs) for alt in alts]
            # sum_i c_i * S(k_i) <= len * max_i c_i * S(max_i k_i)
            part = None if None in costs else (max(c for c, _ in costs) + math.log(len(costs)),
                                               max(k for _, k in costs))
        else:
            if op == _C.GROUPREF:
                refs.append(av)
            part = _ONE  # a literal, class, anchor or back-reference: one way to match
        total = _mul(total, part)
        if total is None:
            return None
    return total


def backtracking_bound(pattern: str, text_length: int) -> float:
    """Estimated worst-case engine steps for scanning a text of ``text_length`` characters
    (every start position, as findall/search/sub do); ``math.inf`` when unknown or exponential.

    k unbounded repeats in sequence can split n characters in C(n+k, k) <= (n+k)^k / k! ways."""
    if _P is None:
        return math.inf
    n = text_length
    refs: list = []
    try:
        cost = _cost(list(_P.parse(pattern)), refs)
    except (re.error, RecursionError, ValueError, TypeError, OverflowError):
        return math.inf
    if cost is None:
        return math.inf
    log_c, k = cost
    log_steps = (math.log(n + 1) * (2 if refs else 1) + log_c
                 + k * math.log(n + k or 1) - math.lgamma(k + 1))
    return math.exp(log_steps) if log_steps < 700 else math.inf


# The sandboxed run: the worker module's source plus a call of its ``main`` on the inputs as literals.
_WORKER_SOURCE = inspect.getsource(regex_worker)


class RegexMatchEnv(ToolEnvironment):
    name = "RegexMatchEnv"

    # Wall-clock limit for a match that goes to the sandbox (class attribute so tests can lower it).
    risky_time_limit_s: ClassVar[float] = 2.0

    def regex_match(self, pattern: str, text: str, operation: str | None = "findall") -> dict:
        # As the original: only a missing/empty operation defaults to findall; a whitespace-only one
        # strips to "" and is unknown, and the message quotes the caller's spelling.
        op = (operation or "findall").strip().lower()
        if op not in OPERATIONS:
            return {"success": False, "message": f"Unknown operation: {operation}. Use findall, search, match, or sub."}
        regex, repl = pattern, None
        if op == "sub":
            # Plain `in`/`split` on purpose: a non-string pattern fails with Python's own error
            # (e.g. "argument of type 'int' is not iterable"), exactly as in the original.
            if SUB_SEPARATOR not in pattern:
                return {"success": False, "message": "For sub operation, use pattern format: 'regex|||replacement'"}
            regex, repl = pattern.split(SUB_SEPARATOR, 1)
        try:
            re.compile(regex)  # syntax errors are reported before anything runs
            status, out = self._run(op, regex, text, repl)
        except re.error as exc:
            return {"success": False, "message": f"Regex error: {exc}"}
        if status == "error":
            return {"success": False, "message": f"Regex error: {out}"}
        if op == "findall":
            return {"success": True, "result": out, "match_count": len(out), "pattern": pattern,
                    "text_length": len(text)}
        if op == "sub":
            return {"success": True, "result": out}
        if out is None:
            return {"success": True, "result": None}
        group0, groups, span = out
        return {"success": True, "result": group0, "groups": list(groups), "span": list(span)}

    def _run(self, op: str, regex: Any, text: Any, repl: str | None) -> tuple[str, Any]:
        """``("ok", value)`` or ``("error", re.error message)``; ``value`` is the findall list, the
        sub string, or ``(group0, groups, span)`` / ``None`` for search and match."""
        if (isinstance(regex, str) and isinstance(text, str)
                and backtracking_bound(regex, len(text)) > IN_PROCESS_STEP_BUDGET):
            return self._run_sandboxed(op, regex, text, repl)
        # Safe (or a type error the re module reports itself): run in-process like the original.
        return "ok", regex_worker.apply(op, regex, text, repl)

    def _run_sandboxed(self, op: str, regex: str, text: str, repl: str | None) -> tuple[str, Any]:
        limit = self.risky_time_limit_s
        # Output can legitimately be large (a lookahead capture per position: ~n^2/2 characters).
        limits = SandboxLimits(wall_s=limit, cpu_s=limit, memory_mb=1024, max_output_bytes=64_000_000)
        result = run_python(f"{_WORKER_SOURCE}\nmain({(op, regex, text, repl)!r})\n", limits)
        if result.error_kind == "timeout":
            raise TimeoutError(f"regex evaluation exceeded the {limit:g}s limit (catastrophic backtracking)")
        if result.error_kind == "memory":
            raise MemoryError("regex evaluation exceeded the memory limit")
        if result.error_kind is not None:
            raise RuntimeError(f"regex worker failed: {result.error}")
        # The child printed the repr of plain literals (str, None, ints, tuples, lists).
        return ast.literal_eval(result.stdout)
