"""``python -m trainers.evaluate.shadow capture.dir=captures/``: what enforcing each gate would have done to the
traffic an endpoint captured while the gate ran in shadow mode (or enforced).

Per gate, from the decisions the capture recorded (each gate's own, at its moment):

* **decisions** and how many would act: a call skipped (ToolGate), a verification round added (G-STEP), a
  conversation steered to answer without a tool (Probe&Prefill's skip prefill);
* **calls skipped** (the tool calls the client would not have run) and the share of all captured calls;
* **upstream tokens and PTE saved**, per conversation, by an estimate written down in :func:`enforced_turns`: a
  skipped call removes the upstream rounds that followed its result and adds one re-ask that answers; a continue
  adds one verification round; a skip prefill keeps the first round and answers there. PTE is the one PTE function
  (data_builders/metrics/pte.py) at the policy's γ (``model`` and ``hardware`` groups, or ``pte.gamma``);
* **estimated accuracy change** with a bootstrap interval over conversations, where the gate's gold-free decision
  points built from the same capture are given (``labels.<gate>=<python -m data_builders.build source=capture
  kind=<kind> out_dir>``): a conversation loses its answer when an acting decision falls on a moment whose gold-free
  label says the answer rested on what was skipped (a skipped call the answer needed, a steered conversation whose
  unaided answer differs) — the agent's own final answers taken as right, so it is the accuracy change if they are.
  For G-STEP the report gives the share of **answers changed** instead (a continue on an answer the verification
  prompt changes), without a sign: whether the verified answer is better no gold-free label can say (:data:`ON_POSITIVE`).
  Conversations with an acting decision on a moment the labels do not cover (not labelled, or not replayed) are left
  out and counted.

Writes ``shadow_report.json``, ``shadow_report.md`` and ``shadow_report.png`` to ``out_dir`` and logs them to W&B
(``logger`` group); ends with one line per gate ``gate=… decisions=… acting=… calls_skipped=… tokens_saved=…
pte_saved=… acc_change=…``.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from data_builders.agent.trajectory import Turn
from data_builders.capture.records import conversations, read_capture
from data_builders.gates import gates
from data_builders.metrics.pte import PTEConfig, pte
from data_builders.points.store import load_points
import trainers.evaluate.config  # noqa: F401 - its schemas (and the logger's), stored before Hydra composes
from recipes import CONFIG_DIR
from trainers.evaluate.report import figure, markdown_table, with_interval
from trainers.intervals import BootstrapSpec, mean_interval
from trainers.tracking import log_report

#: the action that changes what the turn does, per moment (the one the report counts as the gate acting): a
#: skipped call, an added verification round, a prefill steering away from tools
ACTING = {"pre_call": "skip", "on_answer": "continue", "pre_generation": "skip"}
#: what acting on a moment whose gold-free label is 1 does to the conversation's answer: at a call or a first turn
#: the answer the agent gave is lost (the label says it rested on the call: -1, taking it as right); at an answer
#: the verification round changes it, for better or worse, which no gold-free label can tell: counted as changed,
#: with no sign
ON_POSITIVE = {"pre_call": "lost", "pre_generation": "lost", "on_answer": "changed"}
#: tokens the loop's verification prompt adds to a context (data_builders/agent/prompts.py: VERIFY_PROMPT, ~40
#: words), for the estimate of an added round
VERIFY_PROMPT_TOKENS = 48


@dataclass
class Conversation:
    """A chain of captured requests (data_builders/capture/records.py) and the upstream turns they made."""
    records: list[int] = field(default_factory=list)
    turns: list[tuple[int, int, int]] = field(default_factory=list)   # (record, prompt tokens, completion tokens)
    priced: bool = True       # every turn carried its usage


def chains(records: list[dict]) -> dict[int, Conversation]:
    """Conversations by their first record's index, their turns in order."""
    _, root = conversations(records)
    out: dict[int, Conversation] = defaultdict(Conversation)
    for i, r in enumerate(records):
        conv = out[root[i]]
        conv.records.append(i)
        for t in r.get("turns") or []:
            usage = t.get("usage") or {}
            p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(p, int) and isinstance(c, int):
                conv.turns.append((i, p, c))
            else:
                conv.priced = False
    return dict(out)


