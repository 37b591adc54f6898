"""The three labelers: they run the policy on a chunk of tasks and return (point rows, feature tensors).

Every label follows its seed's definition; every feature comes from ``data_builders.features``, computed
inside the agent's own hook at the decision moment (the same call the run-time controller makes). Which gate
each kind's points train, and the label rule in words: the gate's spec (``data_builders.gates``), which names its
labeler here.

* ``probe`` (When2Tool, arXiv 2605.09252): one point per task. Features: hidden states of the first prompt in ``feature_mode``
  (the prompt the deployed probe reads). Label ``tool_needed`` = the policy fails the task in
  ``hard_no_tool`` mode. Greedy decoding so labels are reproducible (the paper samples).
* ``flip`` (arXiv 2606.03054): one point per call the policy proposes in ``default``-mode rollouts. A forced answer
  (generation prefilled with ``\\boxed{``) is taken right before the call and right after its tool output;
  class helpful (wrong→right), harmful (right→wrong) or unchanged; label execute-positive = helpful and the
  episode ends correct. A task whose scorer judges calls rather than text (``bfcl_ast``) scores "before" with the
  calls executed before this one and "after" with it too. On BFCL that labels an episode's first call execute iff it
  passes the AST check and the episode ends correct (no call after it); every later call, and every call on an
  irrelevance task (the first one harmful), is labelled skip (docs/bfcl.md).
* ``commit`` (arXiv 2605.00136): one point per episode that answers. At the answer the recording hook says
  "continue", so the loop injects one verification round (capped by ``verify_rounds``). Two label rules
  (``commit_label``): ``wrong`` (default) — continue iff the answer at the decision is wrong, the gate is a
  verifier of the policy's own answer; ``fixed`` — continue iff the answer is wrong *and* the verification
  round makes it right. ``fixed`` is the stricter reading of the tool-use-tax paper but for the embedded 135M policy it has
  no positives at all (0/200 on When2Tool: one verification round never repairs a wrong answer), so the
  default is the rule that gives a gate something to learn; both outcomes are stored on every point.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..agent.hooks import Hooks
from ..agent.loop import Agent, AgentConfig
from ..agent.trajectory import Trajectory, executed_calls
from ..environments import make_environment
from ..features.gstep import GSTEP_FEATURES, gstep_features
from ..gates.g_step import LABEL_RULES as COMMIT_LABEL_RULES, label_rule as commit_label_rule
from ..features.probe import probe_features
from ..features.toolgate import embed_texts, structural_names, toolgate_state
from ..tasks.schema import Task
from ..tasks.scorers import score_task
from . import free_labels as free
from .free_labels import forced_answers
from .preferences import flip_state_columns

log = logging.getLogger(__name__)


def base_row(task: Task, split: str, point_id: str, label: int) -> dict[str, Any]:
    return {"point_id": point_id, "task_id": str(task.id), "split": split, "env": task.env.name,
            "category": task.category, "difficulty": task.difficulty, "multi_step": task.multi_step, "label": int(label)}


def agent_config(cfg: Any, mode: str, n: int, **over) -> AgentConfig:
    return AgentConfig(mode=mode, max_rounds=cfg.max_rounds, max_new_tokens=cfg.max_new_tokens, temperature=0.0,
                       max_in_flight=max(n, 1), call_format=cfg.get("call_format", "auto"), **over)


# ---------------------------------------------------------------------------- probe
def label_probe(backend, tasks: Sequence[Task], splits: Sequence[str], cfg: Any,
                progress: Callable[[Trajectory], None] | None = None) -> tuple[list[dict], dict]:
    """``progress`` (every labeler's): gets each episode as it finishes, so a build's bar moves per task."""
    agent = Agent(backend, agent_config(cfg, cfg.feature_mode, len(tasks)))
    trajs = Agent(backend, agent_config(cfg, "hard_no_tool", len(tasks))).run(tasks, on_done=progress)
    # An episode whose first prompt did not fit the context never generated: its "failure" says nothing about
    # whether the task needs a tool, so it is reported and not labelled (its prompt is not featurized either).
    keep = [i for i, tr in enumerate(trajs) if not tr.never_generated]
    if len(keep) < len(tasks):
        log.warning("probe: %d of %d tasks not labelled, their prompt leaves no room for max_new_tokens=%s in the "
                    "context: %s", len(tasks) - len(keep), len(tasks), cfg.max_new_tokens,
                    [str(t.id) for t, tr in zip(tasks, trajs) if tr.never_generated])
    hidden = probe_features(backend, [agent.initial_prompt(tasks[i]) for i in keep], cfg.get("layers"))
    rows = [base_row(tasks[i], splits[i], str(tasks[i].id), not trajs[i].correct)
            | {"no_tool_answer": trajs[i].answer, "rounds": trajs[i].rounds, "ended": trajs[i].ended} for i in keep]
    if cfg.get("free_labels"):
        for row, label in zip(rows, _free_probe_labels(backend, [tasks[i] for i in keep], cfg)):
            row["free_label"] = label
    return rows, {"hidden": hidden}


def _free_probe_labels(backend, tasks: Sequence[Task], cfg: Any) -> list[int]:
    """The gold-free probe labels: the policy's forced answer at the first prompt against the final answer of its
    tool-using (default-mode) episode."""
    trajs = Agent(backend, agent_config(cfg, "default", len(tasks))).run(tasks)
    firsts = [tr.messages[:next((k for k, m in enumerate(tr.messages) if m["role"] == "assistant"),
                                len(tr.messages))] for tr in trajs]
    unaided = forced_answers(backend, [(m, make_environment(t.env).tool_specs()) for t, m in zip(tasks, firsts)],
                             cfg.forced_answer_tokens)
    return [free.probe_label(u, tr.final_response, t) for t, u, tr in zip(tasks, unaided, trajs)]


# ---------------------------------------------------------------------------- flip
@dataclass
class _CallRecorder(Hooks):
    """Executes every call, and records the ToolGate features and the message state at each one."""

    points: dict[int, list[dict]] = field(default_factory=dict)

    def pre_call(self, episode, call):
        text, structural = toolgate_state(episode, call)
        # n_calls: where this call will sit in the episode's calls, so the forced answers can be scored with the
        # calls executed before it and with it (a scorer that judges calls, e.g. bfcl_ast, reads them)
        self.points.setdefault(id(episode.task), []).append(
            {"n_messages": len(episode.messages), "n_calls": len(episode.calls), "round": episode.round,
             "tool": call.name, "text": text, "structural": structural})
        return "execute"


def _forced_answers(backend, items: list[tuple[Task, list[dict], list[tuple[str, dict]]]], cfg: Any) -> list[str]:
    """Each item: a task and the messages so far (the calls executed by then are its third part, for scoring):
    the forced answers' texts, ``\\boxed{`` included."""
    return forced_answers(backend, [(messages, make_environment(task.env).tool_specs()) for task, messages, _ in items],
                          cfg.forced_answer_tokens)


def _score(items, texts: list[str]) -> list[bool]:
    return [score_task(task, text, calls=calls) for text, (task, _, calls) in zip(texts, items)]


def label_flip(backend, tasks: Sequence[Task], splits: Sequence[str], cfg: Any,
               progress: Callable[[Trajectory], None] | None = None) -> tuple[list[dict], dict]:
    recorder = _CallRecorder()
    agent = Agent(backend, agent_config(cfg, "default", len(tasks)), recorder)
    trajs = agent.run(tasks, on_done=progress)
    points = []   # (task, split, recorded call, episode record, messages before the call)
    for task, split, tr in zip(tasks, splits, trajs):
        for pt in recorder.points.get(id(task), []):
            n, k = pt["n_messages"], pt["n_calls"]
            # The loop appends the call turn and its tool response right after the hook says "execute", and the
            # call itself to the episode's calls.
            if len(tr.messages) < n + 2 or tr.messages[n]["role"] != "assistant" or len(tr.calls) <= k \
                    or tr.calls[k].name != pt["tool"] or tr.calls[k].status != "executed":
                raise RuntimeError(f"task {task.id}: trajectory does not continue the recorded call state")
            points.append((task, split, pt, tr, n))
    # before: the calls executed before this one; after: with it
    before_items = [(t, tr.messages[:n], executed_calls(tr.calls[:pt["n_calls"]])) for t, _, pt, tr, n in points]
    after_items = [(t, tr.messages[:n + 2], executed_calls(tr.calls[:pt["n_calls"] + 1])) for t, _, pt, tr, n in points]
    before_text, after_text = _forced_answers(backend, before_items, cfg), _forced_answers(backend, after_items, cfg)
    before, after = _score(before_items, before_text), _score(after_items, after_text)
    rows, k_of = [], {}
    for (task, split, pt, tr, n), b, a, bt, at in zip(points, before, after, before_text, after_text):
        k = k_of[task.id] = k_of.get(task.id, -1) + 1
        flip = "helpful" if (a and not b) else "harmful" if (b and not a) else "unchanged"
        rows.append(base_row(task, split, f"{task.id}:{k}", flip == "helpful" and tr.correct)
                    | {"flip_class": flip, "before_correct": b, "after_correct": a, "episode_correct": tr.correct,
                       "tool": pt["tool"], "round": pt["round"], "summary": pt["text"]}
                    # the state at the call, for preference pairs (recipe=tool_dpo): a harmful call prefers the
                    # forced answer there, a helpful one of a right episode the call
                    | flip_state_columns(tr.messages[:n], tr.messages[n]["content"], bt)
                    # the same forced answers, judged against the episode's own final answer instead of gold
                    | ({"free_label": free.flip_label(bt, at, tr.final_response, task)} if cfg.get("free_labels")
                       else {}))
    emb = embed_texts([pt["text"] for _, _, pt, _, _ in points])
    structural = np.zeros((len(points), len(structural_names())), np.float32)
    for i, (_, _, pt, _, _) in enumerate(points):
        structural[i] = pt["structural"]
    return rows, {"embedding": torch.from_numpy(emb), "structural": torch.from_numpy(structural)}

# ---------------------------------------------------------------------------- commit
@dataclass
class _AnswerRecorder(Hooks):
    """Records the G-STEP features at the (first) answer and asks for one verification round."""

    points: dict[int, dict] = field(default_factory=dict)

    def on_answer(self, episode, answer_text):
        # calls: those executed by the time of the answer (a calls scorer judges the answer with them)
        self.points[id(episode.task)] = {"features": gstep_features(episode, answer_text), "answer_text": answer_text,
                                         "round": episode.round, "calls": executed_calls(episode.calls),
                                         "messages": list(episode.messages)}
        return "continue"


def label_commit(backend, tasks: Sequence[Task], splits: Sequence[str], cfg: Any,
                 progress: Callable[[Trajectory], None] | None = None) -> tuple[list[dict], dict]:
    fixed_rule = commit_label_rule(cfg) == COMMIT_LABEL_RULES["fixed"]     # (an unknown rule is refused there)
    recorder = _AnswerRecorder()
    agent = Agent(backend, agent_config(cfg, cfg.get("commit_mode", "default"), len(tasks), max_continues=1,
                                        verify_rounds=cfg.verify_rounds), recorder)
    trajs = agent.run(tasks, on_done=progress)
    rows, feats, answered = [], [], []
    for task, split, tr in zip(tasks, splits, trajs):
        pt = recorder.points.get(id(task))
        if pt is None:
            continue   # the episode never answered: no commit/continue decision was taken
        first = score_task(task, pt["answer_text"], calls=pt["calls"])
        label = (not first) and (tr.correct or not fixed_rule)
        rows.append(base_row(task, split, str(task.id), label)
                    | {"first_correct": first, "final_correct": tr.correct, "round": pt["round"],
                       "ended": tr.ended})
        feats.append(pt["features"])
        answered.append((task, pt))
    if cfg.get("free_labels"):
        # the gold-free label: does the policy's forced answer after the verification prompt restate the answer
        verified = forced_answers(backend, [(free.verify_messages(pt["messages"], pt["answer_text"]),
                                             make_environment(task.env).tool_specs()) for task, pt in answered],
                                  cfg.forced_answer_tokens)
        for row, (task, pt), v in zip(rows, answered, verified):
            row["free_label"] = free.commit_label(pt["answer_text"], v, task)
    x = np.stack(feats).astype(np.float32) if feats else np.zeros((0, len(GSTEP_FEATURES)), np.float32)
    return rows, {"features": torch.from_numpy(x)}

