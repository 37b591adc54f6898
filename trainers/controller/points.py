"""Decision points for a controller recipe: reuse a built dataset, or build it (``data_builders.build``).

The build configuration is the ``build`` config composed by Hydra, with the fit run's ``model``, ``backend``
and ``tasks`` groups, its ``source`` and ``capture`` (``source=capture capture.dir=...``: the points are the
captured traffic's moments, labelled without gold) and the recipe's ``points.build`` keys on top. Unless
``points.dir`` names a dataset, the dataset lives in ``outputs/points/<kind>/<source>-<hash>``, the hash taken over that whole build
configuration: the same recipe reuses its points (a complete build only loads them back), a changed task
set, policy or builder setting builds a new dataset instead of tripping over the old one.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

import data_builders.build
from data_builders.backends.loading import resolve_dtype
from data_builders.gates import gate_named, gate_of_kind
from data_builders.points.store import CorruptDataset, PointSet, load_points, read_manifest
from recipes import compose


def build_config(cfg: DictConfig, kind: str | None = None) -> DictConfig:
    """``kind``: the points' kind; by default the recipe's gate's (a controller recipe is its gate), while a policy
    recipe that learns from decision points (tool_dpo: probe points) names it."""
    recipe = cfg.recipe
    kind = kind or gate_named(recipe.name).kind
    build = compose("build", [f"kind={kind}"])
    for group in ("model", "backend", "tasks"):   # replaced whole: another source has other keys
        build[group] = cfg[group]
    build.source, build.capture = cfg.get("source", "tasks"), cfg.capture if "capture" in cfg else build.capture
    build = OmegaConf.merge(build, recipe.points.build)   # typed: a key build.yaml lacks fails here
    if not recipe.points.get("dir"):
        ident = OmegaConf.to_container(build, resolve=True)
        for key in ("out_dir", "overwrite", "checkpoints"):   # where it goes, and paths model.adapter resolved
            ident.pop(key)
        if build.source == "capture" and build.capture.dir and Path(build.capture.dir).is_dir():
            # what the capture holds now: traffic captured since the last fit makes a new dataset, not a reused one
            ident["capture_files"] = {p.name: p.stat().st_size
                                      for p in sorted(Path(build.capture.dir).glob("capture-*.jsonl"))}
        # the dtype the states are computed in, not the word: "auto" is bf16 on a GPU and fp32 on a CPU
        ident["model"]["dtype"] = resolve_dtype(ident["model"]["dtype"], ident["model"]["device"])
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:10]
        source = "capture" if build.source == "capture" else build.tasks.source
        build.out_dir = str(Path(recipe.points.root) / kind / f"{source}-{digest}")
    else:
        build.out_dir = str(recipe.points.dir)
    return build


def decision_points(cfg: DictConfig, command: str = "python -m trainers.fit",
                    kind: str | None = None) -> tuple[PointSet, DictConfig]:
    """The recipe's decision-point dataset (built or resumed if incomplete) and the build config behind it;
    ``kind`` as for :func:`build_config`."""
    kind = kind or gate_named(cfg.recipe.name).kind
    featurizer = gate_of_kind(kind).featurizer.id
    build = build_config(cfg, kind)
    manifest = Path(build.out_dir) / "manifest.json"
    complete = manifest.is_file() and read_manifest(manifest).get("complete")   # names a damaged file
    if cfg.recipe.points.get("dir") and not complete:
        raise FileNotFoundError(f"points.dir={build.out_dir}: no complete decision-point dataset there "
                                f"(build it with python -m data_builders.build kind={kind} out_dir=...)")
    if not complete:
        print(f"building {kind} decision points into {build.out_dir}")
        data_builders.build.run(build, command=f"{command} (its decision-point build)")
    else:
        print(f"reusing {kind} decision points from {build.out_dir}")
    try:
        points = load_points(build.out_dir, kind=kind, featurizer=featurizer)
    except CorruptDataset as e:
        if cfg.recipe.points.get("dir"):
            raise
        # our own dataset, damaged on disk: the build recomputes exactly the damaged shards
        print(f"repairing {kind} decision points in {build.out_dir}:\n{e}")
        data_builders.build.run(build, command=f"{command} (its decision-point build)")
        points = load_points(build.out_dir, kind=kind, featurizer=featurizer)
    return points, build