def _turn(prompt: int, completion: int, k: int) -> Turn:
    return Turn(round=k, text="", prefill_tokens=prompt, context_len=prompt + completion, decode_tokens=completion)


def enforced_turns(conv: Conversation, moment: str, at_record: int) -> list[tuple[int, int]]:
    """The (prompt, completion) tokens of the conversation's upstream turns had the gate acted at ``at_record``
    (the first acting decision of the conversation: after it the conversation would differ), by the estimate in the
    module doc. The answering turn a skip or a steer leads to is priced like the conversation's last turn."""
    turns = [(p, c) for _, p, c in conv.turns]
    kept = [(p, c) for r, p, c in conv.turns if r <= at_record]
    after = [(p, c) for r, p, c in conv.turns if r > at_record]
    last = turns[-1] if turns else (0, 0)
    if moment == "pre_call":
        # the call skipped: the rounds after its result are not made; the upstream is re-asked once, from about the
        # context the result would have given, and answers as the conversation's last turn did
        reask = (after[0][0] if after else kept[-1][0] + kept[-1][1], last[1])
        return kept + [reask]
    if moment == "on_answer":
        p, c = kept[-1]
        return turns + [(p + c + VERIFY_PROMPT_TOKENS, c)]
    if moment == "pre_generation":
        first = kept[0] if kept else last
        return [(first[0], last[1])]
    raise ValueError(f"unknown moment {moment!r}")


def moment_id(record: dict, decision: dict, moment: str) -> str:
    """The point id a replay build gives this decision's moment (data_builders/capture/records.py)."""
    rid = str(record.get("request_id"))
    return f"{rid}:{decision.get('call_id')}" if moment == "pre_call" else rid


def gate_report(gate, records: list[dict], convs: dict[int, Conversation], root_of: dict[int, int], gamma: float,
                labels: dict[str, int] | None, spec: BootstrapSpec) -> dict:
    moment, acting = gate.moment, ACTING[gate.moment]
    decided, modes, actions = 0, defaultdict(int), defaultdict(int)
    first_act: dict[int, tuple[int, dict]] = {}         # conversation -> its first acting decision
    acts: dict[int, list[str]] = defaultdict(list)      # conversation -> moment ids of its acting decisions
    calls_skipped = 0
    for i, r in enumerate(records):
        for d in r.get("decisions") or []:
            if d.get("gate") != gate.name:
                continue
            decided += 1
            modes[d.get("mode", "enforce")] += 1
            actions[d.get("action")] += 1
            if d.get("action") != acting:
                continue
            conv = root_of[i]
            first_act.setdefault(conv, (i, d))
            acts[conv].append(moment_id(r, d, moment))
            calls_skipped += moment == "pre_call"
    total_calls = sum(len((r.get("response") or {}).get("tool_calls") or []) for r in records) \
        + sum(1 for r in records for d in r.get("decisions") or [] if d.get("gate") == gate.name and
              d.get("applied") == "skip")       # calls an enforcing gate skipped never reached the response
    if moment == "pre_generation":      # a steered conversation runs none of its calls
        calls_skipped = sum(len((records[i].get("response") or {}).get("tool_calls") or [])
                            for conv in first_act for i in convs[conv].records)
    priced = [c for c in convs if convs[c].priced and convs[c].turns]
    observed_tokens = sum(p + c for conv in priced for _, p, c in convs[conv].turns)
    saved_tokens, observed_pte, saved_pte = 0, 0.0, 0.0
    for conv in priced:
        now = [(p, c) for _, p, c in convs[conv].turns]
        base = pte([_turn(p, c, k) for k, (p, c) in enumerate(now)], gamma)
        observed_pte += base
        if conv in first_act:
            new = enforced_turns(convs[conv], moment, first_act[conv][0])
            saved_tokens += sum(p + c for p, c in now) - sum(p + c for p, c in new)
            saved_pte += base - pte([_turn(p, c, k) for k, (p, c) in enumerate(new)], gamma)
    out: dict[str, Any] = {
        "gate": gate.name, "moment": moment, "acting_action": acting, "decisions": decided, "modes": dict(modes),
        "actions": dict(actions), "conversations": len(convs), "conversations_acted_on": len(first_act),
        "calls_skipped": calls_skipped, "calls": total_calls,
        "tokens_saved": saved_tokens, "tokens": observed_tokens,
        "tokens_saved_share": saved_tokens / observed_tokens if observed_tokens else None,
        "pte_saved": saved_pte, "pte": observed_pte, "pte_saved_share": saved_pte / observed_pte if observed_pte else None,
        "unpriced_conversations": len(convs) - len(priced)}
    if labels is not None:
        values, unlabelled = [], 0
        for conv in convs:
            ids = acts.get(conv, [])
            if any(m not in labels for m in ids):
                unlabelled += 1
                continue
            values.append(1.0 if any(labels[m] == 1 for m in ids) else 0.0)
        ci = mean_interval(values, spec) if values else None
        share = float(np.mean(values)) if values else None
        if ON_POSITIVE[moment] == "lost":
            out.update(acc_change=None if share is None else -share, acc_change_ci=[-ci[1], -ci[0]] if ci else None)
        else:
            out.update(acc_change=None, acc_change_ci=None, answers_changed=share,
                       answers_changed_ci=list(ci) if ci else None)
        out.update(acc_conversations=len(values), acc_unlabelled=unlabelled)
    return out


