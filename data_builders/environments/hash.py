"""HashEnv (docs/guide.md#when2tool-environments): standard digests plus five custom 64-bit hashes no model can know
by heart."""
from __future__ import annotations

import hashlib

from .base import ToolEnvironment

INPUT_ECHO_CHARS = 200
_MASK64 = (1 << 64) - 1

# (offset, multiplier) per custom algorithm, the benchmark's constants. All five share one FNV-1a-like scheme and
# differ only in these constants, which is what makes them unguessable without the tool.
CUSTOM_HASHES: dict[str, tuple[int, int]] = {
    "fnv1a_custom": (0xCBF29C3A299CCC67, 1099511628249),
    "djb2_custom": (0xABCD0731, 47),
    "sdbm_custom": (0x1F2E3D4C5B6A7980, 65641),
    "murmur_custom": (0x95C9E361, 1099511628308),
    "jenkins_custom": (0x7A6B5C4D3E2F1001, 6364136223846793018),
}

_STANDARD = {"md5": hashlib.md5, "sha1": hashlib.sha1, "sha256": hashlib.sha256}


def custom_hash(data: bytes, algorithm: str) -> str:
    """XOR each byte in, multiply mod 2^64; 16 zero-padded hex digits (so ``b""`` gives the offset)."""
    h, prime = CUSTOM_HASHES[algorithm]
    for byte in data:
        h = ((h ^ byte) * prime) & _MASK64
    return format(h, "016x")


class HashEnv(ToolEnvironment):
    name = "HashEnv"

    def compute_hash(self, input_string: str, algorithm: str) -> dict:
        algo = algorithm.strip().lower()
        # The algorithm is validated before the input is touched, as in the original: an unknown
        # algorithm is reported even when the input is not a string.
        if algo not in _STANDARD and algo not in CUSTOM_HASHES:
            return {"success": False, "message": f"Unknown algorithm: {algorithm}"}
        # A non-string input fails here (AttributeError) and becomes a runtime-error payload; lone
        # surrogates (possible through JSON) fail the same way with UnicodeEncodeError.
        data = input_string.encode("utf-8")
        digest = _STANDARD[algo](data).hexdigest() if algo in _STANDARD else custom_hash(data, algo)
        echo = input_string if len(input_string) <= INPUT_ECHO_CHARS else input_string[:INPUT_ECHO_CHARS] + "..."
        return {"success": True, "algorithm": algo, "input": echo, "hash": digest}
