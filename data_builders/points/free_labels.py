"""Labels without gold answers: each decision-point kind's label decided by whether two answers of the same policy
agree, so traffic nobody graded (a captured conversation, a task with no gold) still labels its decision moments.

Every answer compared here is a *forced answer*: the policy's continuation of a prompt prefilled with
``\\boxed{`` (:func:`forced_answers`, the flip labeler's own probe of what the policy would answer now). The
reference is the answer the agent actually gave at the end of the conversation (``final``), or, for commit, the
answer under test. The rules, one per kind (the gold rules they stand in for: ``data_builders/points/labelers.py``):

* **flip** (a proposed call: execute = 1): the forced answer with the call skipped *disagrees* with the agent's final
  answer, and the forced answer right after the call's result *agrees* with it — the call's result is what the
  final answer rests on. (Gold: wrong before the result, right after it, episode right.)
* **probe** (tool needed = 1): the forced answer at the first prompt, before any call, disagrees with the agent's
  final tool-using answer. (Gold: the policy fails the task unaided.)
* **commit** (continue = 1): the forced answer after one verification prompt disagrees with the answer given.
  (Gold: the answer is wrong.)

"Agree" (:func:`agree`) is the task's own scorer with the reference answer as its gold where the task is known,
else ``scorer`` (a scorer spec, data_builders/tasks/scorers.py: e.g. ``{"kind": "judge", ...}`` for the LLM judge),
else When2Tool's comparison of the two boxed answers. A moment whose reference gives nothing to compare (the
conversation never answered, an empty box, a numeric scorer and a reference with no number) is not labelled:
:data:`UNLABELLED`.

The gold-free labels hold where the agent's final answer is right; where it is wrong they can call a harmless call
needed (flip) or a known answer unknown (probe) — how often, against gold, is what ``free_labels=true`` builds on
tasks with gold measure (``benchmarks/gold_free_labels.py``; docs/results.md).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from ..agent import prompts as P
from ..backends.base import SamplingParams
from ..protocol import ANSWER_PREFILL
from ..tasks.scorers import agreement, cached_scorer, extract_answer, score_task
from ..tasks.scoring import is_correct

#: a moment whose answers could not be compared: no label
UNLABELLED = -1

RULES = {
    "flip": "label=1 (execute) iff the forced answer with the call skipped disagrees with the conversation's final "
            "answer and the forced answer after the call's result agrees with it",
    "probe": "label=1 (tool needed) iff the forced answer at the first prompt disagrees with the conversation's "
             "final answer",
    "commit": "label=1 (continue) iff the forced answer after one verification prompt disagrees with the answer",
}

def forced_answers(backend, items: Sequence[tuple[list[dict], list[dict] | None]], tokens: int) -> list[str]:
    """What the policy answers now at each ``(loop messages, tools)``: the render prefilled with ``\\boxed{`` and
    ``tokens`` greedy tokens after it, returned with the prefill (so a scorer finds the box)."""
    prompts = [backend.render(P.template_messages(messages), tools) + ANSWER_PREFILL for messages, tools in items]
    gens = backend.generate(prompts, SamplingParams(max_new_tokens=tokens)) if prompts else []
    return [ANSWER_PREFILL + g.text for g in gens]


def reference_answer(text: str | None) -> str | None:
    """The answer a response states (its last box, else its text), None when it states nothing."""
    ref = extract_answer(text) if isinstance(text, str) else ""
    return ref or None


def agree(answer: str, reference: str | None, task: Any = None, scorer: Any = None) -> bool | None:
    """Whether ``answer`` states the answer ``reference`` states (see the module doc); None when the reference
    gives nothing to compare."""
    ref = reference_answer(reference)
    if ref is None:
        return None
    try:
        if task is not None:
            if task.scorer is not None and getattr(cached_scorer(task.scorer), "needs_calls", False):
                return None     # a scorer of calls (BFCL's) has no answer text to agree on
            return score_task(dataclasses.replace(task, expected={**task.expected, "answer": ref}), answer)
        if scorer is not None:
            return bool(cached_scorer(scorer)(answer, ref, instruction=""))
        return is_correct(answer, ref)
    except ValueError:      # e.g. a numeric scorer and a reference that holds no number
        return None


def _label(value: bool | None) -> int:
    return UNLABELLED if value is None else int(value)


def flip_label(skipped: str, after_call: str, final: str | None, task: Any = None, scorer: Any = None) -> int:
    a, b = agree(skipped, final, task, scorer), agree(after_call, final, task, scorer)
    return UNLABELLED if a is None or b is None else int((not a) and b)


def probe_label(unaided: str, final: str | None, task: Any = None, scorer: Any = None) -> int:
    a = agree(unaided, final, task, scorer)
    return _label(None if a is None else not a)


def commit_label(answer: str, verified: str, task: Any = None, scorer: Any = None) -> int:
    a = agree(verified, answer, task, scorer)
    return _label(None if a is None else not a)


def verify_messages(messages: list[dict], answer_text: str) -> list[dict]:
    """The loop's messages after an answer when one verification round is asked for (what G-STEP's continue
    appends)."""
    return [*messages, {"role": "assistant", "content": answer_text}, {"role": "user", "content": P.VERIFY_PROMPT}]


def agreement_with_gold(gold: Sequence[int], free_: Sequence[int]) -> dict:
    """How the gold-free labels agree with gold over the points both label (the scorers' :func:`agreement`: ``n``,
    ``agree``, ``rate``, ``cohen_kappa``), with the points left unlabelled and each rule's positives. Intervals:
    ``benchmarks/gold_free_labels.py`` (trainers.intervals)."""
    pairs = [(bool(f), bool(g)) for g, f in zip(gold, free_) if f != UNLABELLED]
    return {**agreement(pairs), "unlabelled": len(gold) - len(pairs),
            "gold_positive": sum(g for _, g in pairs), "free_positive": sum(f for f, _ in pairs)}


def agreement_line(a: dict) -> str:
    if not a["n"]:
        return f"gold-free labels: none of {a['unlabelled']} points labelled"
    kappa = "undefined (one label value)" if a["cohen_kappa"] is None else f"{a['cohen_kappa']:.2f}"
    return (f"gold-free labels: {a['n']} of {a['n'] + a['unlabelled']} points labelled, positives "
            f"{a['free_positive']} (gold {a['gold_positive']}); agree with gold {a['rate']:.1%}, Cohen's kappa {kappa}")
