"""``python -m trainers.evaluate.promote gate=<gate> candidate=<its refit checkpoint>
serving=outputs/serving/<gate> points=outputs/points/<its kind>/capture-<hash> [reload.endpoint=http://host:8080]``:
put a refit gate in front of traffic only if it is no worse than the one serving.

Both controllers decide, each at its own τ, on the held-out split (``split``, default test: conversations the
candidate's fit never saw) of decision points built from captured traffic and labelled without gold
(``python -m data_builders.build source=capture``, or the points a ``trainers.fit source=capture`` built). Compared,
with 95 % bootstrap intervals over points: AUROC against the gold-free labels; the share of moments where the gate
acts (a call skipped, a verification round added, a conversation steered without tools); and the estimated accuracy
change — skipping what a moment's label says the answer rested on counts -1 (the agent's own answers taken as
right, as in the shadow report, ``trainers/evaluate/shadow.py``), with the paired interval of the difference; for
G-STEP the share of answers a continue changes, which has no sign without gold.

The candidate is refused (exit status 1, nothing changed) when its AUROC is below the serving gate's by more than
``tolerance.auroc`` or (ToolGate, Probe&Prefill) its estimated accuracy change is below by more than
``tolerance.accuracy``, or when either was trained on another policy's features than the points'. Accepted, it is installed at ``serving``: a symlink there (or
no file yet) is repointed at the candidate in one atomic rename; a directory is moved aside to
``<serving>.previous-<time>`` and a copy of the candidate takes its place. Then the endpoint reloads: ``POST
<reload.endpoint>/admin/reload`` with the admin key (the variable ``reload.admin_env`` names; ``reload.enforce=true``
also takes the gate out of shadow mode), or SIGHUP to ``reload.pid``; without either the command says how.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig

import controllers
from data_builders.gates import gate_named
from data_builders.points.store import load_points
import trainers.evaluate.config  # noqa: F401 - its schemas (and the logger's), stored before Hydra composes
from recipes import CONFIG_DIR
from runtime.controller_hooks import checked
from trainers.evaluate.report import markdown_table, with_interval
from trainers.evaluate.shadow import ACTING, ON_POSITIVE
from trainers.intervals import BootstrapSpec, auroc_interval, mean_interval, paired_difference_interval


def decisions(controller, x, gate) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, whether the gate acts) on inputs ``x`` at the controller's τ."""
    probs = controller.predict_proba(x).numpy()
    high = probs >= controller.tau
    return probs, (high if ACTING[gate.moment] == gate.actions[0] else ~high)


def score(name: str, controller, x, labels: np.ndarray, gate, spec: BootstrapSpec) -> dict:
    from sklearn.metrics import roc_auc_score   # why here: sklearn loads in ~1 s

    probs, acts = decisions(controller, x, gate)
    hit = (acts & (labels == 1)).astype(float)     # acting where the label says the answer rests on it
    two = len(set(labels.tolist())) == 2
    ci = auroc_interval(probs, labels, spec) if two else None
    act_ci, hit_ci = mean_interval(acts.astype(float), spec), mean_interval(hit, spec)
    out = {"name": name, "tau": float(controller.tau), "auroc": float(roc_auc_score(labels, probs)) if two else None,
           "auroc_ci": list(ci) if ci else None, "acting": float(acts.mean()),
           "acting_ci": list(act_ci) if act_ci else None, "_hit": hit}
    if ON_POSITIVE[gate.moment] == "lost":
        return out | {"acc_change": -float(hit.mean()), "acc_change_ci": [-hit_ci[1], -hit_ci[0]] if hit_ci else None}
    return out | {"acc_change": None, "acc_change_ci": None, "answers_changed": float(hit.mean()),
                  "answers_changed_ci": list(hit_ci) if hit_ci else None}