def label_map(path: str | None, kind: str) -> dict[str, int] | None:
    """Moment id -> gold-free label of a capture build of ``kind`` (None: no labels given)."""
    if not path:
        return None
    points = load_points(path, kind=kind)
    if (points.manifest.get("task_source") or {}).get("source") != "capture":
        raise ValueError(f"labels: {path} was not built from captured traffic (python -m data_builders.build "
                         f"source=capture ...): its point ids are not the capture's moments")
    return dict(zip(points.points["point_id"], points.points["label"]))


def policy_gamma(cfg: DictConfig) -> float:
    """PTE's γ for the captured policy: ``pte.gamma`` when set (a policy behind an API), else from the ``model``
    group's config (its config.json; no weights are loaded)."""
    pte_cfg = PTEConfig(hardware=OmegaConf.to_container(cfg.hardware, resolve=True),
                        **OmegaConf.to_container(cfg.pte, resolve=True))
    if pte_cfg.gamma is not None:
        return pte_cfg.gamma_for()
    from transformers import AutoConfig

    from data_builders.backends.loading import model_directory

    path, _ = model_directory(cfg.model.name, gguf_file=cfg.model.get("gguf_file"))
    return pte_cfg.gamma_for(AutoConfig.from_pretrained(path))


def report(cfg: DictConfig) -> dict:
    read = read_capture(cfg.capture.dir)
    if not read.records:
        raise ValueError(f"capture.dir={cfg.capture.dir}: no captured records")
    records = read.records
    convs = chains(records)
    root_of = {i: c for c, conv in convs.items() for i in conv.records}
    gamma = policy_gamma(cfg)
    spec = BootstrapSpec(level=cfg.bootstrap.level, replicates=cfg.bootstrap.replicates, seed=cfg.bootstrap.seed)
    per_gate = {}
    for gate in gates().values():
        if not any(d.get("gate") == gate.name for r in records for d in r.get("decisions") or []):
            continue
        labels = label_map(cfg.labels.get(gate.name), gate.kind)
        per_gate[gate.name] = gate_report(gate, records, convs, root_of, gamma, labels, spec)
    if not per_gate:
        raise ValueError(f"capture.dir={cfg.capture.dir}: no gate decision in {len(records)} records (was a gate "
                         f"loaded, in shadow or enforce mode?)")
    return {"capture": str(Path(cfg.capture.dir).resolve()), "records": len(records), "files": read.files,
            "incomplete_lines": read.incomplete_lines, "conversations": len(convs), "gamma": gamma,
            "gates": per_gate}


COLUMNS = [("decisions", "decisions"), ("conversations_acted_on", "conversations acted on"),
           ("calls_skipped", "calls skipped"), ("tokens_saved", "upstream tokens saved"), ("pte_saved", "PTE saved"),
           ("acc_change", "est. accuracy change")]


