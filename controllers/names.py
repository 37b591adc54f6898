"""Is a name a local path or a hub id? One rule for everything toolwise loads by name (controllers here, models
and adapters in the backends' loader), so a missing path is reported as missing instead of being
looked up on the hub as an id it cannot be."""
from __future__ import annotations

from pathlib import Path

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id


def looks_like_path(name: str, file_suffixes: tuple[str, ...] = ()) -> bool:
    """Names only a filesystem path can be: a hub id is ``name`` or ``org/name``, never ``./x``, ``/x``, ``~/x``
    (or a file with one of ``file_suffixes``, e.g. ``.gguf``)."""
    return (name in (".", "..") or name.startswith(("./", "../", "~")) or Path(name).is_absolute()
            or bool(file_suffixes) and name.endswith(file_suffixes))


#: how a policy fingerprint (``<model>@<config hash>[+adapter:<content hash>]``, the ``backend`` of a controller's
#: contract) names a peft adapter: by the hash of its files (data_builders/backends/fingerprint.py)
ADAPTER_TAG = "+adapter:"


def legacy_adapter(fingerprint: str) -> str | None:
    """The adapter *path* of a fingerprint written before adapters were named by their content
    (``<model>@<hash>+<path>``), else None."""
    base, plus, rest = str(fingerprint).partition("+")
    if not plus or "@" not in base or ("+" + rest).startswith(ADAPTER_TAG):
        return None
    return rest


def is_repo_id(name: str) -> bool:
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True