def compare(cfg: DictConfig) -> dict:
    gate = gate_named(cfg.gate)
    points = load_points(cfg.points, kind=gate.kind, featurizer=gate.featurizer.id)
    if (points.manifest.get("task_source") or {}).get("source") != "capture":
        raise ValueError(f"points={cfg.points}: not built from captured traffic (python -m data_builders.build "
                         f"source=capture kind={gate.kind} ...): promote compares gates on the traffic they serve")
    held = points.split(cfg.split)
    if len(held) < 2:
        raise ValueError(f"points={cfg.points}: {len(held)} points in split {cfg.split!r}; capture more traffic or "
                         f"build with a larger capture.test_fraction")
    x, labels = gate.featurizer.controller_input(held.features), np.asarray(held.points["label"])
    spec = BootstrapSpec(level=cfg.bootstrap.level, replicates=cfg.bootstrap.replicates, seed=cfg.bootstrap.seed)
    policy = points.manifest["backend"]
    rows = {}
    for name, path in (("serving", cfg.serving), ("candidate", cfg.candidate)):
        controller = checked(controllers.load(path), gate.name, policy, strict=cfg.strict)
        rows[name] = score(name, controller, x, labels, gate, spec)
    hits = rows["candidate"].pop("_hit"), rows["serving"].pop("_hit")
    reasons = []
    a_c, a_s = rows["candidate"]["auroc"], rows["serving"]["auroc"]
    if a_c is not None and a_s is not None and a_c < a_s - cfg.tolerance.auroc:
        reasons.append(f"AUROC {a_c:.3f} < serving {a_s:.3f} - {cfg.tolerance.auroc}")
    delta, diff = None, None
    if ON_POSITIVE[gate.moment] == "lost":      # an answer change with a sign: the accuracy tolerance applies
        diff = paired_difference_interval(-hits[0], -hits[1], spec)
        delta = rows["candidate"]["acc_change"] - rows["serving"]["acc_change"]
        if delta < -cfg.tolerance.accuracy:
            reasons.append(f"estimated accuracy change {delta:+.3f} against serving (< -{cfg.tolerance.accuracy})")
    return {"gate": gate.name, "points": str(Path(cfg.points).resolve()), "split": cfg.split, "n": len(held),
            "positives": int(labels.sum()), "serving": rows["serving"], "candidate": rows["candidate"],
            "acc_change_delta": delta, "acc_change_delta_ci": list(diff) if diff else None,
            "accepted": not reasons, "refused_because": reasons}


def install(candidate: str, serving: str) -> str:
    """Put ``candidate`` at ``serving`` (see the module doc); returns what was done."""
    src, dst = Path(candidate).resolve(), Path(serving)
    if dst.is_symlink() or not dst.exists():
        tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(src, target_is_directory=True)
        os.replace(tmp, dst)        # atomic: a reload reads the old checkpoint or the new one, never neither
        return f"{dst} -> {src}"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    staged = dst.with_name(f".{dst.name}.{os.getpid()}.new")
    shutil.copytree(src, staged)
    previous = dst.with_name(f"{dst.name}.previous-{stamp}")
    os.rename(dst, previous)
    os.rename(staged, dst)
    return f"{dst} replaced by a copy of {src} (the previous one: {previous})"


def reload(cfg: DictConfig) -> str:
    if cfg.reload.endpoint:
        import httpx

        key = os.environ.get(cfg.reload.admin_env or "", "")
        if not key:
            raise SystemExit(f"reload.endpoint is set but ${cfg.reload.admin_env} (the admin key) is not")
        body = {"modes": {cfg.gate: "enforce"}} if cfg.reload.enforce else {}
        r = httpx.post(cfg.reload.endpoint.rstrip("/") + "/admin/reload", headers={"Authorization": f"Bearer {key}"},
                       json=body, timeout=cfg.reload.timeout_s)
        if r.status_code != 200:
            raise SystemExit(f"installed, but the endpoint's reload failed ({r.status_code}): {r.text[:500]}")
        return f"endpoint reloaded: {r.json()}"
    if cfg.reload.pid:
        os.kill(int(cfg.reload.pid), signal.SIGHUP)
        return f"SIGHUP sent to {cfg.reload.pid}"
    return "reload the endpoint: kill -HUP <its pid>, or POST /admin/reload with the admin key"


def table(result: dict) -> str:
    moment = gate_named(result["gate"]).moment
    signed = ON_POSITIVE[moment] == "lost"
    rows = [[r["name"], f"{r['tau']:.3f}", with_interval(r["auroc"], r["auroc_ci"], "{:.3f}"),
             with_interval(r["acting"], r["acting_ci"], "{:.1%}"),
             with_interval(r["acc_change"], r["acc_change_ci"], "{:+.3f}") if signed else
             with_interval(r["answers_changed"], r["answers_changed_ci"], "{:.1%}")]
            for r in (result["serving"], result["candidate"])]
    return markdown_table(["gate", "τ", "AUROC (gold-free labels)", f"acts ({ACTING[moment]})",
                           "est. accuracy change" if signed else "answers changed (no sign without gold)"], rows)


def run(cfg: DictConfig) -> dict:
    result = compare(cfg)
    print(f"{result['gate']}: {result['n']} held-out moments ({result['split']} split of {result['points']}), "
          f"{result['positives']} labelled 1")
    print(table(result))
    if result["acc_change_delta"] is not None:
        print(f"candidate - serving, est. accuracy change: "
              f"{with_interval(result['acc_change_delta'], result['acc_change_delta_ci'], '{:+.3f}')}")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "promote.json").write_text(json.dumps(result, indent=2))
    if not result["accepted"]:
        print("refused: " + "; ".join(result["refused_because"]))
        raise SystemExit(1)
    if cfg.dry_run:
        print("accepted (dry run: nothing installed)")
        return result
    print("accepted: " + install(cfg.candidate, cfg.serving))
    print(reload(cfg))
    return result


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="promote")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
