"""Bearer API keys: where they come from, and the rule that a server reachable from other machines has some."""
from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}


def check_key(key: str, where: str) -> str:
    """``key`` if a client can send it: a bearer token travels in an HTTP header, whose bytes are read as Latin-1,
    so a key with non-ASCII (or control) characters could never match and would lock every client out of a server
    that looks up. Refused at start-up, naming where it came from (never the key)."""
    if not (key.isascii() and key.isprintable()):
        raise ValueError(f"{where}: an API key must be printable ASCII (it is sent in an HTTP header, so this one "
                         f"could never authenticate); replace it")
    if any(c.isspace() for c in key):
        # a bearer token has no whitespace (RFC 6750); in a key file, a comment after a key once read as one
        raise ValueError(f"{where}: an API key has no spaces (a comment goes on a line of its own, starting with #)")
    return key


def load_api_keys(cfg: Any) -> frozenset[str]:
    """Keys from the environment variable ``cfg.env`` (comma-separated) and the file ``cfg.file`` (one per line; a
    line that starts with ``#`` is a comment, and a ``#`` anywhere else is part of the key). A named file that does
    not exist is an error, not an open server; so is a key no client could send (:func:`check_key`)."""
    keys: set[str] = set()
    if cfg.env and os.environ.get(cfg.env):
        entries = [k.strip() for k in os.environ[cfg.env].split(",")]
        keys.update(check_key(k, f"${cfg.env}, key {i + 1}") for i, k in enumerate(entries) if k)
    if cfg.file:
        path = Path(cfg.file)
        if not path.is_file():
            raise FileNotFoundError(f"auth.file={cfg.file}: no such file (one API key per line)")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                keys.add(check_key(line, f"auth.file={cfg.file}, line {n}"))
    return frozenset(keys)


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False     # a host name or 0.0.0.0 / :: (every interface): reachable from elsewhere


def check_bind(host: str, keys: frozenset[str], env: str | None) -> None:
    """Refuse to serve ``host`` beyond this machine without an API key."""
    if not keys and not is_loopback(host):
        raise SystemExit(f"refusing to serve on {host} without an API key: set {env or 'auth.env'} (comma-separated "
                         f"keys) or auth.file=<file with one key per line>, or bind host=127.0.0.1")


def key_matches(given: str, keys: frozenset[str]) -> bool:
    # constant-time per key, and every key compared, so timing says nothing about which or how much matched
    return any([secrets.compare_digest(given.encode(), k.encode()) for k in keys])
