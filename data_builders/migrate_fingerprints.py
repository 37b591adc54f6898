"""Migrate controller checkpoints and points datasets whose policy fingerprint names an adapter by its path (written
before adapters were identified by their bytes, :mod:`data_builders.backends.fingerprint`) to the adapter's content
hash::

    python -m data_builders.migrate_fingerprints checkpoints/toolgate/<run> outputs/points/<build> \\
        --adapter checkpoints/tool_sft/<run>

Once per directory, by hand: only the user knows which adapter was at that path when the files were written.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .backends.fingerprint import legacy_adapter, migrated
from .points.store import identity_digest, load_points, read_manifest


def _rewrite_json(path: Path, update) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    update(data)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def migrate(directory: str | Path, adapter: str | Path) -> tuple[str, str]:
    """Rewrite one controller checkpoint (``config.json``'s ``contract.backend``) or one points dataset
    (``manifest.json``'s ``backend`` and every shard marker's identity digest, after checking each shard's files
    against the hashes its marker holds) from a legacy fingerprint to ``adapter``'s content hash. Returns (old,
    new); a directory already migrated is left as it is."""
    d = Path(directory)
    if (d / "config.json").is_file() and (d / "model.safetensors").is_file():
        config = json.loads((d / "config.json").read_text(encoding="utf-8"))
        old = config.get("contract", {}).get("backend")
        if not isinstance(old, str):
            raise ValueError(f"{d / 'config.json'}: no contract.backend")
        if legacy_adapter(old) is None:
            return old, old
        new = migrated(old, adapter)
        _rewrite_json(d / "config.json", lambda c: c["contract"].__setitem__("backend", new))
        card = d / "README.md"          # the model card quotes the fingerprint (and a Gates.load snippet)
        if card.is_file():
            card.write_text(card.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
        return old, new
    if (d / "manifest.json").is_file():
        manifest = read_manifest(d / "manifest.json")
        old = manifest.get("backend")
        if not isinstance(old, str) or legacy_adapter(old) is None:
            return old, old
        # the shards are what their markers say (CorruptDataset otherwise), before the identity moves
        load_points(d, require_complete=False)
        new = migrated(old, adapter)
        manifest["backend"] = new
        digest = identity_digest(manifest)
        for marker in sorted(d.glob("shard-*.done")):
            _rewrite_json(marker, lambda m: m.__setitem__("identity", digest))
        _rewrite_json(d / "manifest.json", lambda m: m.__setitem__("backend", new))
        return old, new
    raise FileNotFoundError(f"{d}: neither a controller checkpoint (config.json + model.safetensors) nor a points "
                            "dataset (manifest.json)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m data_builders.migrate_fingerprints",
        description="Migrate controller checkpoints and points datasets whose policy fingerprint names an adapter "
                    "by path to the adapter's content hash.")
    parser.add_argument("dirs", nargs="+", help="controller checkpoint or points dataset directories")
    parser.add_argument("--adapter", required=True,
                        help="the adapter those files were made with (a directory, or a cached hub id)")
    args = parser.parse_args(argv)
    for directory in args.dirs:
        old, new = migrate(directory, args.adapter)
        print(f"{directory}: {'already current' if old == new else f'{old} -> {new}'}")


if __name__ == "__main__":
    main()
