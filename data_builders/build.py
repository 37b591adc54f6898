"""Build a decision-point dataset: ``python -m data_builders.build kind=probe|flip|commit tasks=… model=…``.

Tasks of the requested splits are cut into fixed shards of ``shard_size``; each shard is one batched rollout
whose points are written atomically. ``source=capture capture.dir=…`` builds from captured traffic instead: the
decision moments of the capture's conversations, replayed against the policy and labelled without gold answers
(data_builders/capture/); ``free_labels=true`` adds those gold-free labels to a task build's points and prints how
they agree with gold. A killed build resumes where it stopped (rerun the same command) and
gives the same points, labels and features, bitwise. Ends with a table of counts per split × label ×
category and one line ``points=… positives=… kind=…``.
"""
from __future__ import annotations

import hashlib
import sys
import warnings
from collections import Counter
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from data_builders.config import BuildConfig   # its schema, stored before Hydra composes
from recipes import CONFIG_DIR

from .backends import malloc
from .environments.isolation import announce as announce_sandbox
from .progress import BudgetBar
from .executors import executor_from_config
from .gates import gate_of_kind
from .agent.loop import Agent
from .capture.records import moments as capture_moments, moments_hash, read_capture, split_of as capture_split
from .points.free_labels import RULES as free_rules, agreement_line, agreement_with_gold
from .points.labelers import agent_config
from .points.store import PointStore, load_points, task_hash
from .tasks import tasks_from_config


def featurizer_id(kind: str) -> dict:
    f = gate_of_kind(kind).featurizer
    return {"name": f.name, "version": f.version}


