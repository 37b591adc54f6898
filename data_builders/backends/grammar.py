"""Schema-constrained tool calls (``agent.constrained_calls``): the xgrammar structural tag every engine uses.

Once the model opens a call, decoding is held to ``{"name": <one of the task's tools>, "arguments": <that
tool's JSON schema>}`` and the call's closing text; outside calls the text is free. The grammar is
xgrammar's *structural tag* (a maintained grammar engine: the JSON-schema-to-grammar compilation, the
token masks and the trigger handling are its), built here once as plain JSON so that each engine gets
the same one: the HF backend compiles it with xgrammar (:func:`compile_call_grammar`), vLLM takes it as
``StructuredOutputsParams(structural_tag=...)``, a vLLM server as the request's ``structured_outputs``.

Call syntax per toolwise call format (``data_builders/agent/prompts.py`` ``tool_call_text``, which the
parser reads back):

* xml: trigger ``<tool_call>``; ``<tool_call>\\n{"name": "<tool>", "arguments": `` *schema* ``}\\n</tool_call>``
* native: trigger ``{"name": ``; ``{"name": "<tool>", "parameters": `` *schema* ``}``, then the end of the turn

A response prefill may already have opened the call (the hard Probe&Prefill prefill ``<tool_call>\\n``):
then the constraint starts inside the call (:attr:`CallConstraint.opened`), since a grammar only sees the
generated tokens.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..protocol import NATIVE_CALL_OPEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

XGRAMMAR_INSTALL_HINT = ("agent.constrained_calls needs xgrammar: pip install '.[constrained]' "
                         "(or pip install 'xgrammar>=0.2.8' torch==<your torch version>)")

# (trigger, begin before the tool name, begin after it, end) per call format.
CALL_SYNTAX = {
    "xml": (TOOL_CALL_OPEN, TOOL_CALL_OPEN + "\n" + NATIVE_CALL_OPEN, '", "arguments": ', "}\n" + TOOL_CALL_CLOSE),
    "native": ('{"name": ', NATIVE_CALL_OPEN, '", "parameters": ', "}"),
}
# Longest whitespace run allowed inside the arguments JSON. Without a bound a small model can fill
# the rest of max_new_tokens with spaces and newlines that the grammar accepts; 4 still allows
# json.dumps' separators and one level of two-space indentation.
MAX_WHITESPACE = 4


def tool_function(spec: dict) -> dict:
    """The ``{"name", "parameters"}`` part of a tool spec, wrapped (``{"type": "function", "function":
    ...}``, as ``Environment.tool_specs`` gives it) or not."""
    fn = spec.get("function", spec) if isinstance(spec, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"tool spec without a string name: {spec!r}")
    params = fn.get("parameters", {"type": "object"})
    if not isinstance(params, dict):
        raise ValueError(f"tool {fn['name']!r}: parameters must be a JSON schema object, got {params!r}")
    return {"name": fn["name"], "parameters": params}


@dataclass(frozen=True)
class CallConstraint:
    """One prompt's constraint: its tools (specs as rendered in the prompt), the call format, and the part
    of a call the prompt already wrote (``opened``, "" when generation starts outside a call)."""

    tools: tuple
    call_format: str = "xml"
    opened: str = ""

    def __post_init__(self):
        if self.call_format not in CALL_SYNTAX:
            raise ValueError(f"call_format must be one of {tuple(CALL_SYNTAX)}, got {self.call_format!r}")
        if not self.tools:
            raise ValueError("a call constraint needs at least one tool")
        object.__setattr__(self, "tools", tuple(tool_function(t) for t in self.tools))
        if self.opened:
            begins = self._begins()
            if not any(b.startswith(self.opened) and len(b) > len(self.opened) for b in begins.values()):
                raise ValueError(f"the prompt ends inside a call ({self.opened!r}) that no tool's opening continues "
                                 f"(expected a prefix of one of {sorted(begins.values())})")

    @classmethod
    def after(cls, tools: Sequence[dict], call_format: str, response_prefix: str) -> "CallConstraint":
        """The constraint for a generation that continues ``response_prefix`` (the assistant text already in the
        prompt, e.g. a response prefill): if it ends in an open call, the call's opening so far."""
        constraint = cls(tuple(tools), call_format)
        at = response_prefix.rfind(CALL_SYNTAX[call_format][0])
        tail = response_prefix[at:] if at >= 0 else ""
        # Open = the tail is still inside a call's opening (before the arguments start). A prefix that ends
        # inside a call's *arguments* gets no constraint for that call: toolwise's prefills never do.
        if tail and any(b.startswith(tail) and len(b) > len(tail) for b in constraint._begins().values()):
            return cls(constraint.tools, call_format, tail)
        return constraint

    def _begins(self) -> dict[str, str]:
        _, head, mid, _ = CALL_SYNTAX[self.call_format]
        return {t["name"]: head + t["name"] + mid for t in self.tools}

    def structural_tag(self) -> dict:
        """xgrammar's structural tag (its JSON format, ``xgrammar.structural_tag.StructuralTag``)."""
        trigger, _, _, end = CALL_SYNTAX[self.call_format]

        def tag(fn: dict, begin: str) -> dict:
            return {"type": "tag", "begin": begin, "end": end,
                    "content": {"type": "json_schema", "json_schema": fn["parameters"],
                                "max_whitespace_cnt": MAX_WHITESPACE}}

        begins = self._begins()
        # The turn ends with its first call, in both formats (the loop makes one call per turn): the grammar, not a
        # stop string, ends it, since "</tool_call>" may legally occur inside a JSON string argument, where a stop
        # string would cut the call open (seen on vLLM: an unclosed expression string ending "...}}</tool_call>").
        free = {"type": "triggered_tags", "triggers": [trigger], "stop_after_first": True,
                "tags": [tag(fn, begins[fn["name"]]) for fn in self.tools]}
        if not self.opened:
            return {"type": "structural_tag", "format": free}
        n = len(self.opened)
        rest = [tag(fn, begins[fn["name"]][n:]) for fn in self.tools if begins[fn["name"]].startswith(self.opened)]
        first = rest[0] if len(rest) == 1 else {"type": "or", "elements": rest}
        return {"type": "structural_tag", "format": first}

    def key(self) -> str:
        """The structural tag as canonical JSON: the cache key of its compiled grammar."""
        return json.dumps(self.structural_tag(), sort_keys=True, ensure_ascii=False)


def import_xgrammar():
    try:
        import xgrammar  # why: optional extra (.[constrained]); unconstrained decoding must not need it
    except ImportError as e:
        raise ImportError(f"{XGRAMMAR_INSTALL_HINT} ({e})") from e
    return xgrammar


class GrammarCache:
    """Compiled call grammars for one tokenizer, by structural tag (a task set reuses a few tool sets). At most
    ``max_grammars`` are kept, least recently used first out: a server's clients send tool sets without end, and
    a compiled grammar holds token masks of the whole vocabulary (xgrammar's own cache is off for that reason: it
    is unbounded by default)."""

    max_grammars = 64

    def __init__(self, tokenizer: Any, vocab_size: int):
        xgr = import_xgrammar()
        self._xgr = xgr
        # vocab_size: the LM head's width, which may exceed the tokenizer's (padding rows).
        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self.compiler = xgr.GrammarCompiler(self.info, cache_enabled=False)
        self._compile = functools.lru_cache(maxsize=self.max_grammars)(self.compiler.compile_structural_tag)

    def get(self, constraint: CallConstraint):
        return self._compile(constraint.key())
