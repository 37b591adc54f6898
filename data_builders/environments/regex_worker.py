"""The regex operation of ``RegexMatchEnv``, one function for both of its paths: ``regex_match.py`` calls
:func:`apply` in-process when the backtracking bound is small, and otherwise runs this file's source in the
sandbox with a call to :func:`main` appended (the inputs go in as literals, the answer comes out as the repr
of a literal), so both paths run the same code and cannot drift apart. Standard library only: the sandbox
child has nothing else.
"""
from __future__ import annotations

import re


def apply(op: str, regex, text, repl):
    """The findall list, the sub string, or ``(group0, groups, span)`` / ``None`` for search and match;
    ``re.error`` propagates."""
    if op == "findall":
        return re.findall(regex, text)
    if op == "sub":
        return re.sub(regex, repl, text)
    m = getattr(re, op)(regex, text)
    return None if m is None else (m.group(0), m.groups(), m.span())


def main(args: tuple) -> None:
    """The sandboxed run: prints ``("ok", value)`` or ``("error", re.error message)``."""
    op, regex, text, repl = args
    try:
        print(repr(("ok", apply(op, regex, text, repl))))
    except re.error as exc:
        print(repr(("error", str(exc))))