def rows(result: dict) -> list[list[str]]:
    out = []
    for name, g in result["gates"].items():
        share = lambda a, b: f"{a} / {b}" + (f" ({a / b:.1%})" if b else "")  # noqa: E731
        if "acc_conversations" not in g:
            acc = "– (labels.%s not given)" % name
        else:
            acc = (with_interval(g["acc_change"], g["acc_change_ci"], "{:+.3f}") if g["acc_change"] is not None else
                   "answers changed " + with_interval(g.get("answers_changed"), g.get("answers_changed_ci"), "{:.3f}")
                   + " (sign unknown without gold)")
            acc += f" over {g['acc_conversations']}" + (f" ({g['acc_unlabelled']} not labelled)"
                                                        if g["acc_unlabelled"] else "")
        out.append([name, f"{g['decisions']} ({', '.join(f'{k} {v}' for k, v in sorted(g['actions'].items()))})",
                    share(g["conversations_acted_on"], g["conversations"]), share(g["calls_skipped"], g["calls"]),
                    f"{g['tokens_saved']:+,} ({g['tokens_saved_share']:+.1%})" if g["tokens_saved_share"] is not None
                    else "–",
                    f"{g['pte_saved']:+,.0f} ({g['pte_saved_share']:+.1%})" if g["pte_saved_share"] is not None else "–",
                    acc])
    return out


def plot(result: dict, path: Path) -> Path:
    names = list(result["gates"])
    g = [result["gates"][n] for n in names]
    with figure(path, ncols=2, figsize=(10, 3.2)) as (_, (left, right)):
        y = np.arange(len(names))
        left.barh(y - 0.2, [x["tokens_saved_share"] or 0 for x in g], 0.4, label="upstream tokens")
        left.barh(y + 0.2, [x["pte_saved_share"] or 0 for x in g], 0.4, label="PTE")
        left.set_yticks(y, names)
        left.axvline(0, color="k", lw=0.8)
        left.set_xlabel("share saved by enforcing (estimate)")
        left.legend(fontsize=8)
        acc = [x.get("acc_change") for x in g]
        have = [i for i, a in enumerate(acc) if a is not None]
        if have:
            lo = [acc[i] - (g[i]["acc_change_ci"] or [acc[i]] * 2)[0] for i in have]
            hi = [(g[i]["acc_change_ci"] or [acc[i]] * 2)[1] - acc[i] for i in have]
            right.errorbar([acc[i] for i in have], have, xerr=[lo, hi], fmt="o", capsize=4)
        right.set_yticks(y, names)
        right.set_ylim(-0.5, len(names) - 0.5)
        right.axvline(0, color="k", lw=0.8)
        right.set_xlabel("est. accuracy change (gold-free labels, 95% CI)")
    return path


def write(result: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    header = ["gate"] + [h for _, h in COLUMNS]
    md = (f"# Shadow report\n\n{result['records']} captured requests, {result['conversations']} conversations "
          f"({result['capture']}); PTE at γ = {result['gamma']:.3g}.\n\n" + markdown_table(header, rows(result)) + "\n")
    files = [out_dir / "shadow_report.json", out_dir / "shadow_report.md", out_dir / "shadow_report.png"]
    files[0].write_text(json.dumps(result, indent=2))
    files[1].write_text(md)
    plot(result, files[2])
    return files


def run(cfg: DictConfig) -> dict:
    result = report(cfg)
    files = write(result, Path(cfg.out_dir))
    print((Path(cfg.out_dir) / "shadow_report.md").read_text())
    header = ["gate"] + [h for _, h in COLUMNS]
    log_report(cfg, "shadow", {"shadow": (header, rows(result))}, files)
    print(f"report: {Path(cfg.out_dir).resolve()}")
    for name, g in result["gates"].items():
        print(f"gate={name} decisions={g['decisions']} acting={g['conversations_acted_on']} "
              f"calls_skipped={g['calls_skipped']} tokens_saved={g['tokens_saved']} pte_saved={g['pte_saved']:.0f} "
              f"acc_change={g.get('acc_change')}")
    return result


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="shadow")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