def split_of(task, val_fraction: float, seed: int) -> str:
    """test stays test; a train task goes to val by a hash of its id (stable, independent of the task list)."""
    if task.split != "train":
        return task.split
    h = int(hashlib.sha256(f"{seed}:{task.id}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "val" if h < val_fraction else "train"


def counts_table(points) -> tuple[str, dict]:
    # a build whose episodes gave no decision point (no answer within max_new_tokens, say) has no columns at all
    c = Counter(zip(points["split"], points["category"], points["label"])) if len(points) else Counter()
    splits = sorted({k[0] for k in c})
    cats = sorted({k[1] for k in c})
    lines = [f"{'split':<7}{'category':<10}{'label=0':>9}{'label=1':>9}{'rate':>7}"]
    counts: dict = {}
    for s in splits:
        for cat in cats:
            n0, n1 = c.get((s, cat, 0), 0), c.get((s, cat, 1), 0)
            if n0 + n1:
                lines.append(f"{s:<7}{cat:<10}{n0:>9}{n1:>9}{n1 / (n0 + n1):>7.2f}")
                counts[f"{s}/{cat}"] = {"0": n0, "1": n1}
    return "\n".join(lines), counts


def label_shard(engine, shard: tuple, progress=None) -> tuple[list[dict], dict]:
    """One shard's points: ``(kind, items, splits, builder settings)`` labelled on ``engine`` (runs where it is):
    items are tasks, or captured moments for ``source=capture`` (the gate's replay labeler); ``progress`` gets
    each episode's (or moment's) end (a count is all the driver wants: the item itself stays here)."""
    kind, items, splits, builder = shard
    gate = gate_of_kind(kind)
    labeler = gate.replay_fn if builder.get("source") == "capture" else gate.labeler_fn
    return labeler(engine, items, splits, OmegaConf.create(builder),
                   progress=(lambda _item: progress(None)) if progress else None)


def default_out_dir(cfg: DictConfig) -> str:
    return cfg.out_dir or f"outputs/points/{cfg.kind}/{'capture' if cfg.source == 'capture' else cfg.tasks.source}"


def capture_items(cfg: DictConfig, kind: str) -> tuple[list[dict], list[str], dict]:
    """``source=capture``: the ``kind`` moments of ``capture.dir``, their splits, and the manifest's source."""
    if not cfg.capture.dir:
        raise ValueError("source=capture needs capture.dir=<the endpoint's capture directory>")
    if not Path(cfg.capture.dir).is_dir():
        raise FileNotFoundError(f"capture.dir={cfg.capture.dir}: no such directory")
    read = read_capture(cfg.capture.dir)
    items, left = capture_moments(read.records, kind)
    splits = [capture_split(m["conversation"], cfg.capture.test_fraction, cfg.val_fraction, cfg.seed) for m in items]
    wanted = set(cfg.splits) | ({"val"} if "train" in cfg.splits else set())
    keep = [i for i, s in enumerate(splits) if s in wanted]
    print(f"capture {cfg.capture.dir}: {len(read.records)} records in {read.files} files"
          + (f" ({read.incomplete_lines} cut by a crash, skipped)" if read.incomplete_lines else "")
          + f"; {len(items)} {kind} moments" + "".join(f"; {n} left out: {why}" for why, n in sorted(left.items())))
    source = {"source": "capture", "dir": str(Path(cfg.capture.dir).resolve()), "records": len(read.records),
              "left_out": left}
    return [items[i] for i in keep], [splits[i] for i in keep], source


def run(cfg: DictConfig, command: str | None = None) -> dict:
    """Build (or resume) ``cfg.out_dir``; ``command`` is recorded in the manifest as how to rebuild it."""
    kind = cfg.kind
    announce_sandbox(cfg)
    gate = gate_of_kind(kind)      # an unknown kind is refused here, naming the known ones
    capture = cfg.get("source", "tasks") == "capture"
    out_dir = default_out_dir(cfg)
    # the settings the labelers read, flat (the dataset's identity in its manifest): the agent group's four, and the
    # build's own
    builder = {k: cfg.agent.get(k) if k in BuildConfig.AGENT_KEYS else cfg.get(k)
               for k in ("max_rounds", "max_new_tokens", "call_format", "feature_mode", "layers", "forced_answer_tokens",
                         "verify_rounds", "commit_mode", "commit_label", "val_fraction", "seed")}
    # gold-free labelling settings join the identity only where used (a build without them keeps its identity)
    if cfg.get("free_labels") or capture:
        builder.update(free_labels=True, agreement_scorer=cfg.get("agreement_scorer"))
    if capture:
        builder.update(source="capture", test_fraction=cfg.capture.test_fraction)
    builder = OmegaConf.to_container(OmegaConf.create(builder), resolve=True)
    # The agent's own checks, here before the model loads (a float or negative max_new_tokens) and below before
    # the store is opened (a budget that leaves no room to generate): nothing is written under a bad setting.
    agent_cfg = agent_config(OmegaConf.create(builder), "default", 1)
    if capture:
        items, splits, source = capture_items(cfg, kind)
        identity, unit = moments_hash(items), "moment"
        label_rule = "gold-free: " + free_rules[kind] if kind in free_rules else gate.label_rule(cfg)
    else:
        items = [t for split in cfg.splits for t in tasks_from_config(cfg, split)]
        splits = [split_of(t, cfg.val_fraction, cfg.seed) for t in items]
        source, identity, unit = OmegaConf.to_container(cfg.tasks, resolve=True), task_hash(items), "task"
        label_rule = gate.label_rule(cfg)
    shards = [(items[i:i + cfg.shard_size], splits[i:i + cfg.shard_size]) for i in range(0, len(items), cfg.shard_size)]
    # The engine loads where the shards run (here, or once per Ray worker); the driver needs only its identity.
    with executor_from_config(cfg.get("executor"), cfg.model, cfg.get("backend")) as executor:
        if not capture:
            # local: the engine itself measures each environment's prompt; ray: its identity gives the context
            Agent(getattr(executor, "engine", executor.info), agent_cfg).check_tasks(items)
        manifest = {"kind": kind, "task_hash": identity, "n_tasks": len(items), "n_shards": len(shards),
                    "task_source": source, "backend": executor.info.fingerprint, "featurizer": featurizer_id(kind),
                    "label_rule": label_rule, "shard_size": cfg.shard_size, "builder": builder}
        # Opening locks the directory and verifies the finished shards: missing, truncated, swapped or foreign
        # files are deleted there, so this loop recomputes exactly those (and the shards never finished).
        with PointStore(out_dir, manifest, overwrite=cfg.overwrite) as store:
            done = store.done()
            todo = [(i, (kind, chunk, chunk_splits, builder))
                    for i, (chunk, chunk_splits) in enumerate(shards) if i not in done]
            with BudgetBar(f"build {kind}", {i: len(shards[i][0]) for i, _ in todo}, unit=unit,
                           done_items=sum(len(shards[i][0]) for i in done), total_items=len(items)) as bar:
                # The bar counts generated tokens (data_builders/progress.py): a shard is one batched rollout
                # whose episodes end together, so a bar of finished tasks sat still for minutes with an ETA of
                # hours. The store is the single merge point: each shard is written once, by this process, as it
                # arrives.
                for i, (rows, tensors) in executor.map(label_shard, todo, on_tick=bar.tick, on_work=bar.work):
                    store.write_shard(i, rows, tensors)
            ds = load_points(out_dir, require_complete=False)
            table, counts = counts_table(ds.points)
            positives = int(sum(ds.points["label"])) if len(ds) else 0
            extra = {}
            if len(ds) and "flip_class" in ds.points.column_names:    # a labeler that classifies its flips
                extra = {"flip_classes": dict(Counter(ds.points["flip_class"]))}
            if len(ds) and "free_label" in ds.points.column_names:    # gold and gold-free labels of the same points
                extra["free_label_agreement"] = agreement_with_gold(ds.points["label"], ds.points["free_label"])
            store.finalize({"points": len(ds), "positives": positives, "by_split_category": counts, **extra},
                           command=command)
    print(table)
    if "flip_classes" in extra:
        n = len(ds)
        print("flip classes: " + ", ".join(f"{k} {v} ({v / n:.1%})" for k, v in sorted(extra["flip_classes"].items())))
    if "free_label_agreement" in extra:
        print(agreement_line(extra["free_label_agreement"]))
    if capture and len(ds) < len(items):
        print(f"{len(items) - len(ds)} of {len(items)} moments not labelled: nothing to compare their answers with "
              f"(the conversation never answered, or an answer stated nothing)")
    if not capture and gate.one_point_per_task and len(ds) < len(items):
        print(f"{len(items) - len(ds)} of {len(items)} tasks not labelled: their prompt leaves no room for "
              f"agent.max_new_tokens={cfg.agent.max_new_tokens} in the context (see the warnings above)")
    print(f"dataset: {Path(out_dir).resolve()}")
    print(f"points={len(ds)} positives={positives} kind={kind}")
    return {"points": len(ds), "positives": positives}


def renamed_agent_overrides(argv: list[str]) -> list[str]:
    """``argv`` with each deprecated top-level agent setting (``max_rounds=2``: the build's own keys before it took
    the agent group) renamed to the agent group's (``agent.max_rounds=2``), with a warning."""
    out = []
    for arg in argv:
        key = arg.split("=", 1)[0]
        if key in BuildConfig.AGENT_KEYS and "=" in arg:
            warnings.warn(f"{key}: deprecated, the build reads the agent group now (agent.{key})", FutureWarning,
                          stacklevel=2)
            arg = f"agent.{arg}"
        out.append(arg)
    return out


@malloc.cli_opt_in   # this process is the job's: CPU backends may tune malloc (data_builders/backends/malloc.py)
@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="build")
def main(cfg: DictConfig) -> None:
    run(cfg, "python -m data_builders.build " + " ".join(HydraConfig.get().overrides.task))


if __name__ == "__main__":
    sys.argv[1:] = renamed_agent_overrides(sys.argv[1:])
    main()
