"""Build a decision-point dataset: ``python -m data_builders.build kind=probe|flip|commit tasks=… model=…``.

Tasks of the requested splits are cut into fixed shards of ``shard_size``; each shard is one batched rollout
whose points are written atomically. A killed build resumes where it stopped (rerun the same command) and
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
from tqdm.auto import tqdm

from data_builders.config import BuildConfig   # its schema, stored before Hydra composes
from recipes import CONFIG_DIR

from .backends import malloc
from .environments.isolation import announce as announce_sandbox
from .executors import executor_from_config
from .gates import gate_of_kind
from .agent.loop import Agent
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
    """One shard's points: ``(kind, tasks, splits, builder settings)`` labelled on ``engine`` (runs where it is);
    ``progress`` gets each episode's end (a count is all the driver wants: the item itself stays here)."""
    kind, tasks, splits, builder = shard
    return gate_of_kind(kind).labeler_fn(engine, tasks, splits, OmegaConf.create(builder),
                          progress=(lambda _traj: progress(None)) if progress else None)


def run(cfg: DictConfig, command: str | None = None) -> dict:
    """Build (or resume) ``cfg.out_dir``; ``command`` is recorded in the manifest as how to rebuild it."""
    kind = cfg.kind
    announce_sandbox(cfg)
    gate = gate_of_kind(kind)      # an unknown kind is refused here, naming the known ones
    tasks = [t for split in cfg.splits for t in tasks_from_config(cfg, split)]
    # the settings the labelers read, flat (the dataset's identity in its manifest): the agent group's four, and the
    # build's own
    builder = {k: cfg.agent.get(k) if k in BuildConfig.AGENT_KEYS else cfg.get(k)
               for k in ("max_rounds", "max_new_tokens", "call_format", "feature_mode", "layers", "forced_answer_tokens",
                         "verify_rounds", "commit_mode", "commit_label", "val_fraction", "seed")}
    builder = OmegaConf.to_container(OmegaConf.create(builder), resolve=True)
    # The agent's own checks, here before the model loads (a float or negative max_new_tokens) and below before
    # the store is opened (a budget that leaves no room to generate): nothing is written under a bad setting.
    agent_cfg = agent_config(OmegaConf.create(builder), "default", 1)
    shards = [tasks[i:i + cfg.shard_size] for i in range(0, len(tasks), cfg.shard_size)]
    # The engine loads where the shards run (here, or once per Ray worker); the driver needs only its identity.
    with executor_from_config(cfg.get("executor"), cfg.model, cfg.get("backend")) as executor:
        # local: the engine itself measures each environment's prompt; ray: its identity gives the context
        Agent(getattr(executor, "engine", executor.info), agent_cfg).check_tasks(tasks)
        manifest = {"kind": kind, "task_hash": task_hash(tasks), "n_tasks": len(tasks), "n_shards": len(shards),
                    "task_source": OmegaConf.to_container(cfg.tasks, resolve=True),
                    "backend": executor.info.fingerprint, "featurizer": featurizer_id(kind),
                    "label_rule": gate.label_rule(cfg), "shard_size": cfg.shard_size, "builder": builder}
        # Opening locks the directory and verifies the finished shards: missing, truncated, swapped or foreign
        # files are deleted there, so this loop recomputes exactly those (and the shards never finished).
        with PointStore(cfg.out_dir, manifest, overwrite=cfg.overwrite) as store:
            done = store.done()
            todo = [(i, (kind, chunk, [split_of(t, cfg.val_fraction, cfg.seed) for t in chunk], builder))
                    for i, chunk in enumerate(shards) if i not in done]
            with tqdm(total=len(tasks), desc=f"build {kind}", unit="task",
                      initial=sum(len(shards[i]) for i in done)) as bar:
                # The bar moves as each episode ends (a shard is one batched rollout of shard_size episodes: per
                # shard, it sat still for minutes). The store is the single merge point: each shard is written
                # once, by this process, as it arrives.
                for i, (rows, tensors) in executor.map(label_shard, todo, on_tick=lambda _i: bar.update(1)):
                    store.write_shard(i, rows, tensors)
            ds = load_points(cfg.out_dir, require_complete=False)
            table, counts = counts_table(ds.points)
            positives = int(sum(ds.points["label"])) if len(ds) else 0
            extra = {}
            if len(ds) and "flip_class" in ds.points.column_names:    # a labeler that classifies its flips
                extra = {"flip_classes": dict(Counter(ds.points["flip_class"]))}
            store.finalize({"points": len(ds), "positives": positives, "by_split_category": counts, **extra},
                           command=command)
    print(table)
    if extra:
        n = len(ds)
        print("flip classes: " + ", ".join(f"{k} {v} ({v / n:.1%})" for k, v in sorted(extra["flip_classes"].items())))
    if gate.one_point_per_task and len(ds) < len(tasks):
        print(f"{len(tasks) - len(ds)} of {len(tasks)} tasks not labelled: their prompt leaves no room for "
              f"agent.max_new_tokens={cfg.agent.max_new_tokens} in the context (see the warnings above)")
    print(f"dataset: {Path(cfg.out_dir).resolve()}")
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
