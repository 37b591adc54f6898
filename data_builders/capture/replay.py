"""Replay captured decision moments against the policy and label them without gold answers: each kind's labeler
for ``python -m data_builders.build source=capture capture.dir=... kind=<kind>`` (a gate's spec names its own:
``Gate.replay``).

A moment (data_builders/capture/records.py) is converted to the loop's state by the one converter the endpoint's
gates use (data_builders/agent/openai_messages.py), so its features are the ones the serving gate read at that
moment; the policy (the build's backend: the upstream's model, in process or behind vLLM) gives the forced answers
the gold-free rules compare (data_builders/points/free_labels.py). A moment that cannot be labelled (the
conversation never answered, an answer with nothing to compare) is left out and counted in the point rows'
shard summary, never guessed.

Rows carry the task columns every dataset has (``task_id`` = the conversation, ``env`` / ``category`` =
``capture``) and the replay's own: the forced answers, the conversation's final answer and the request id.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..agent import prompts as P
from ..agent.openai_messages import (answer_episode, call_episode, check_tools, episode_from_openai,
                                     first_prompt_messages)
from ..features.gstep import GSTEP_FEATURES, gstep_features
from ..features.probe import probe_features
from ..features.toolgate import embed_texts, structural_names, toolgate_state
from ..points import free_labels as free

log = logging.getLogger(__name__)

CAPTURE_ENV = "capture"


def _row(moment: dict, split: str, label: int) -> dict[str, Any]:
    return {"point_id": moment["id"], "task_id": moment["conversation"], "split": split, "env": CAPTURE_ENV,
            "category": CAPTURE_ENV, "difficulty": "", "multi_step": False, "label": int(label),
            "final_answer": moment["final"] or "", "record": int(moment["record"])}


def _call_format(backend, cfg: Any) -> str:
    fmt = cfg.get("call_format", "auto")
    return P.auto_call_format(backend.model_id) if fmt in (None, "auto") else fmt


def _scorer(cfg: Any):
    spec = cfg.get("agreement_scorer")
    return None if spec is None else (spec if isinstance(spec, str) else dict(spec))


def _done(progress: Callable | None, n: int) -> None:
    for _ in range(n if progress else 0):
        progress(None)


def _keep(rows: list, tensors: list, labels: list[int], what: str) -> tuple[list, list]:
    keep = [i for i, label in enumerate(labels) if label != free.UNLABELLED]
    if len(keep) < len(labels):
        log.info("%s: %d of %d moments not labelled (nothing to compare their answers with)", what,
                 len(labels) - len(keep), len(labels))
    return [rows[i] for i in keep], [tensors[i] for i in keep]


def replay_flip(backend, moments: Sequence[dict], splits: Sequence[str], cfg: Any,
                progress: Callable | None = None) -> tuple[list[dict], dict]:
    """Each captured call: the forced answer with it skipped and after its result, against the final answer."""
    fmt, scorer = _call_format(backend, cfg), _scorer(cfg)
    before, after, states = [], [], []
    for m in moments:
        tools = check_tools(m["tools"])
        view, parsed = call_episode(m["messages"], tools, m["call"], call_format=fmt)
        states.append(toolgate_state(view, parsed))
        before.append((view.messages, tools))
        proposing = {"role": "assistant", "content": None, "tool_calls": [m["call"]]}
        result = m["result"] if isinstance(m["result"], str) else str(m["result"])
        answered = m["messages"] + [proposing, {"role": "tool", "tool_call_id": m["call"]["id"], "content": result}]
        after.append((episode_from_openai(answered, tools, call_format=fmt).view.messages, tools))
    skipped = free.forced_answers(backend, before, cfg.forced_answer_tokens)
    called = free.forced_answers(backend, after, cfg.forced_answer_tokens)
    labels = [free.flip_label(s, c, m["final"], scorer=scorer) for s, c, m in zip(skipped, called, moments)]
    rows = [_row(m, split, label) | {"tool": m["call"]["function"]["name"], "skipped_answer": s, "called_answer": c,
                                     "summary": text}
            for m, split, label, s, c, (text, _) in zip(moments, splits, labels, skipped, called, states)]
    _done(progress, len(moments))
    rows, states = _keep(rows, states, labels, "flip")
    emb = embed_texts([text for text, _ in states]) if states else np.zeros((0, 384), np.float32)
    structural = np.zeros((len(states), len(structural_names())), np.float32)
    for i, (_, vector) in enumerate(states):
        structural[i] = vector
    return rows, {"embedding": torch.from_numpy(emb), "structural": torch.from_numpy(structural)}


def replay_probe(backend, moments: Sequence[dict], splits: Sequence[str], cfg: Any,
                 progress: Callable | None = None) -> tuple[list[dict], dict]:
    """Each conversation's first request: the forced answer there against the conversation's final answer; the
    features are the hidden states of the prompt the endpoint's probe reads."""
    fmt, scorer = _call_format(backend, cfg), _scorer(cfg)
    firsts = [(first_prompt_messages(m["messages"], call_format=fmt), check_tools(m["tools"])) for m in moments]
    unaided = free.forced_answers(backend, firsts, cfg.forced_answer_tokens)
    labels = [free.probe_label(u, m["final"], scorer=scorer) for u, m in zip(unaided, moments)]
    rows = [_row(m, split, label) | {"unaided_answer": u} for m, split, label, u in zip(moments, splits, labels, unaided)]
    _done(progress, len(moments))
    rows, firsts = _keep(rows, firsts, labels, "probe")
    prompts = [backend.render(P.template_messages(msgs), tools) for msgs, tools in firsts]
    hidden = probe_features(backend, prompts, cfg.get("layers")) if prompts else torch.zeros(0)
    return rows, {"hidden": hidden}


def replay_commit(backend, moments: Sequence[dict], splits: Sequence[str], cfg: Any,
                  progress: Callable | None = None) -> tuple[list[dict], dict]:
    """Each captured final answer: the forced answer after one verification prompt against it; the features are
    G-STEP's, from the captured completion's log-probs and token counts."""
    fmt, scorer = _call_format(backend, cfg), _scorer(cfg)
    views = []
    for m in moments:
        tools = check_tools(m["tools"])
        view, text = answer_episode(m["messages"], tools, m["answer"], m["logprobs"], usage=m.get("usage"),
                                    finish_reason=m.get("finish_reason"), call_format=fmt, counter=backend)
        views.append((view, text, tools))
    verified = free.forced_answers(backend, [(free.verify_messages(v.messages, text), tools)
                                             for v, text, tools in views], cfg.forced_answer_tokens)
    labels = [free.commit_label(text, v, scorer=scorer) for (_, text, _), v in zip(views, verified)]
    feats = [gstep_features(view, text) for view, text, _ in views]
    rows = [_row(m, split, label) | {"verified_answer": v} for m, split, label, v in zip(moments, splits, labels,
                                                                                         verified)]
    _done(progress, len(moments))
    rows, feats = _keep(rows, feats, labels, "commit")
    x = np.stack(feats).astype(np.float32) if feats else np.zeros((0, len(GSTEP_FEATURES)), np.float32)
    return rows, {"features": torch.from_numpy(x)}
