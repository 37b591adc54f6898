"""DecodingEnv (docs/guide.md#when2tool-environments): Morse, Caesar and four fixed substitution ciphers, both
directions."""
from __future__ import annotations

import string
from typing import Any, Callable

from .base import ToolEnvironment

# International Morse, A-Z and 0-9 only (anything else encodes to "?").
MORSE: dict[str, str] = {
    "A": ".-", "B": "-...", "C": "-.-.", "D": "-..", "E": ".", "F": "..-.", "G": "--.", "H": "....",
    "I": "..", "J": ".---", "K": "-.-", "L": ".-..", "M": "--", "N": "-.", "O": "---", "P": ".--.",
    "Q": "--.-", "R": ".-.", "S": "...", "T": "-", "U": "..-", "V": "...-", "W": ".--", "X": "-..-",
    "Y": "-.--", "Z": "--..",
    "0": "-----", "1": ".----", "2": "..---", "3": "...--", "4": "....-",
    "5": ".....", "6": "-....", "7": "--...", "8": "---..", "9": "----.",
}
MORSE_DECODE: dict[str, str] = {code: ch for ch, code in MORSE.items()}

_UPPER = string.ascii_uppercase
# Images of A..Z per custom key, as the benchmark defines them. Insertion order matters: it is the order listed in the
# "Unknown custom encoding" message.
_CUSTOM_IMAGES = {
    "alpha7": _UPPER[7:] + _UPPER[:7],
    "reverse": _UPPER[::-1],
    "scramble1": "QWERTYUIOPASDFGHJKLZXCVBNM",
    "scramble2": "MXBFVZNLHTKGDWRJYPAQOIUCES",
}
CUSTOM_ENCODE: dict[str, dict[str, str]] = {k: dict(zip(_UPPER, img)) for k, img in _CUSTOM_IMAGES.items()}
CUSTOM_DECODE: dict[str, dict[str, str]] = {k: dict(zip(img, _UPPER)) for k, img in _CUSTOM_IMAGES.items()}


def morse_encode(message: str) -> str:
    # Split on single spaces, so consecutive spaces give empty words (joined as " /  / ").
    return " / ".join(" ".join(MORSE.get(c, "?") for c in word) for word in message.upper().split(" "))


def morse_decode(message: str) -> str:
    # Each word is stripped too, so "... / ---" and "...  /  ---" decode alike; inner double spaces
    # still yield an empty code, which decodes to "?".
    words = message.strip().split(" / ")
    return " ".join("".join(MORSE_DECODE.get(code, "?") for code in word.strip().split(" ")) for word in words)


def caesar_shift(message: str, shift: int) -> str:
    """Shift letters by ``shift`` (mod 26), keeping case; other characters unchanged.

    Like the original this tests ``str.isalpha``/``isupper``, so a non-ASCII letter is folded into
    a-z/A-Z arithmetically (``é`` becomes some ASCII letter) instead of being left alone.
    """
    out = []
    for c in message:
        if c.isalpha():
            base = 65 if c.isupper() else 97
            out.append(chr((ord(c) - base + shift) % 26 + base))
        else:
            out.append(c)
    return "".join(out)


def _custom_error(key: Any) -> dict:
    return {"success": False,
            "message": f"Unknown custom encoding: {key}. Available: {list(_CUSTOM_IMAGES)}"}


class DecodingEnv(ToolEnvironment):
    name = "DecodingEnv"

    def _run(self, text: str, encoding_type: str, key: Any, out_key: str, *,
             morse: Callable[[str], str], sign: int, custom: dict[str, dict[str, str]]) -> dict:
        etype = encoding_type.strip().lower()
        if etype == "morse":
            result = morse(text)
        elif etype == "caesar":
            if key is None:
                return {"success": False, "message": "Caesar cipher requires a shift key."}
            # The schema types key as a string, so it arrives uncoerced: int() parses "7" and
            # truncates 7.9; "abc" or "" raise ValueError, reported as a runtime error.
            result = caesar_shift(text, sign * (int(key) % 26))
        elif etype == "custom":
            if key is None or key not in custom:  # an unhashable key (list) raises TypeError here
                return _custom_error(key)
            mapping = custom[key]
            # Encode uppercases the whole message first ("ß" -> "SS"); decode uppercases only for
            # the lookup, so an unmapped character comes back as given.
            chars = text.upper() if out_key == "encoded" else text
            result = "".join(mapping.get(c.upper(), c) for c in chars)
        else:
            return {"success": False, "message": f"Unknown encoding: {encoding_type}"}
        return {"success": True, out_key: result, "encoding_type": etype,
                "input_length": len(text), "output_length": len(result)}

    def decode(self, encoded_message: str, encoding_type: str, key: Any = None) -> dict:
        return self._run(encoded_message, encoding_type, key, "decoded",
                         morse=morse_decode, sign=-1, custom=CUSTOM_DECODE)

    def encode(self, message: str, encoding_type: str, key: Any = None) -> dict:
        return self._run(message, encoding_type, key, "encoded",
                         morse=morse_encode, sign=1, custom=CUSTOM_ENCODE)
