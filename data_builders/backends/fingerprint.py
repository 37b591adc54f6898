"""A policy's identity: what every decision point, controller contract and cached trajectory is attributed to.

    <model id>@<config hash>                          a base model
    <model id>@<config hash>+adapter:<content hash>   a base model with a peft adapter

The base is named by its id and a hash of its config (the architecture; the weights of a hub or embedded model do
not change under its id). An adapter is named by **its bytes**, never its path: the same adapter reached as
``checkpoints/tool_sft/v3``, ``./checkpoints/…`` or an absolute path is one policy, and an adapter retrained in
place is another, so the controllers fit on the old one refuse it (their hidden states and calls came from other
weights).

Fingerprints written before adapters were hashed ended in ``+<the adapter's path as given>``. They are refused
with a message naming the migration (``python -m data_builders.migrate_fingerprints <dir>... --adapter <path>``),
which rewrites a controller checkpoint's contract, or a points dataset's manifest and shard markers, to the hash
of the adapter you name — once, by hand, because only you know which adapter those files came from.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from controllers.names import ADAPTER_TAG, legacy_adapter

# The repository root (parent of the packages); committed checkpoints live under it in a source checkout.
REPO_ROOT = Path(__file__).resolve().parents[2]

# Config keys that say nothing about the weights' function (paths, versions, dtype bookkeeping).
_VOLATILE_CONFIG_KEYS = {"_name_or_path", "transformers_version", "quantization_config", "torch_dtype", "dtype",
                         "_commit_hash", "_attn_implementation_autoset", "architectures"}


def config_hash(config: Any) -> str:
    d = {k: v for k, v in config.to_dict().items() if k not in _VOLATILE_CONFIG_KEYS}
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:12]


def locate_adapter(adapter: str | Path) -> Path | None:
    """The adapter directory ``adapter`` names on this machine: as given (absolute, or relative to the working
    directory), else relative to the repository root (so ``checkpoints/tool_sft/<run>`` works from anywhere), else
    a hub id's files in the local Hugging Face cache; None when none of them holds it."""
    p = Path(adapter).expanduser()
    if p.is_dir():
        return p
    if not p.is_absolute() and (REPO_ROOT / p).is_dir():
        return REPO_ROOT / p
    if len(p.parts) == 2:      # "owner/name": peft downloads it into the hub cache
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(adapter), "adapter_config.json")
        if isinstance(cached, str):
            return Path(cached).parent
    return None


def adapter_files_digest(path: str | Path, h: "hashlib._Hash | None" = None) -> "hashlib._Hash":
    """sha256 over an adapter directory's ``adapter_*`` files (config and weights), names and bytes, in name order:
    what peft loads. ``h``: a hash to continue (a merged copy's key adds the base and dtype first)."""
    h = h or hashlib.sha256()
    files = sorted(Path(path).glob("adapter_*"))
    if not files:
        raise FileNotFoundError(f"adapter {path}: no adapter_* files (adapter_config.json, adapter_model.*)")
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h


def adapter_digest(adapter: str | Path) -> str:
    """The content hash that names an adapter in a fingerprint (16 hex digits of sha256). An adapter this machine
    does not hold (a hub id not downloaded yet) cannot be hashed: that is an error, not a silent path."""
    where = locate_adapter(adapter)
    if where is None:
        raise FileNotFoundError(f"adapter {adapter!r}: not found on this machine (as a path, under the repository, "
                                "or in the Hugging Face cache), so it cannot be identified by its content")
    return adapter_files_digest(where).hexdigest()[:16]


def weights_fingerprint(model_id: str, config: Any, adapter_hash: str | None) -> str:
    """Stable id of the exact weights (module docstring); the same on every engine that loads them, so results are
    attributed to one policy whichever engine produced them. ``adapter_hash``: :func:`adapter_digest` of the
    adapter, taken when its weights were loaded (a backend keeps the identity of the bytes it holds, even if the
    files change on disk afterwards)."""
    return f"{model_id}@{config_hash(config)}" + (f"{ADAPTER_TAG}{adapter_hash}" if adapter_hash else "")


def migrated(fingerprint: str, adapter: str | Path) -> str:
    """A legacy fingerprint with its adapter path replaced by ``adapter``'s content hash."""
    if legacy_adapter(fingerprint) is None:
        raise ValueError(f"{fingerprint!r} is not a legacy fingerprint (no adapter path after '+')")
    return f"{fingerprint.partition('+')[0]}{ADAPTER_TAG}{adapter_digest(adapter)}"
