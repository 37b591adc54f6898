"""DecodingEnv: Morse, Caesar and custom ciphers, both tools, every error message."""
from __future__ import annotations

import string

import pytest

from data_builders.environments import ENVIRONMENTS, serialize
from data_builders.environments.decoding import DecodingEnv

KEYS_MSG = "Available: ['alpha7', 'reverse', 'scramble1', 'scramble2']"
A_Z = string.ascii_uppercase


def enc(message, encoding_type, key=None, **extra):
    args = {"message": message, "encoding_type": encoding_type, **extra}
    if key is not None:
        args["key"] = key
    return DecodingEnv().call("encode", args)


def dec(encoded, encoding_type, key=None):
    args = {"encoded_message": encoded, "encoding_type": encoding_type}
    if key is not None:
        args["key"] = key
    return DecodingEnv().call("decode", args)


def fail(message):
    return {"success": False, "message": message}


def test_registered_and_exposed_sorted():
    assert ENVIRONMENTS["DecodingEnv"] is DecodingEnv
    assert [s["function"]["name"] for s in DecodingEnv().tool_specs()] == ["decode", "encode"]


# --- payloads --------------------------------------------------------------------------------------

def test_success_payloads_exact_with_key_order():
    out = enc("sos", " MORSE ")
    assert out == {"success": True, "encoded": "... --- ...", "encoding_type": "morse",
                   "input_length": 3, "output_length": 11}
    assert list(out) == ["success", "encoded", "encoding_type", "input_length", "output_length"]
    out = dec("... --- ...", "Morse")
    assert out == {"success": True, "decoded": "SOS", "encoding_type": "morse",
                   "input_length": 11, "output_length": 3}
    assert list(out) == ["success", "decoded", "encoding_type", "input_length", "output_length"]
    assert serialize(dec("Khoor", "caesar", "3")) == (
        '{"success": true, "decoded": "Hello", "encoding_type": "caesar", "input_length": 5, "output_length": 5}')


# --- Morse -------------------------------------------------------------------------------------------

def test_morse_encode_letters_digits_words_and_unknowns():
    assert enc("Hello World", "morse")["encoded"] == ".... . .-.. .-.. --- / .-- --- .-. .-.. -.."
    assert enc("route 66", "morse")["encoded"] == ".-. --- ..- - . / -.... -...."
    assert enc("A!", "morse")["encoded"] == ".- ?"  # outside A-Z/0-9 -> "?"
    assert enc("a  b", "morse")["encoded"] == ".- /  / -..."  # split on single spaces: an empty word
    assert enc("", "morse")["encoded"] == ""


def test_morse_decode_words_unknown_codes_and_spacing():
    assert dec("  .... .. / - .... . .-. .  ", "morse")["decoded"] == "HI THERE"
    assert dec(".- ...---... -----", "morse")["decoded"] == "A?0"
    assert dec(".-  -...", "morse")["decoded"] == "A?B"  # a double space yields an empty code
    assert dec(".-  /  -...", "morse")["decoded"] == "A B"  # each word is stripped
    assert dec("", "morse") == {"success": True, "decoded": "?", "encoding_type": "morse",
                                "input_length": 0, "output_length": 1}


def test_morse_round_trip_every_symbol():
    text = A_Z + " " + string.digits
    encoded = enc(text, "morse")["encoded"]
    assert encoded.count(" / ") == 1 and len(encoded.split()) == 36 + 1
    assert dec(encoded, "morse")["decoded"] == text


# --- Caesar ------------------------------------------------------------------------------------------

def test_caesar_shifts_letters_keeping_case():
    assert enc("Hello, World!", "caesar", "3")["encoded"] == "Khoor, Zruog!"
    assert dec("Khoor, Zruog!", "caesar", "3")["decoded"] == "Hello, World!"
    assert enc("xyz XYZ", "caesar", "3")["encoded"] == "abc ABC"
    assert enc("ROSE", "CAESAR", "13")["encoded"] == "EBFR"


@pytest.mark.parametrize(("key", "expected"), [(3, "DEF"), ("29", "DEF"), ("-23", "DEF"), (3.9, "DEF"),
                                                (True, "BCD"), ("0", "ABC"), ("-1", "ZAB")])
def test_caesar_key_is_read_with_int(key, expected):
    assert enc("ABC", "caesar", key)["encoded"] == expected
    assert dec(expected, "caesar", key)["decoded"] == "ABC"


def test_caesar_round_trip_all_shifts():
    text = "The quick brown fox, 1926!"
    for k in range(-30, 31):
        assert dec(enc(text, "caesar", str(k))["encoded"], "caesar", str(k))["decoded"] == text


def test_caesar_non_ascii_letters_follow_the_original_arithmetic():
    # isalpha() is true for "é", so it is folded into a-z: chr((233 - 97 + 3) % 26 + 97) == "j".
    assert enc("é", "caesar", "3")["encoded"] == "j"


def test_caesar_errors():
    msg = "Caesar cipher requires a shift key."
    assert enc("abc", "caesar") == fail(msg)
    assert dec("abc", "caesar") == fail(msg)
    assert enc("abc", "caesar", "abc") == fail(
        "[TOOL_RUNTIME_ERROR] ValueError: invalid literal for int() with base 10: 'abc'")
    assert dec("abc", "caesar", "") == fail(
        "[TOOL_RUNTIME_ERROR] ValueError: invalid literal for int() with base 10: ''")
    assert dec("abc", "caesar", "3.5") == fail(
        "[TOOL_RUNTIME_ERROR] ValueError: invalid literal for int() with base 10: '3.5'")


# --- custom ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("key", "image"),
    [("alpha7", "HIJKLMNOPQRSTUVWXYZABCDEFG"), ("reverse", "ZYXWVUTSRQPONMLKJIHGFEDCBA"),
     ("scramble1", "QWERTYUIOPASDFGHJKLZXCVBNM"), ("scramble2", "MXBFVZNLHTKGDWRJYPAQOIUCES")],
)
def test_custom_maps_and_inverses(key, image):
    assert enc(A_Z, "custom", key)["encoded"] == image
    assert dec(image, "custom", key)["decoded"] == A_Z
    assert dec(image.lower(), "custom", key)["decoded"] == A_Z  # looked up by uppercase
    assert enc(A_Z.lower(), "custom", key)["encoded"] == image  # encode uppercases first


def test_custom_examples_and_non_letters():
    assert enc("Hello, world 42!", "custom", "alpha7")["encoded"] == "OLSSV, DVYSK 42!"
    assert dec("OLSSV, DVYSK 42!", "custom", "alpha7")["decoded"] == "HELLO, WORLD 42!"
    assert enc("wizard", " Custom ", "reverse") == {"success": True, "encoded": "DRAZIW", "encoding_type": "custom",
                                                    "input_length": 6, "output_length": 6}
    # Encode uppercases the message first ("ß" -> "SS"), so the output can be longer than the input.
    assert enc("straße", "custom", "alpha7")["encoded"] == "ZAYHZZL"
    # Decode leaves a character whose uppercase is not a single A-Z letter exactly as given.
    assert dec("straße!", "custom", "alpha7")["decoded"] == "LMKTßX!"


def test_custom_errors():
    assert enc("abc", "custom", "rot13") == fail(f"Unknown custom encoding: rot13. {KEYS_MSG}")
    assert dec("abc", "custom", "Alpha7") == fail(f"Unknown custom encoding: Alpha7. {KEYS_MSG}")
    assert dec("abc", "custom") == fail(f"Unknown custom encoding: None. {KEYS_MSG}")
    assert enc("abc", "custom", 7) == fail(f"Unknown custom encoding: 7. {KEYS_MSG}")
    assert enc("abc", "custom", ["alpha7"]) == fail("[TOOL_RUNTIME_ERROR] TypeError: unhashable type: 'list'")


# --- shared errors and pipeline -----------------------------------------------------------------------

def test_unknown_encoding_echoes_type_as_given():
    assert enc("abc", " Base64 ") == fail("Unknown encoding:  Base64 ")
    assert dec("abc", "rot13", "13") == fail("Unknown encoding: rot13")


def test_bad_argument_types_and_missing_arguments():
    assert enc(123, "morse") == fail("[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'upper'")
    assert dec("...", None) == fail("[TOOL_RUNTIME_ERROR] AttributeError: 'NoneType' object has no attribute 'strip'")
    env = DecodingEnv()
    assert env.call("decode", {"encoding_type": "morse"}) == fail("Missing required parameter encoded_message.")
    assert env.call("encode", {"message": "x"}) == fail("Missing required parameter encoding_type.")
    # Unknown keys are dropped before the tool runs.
    assert enc("e", "morse", shift=3) == {"success": True, "encoded": ".", "encoding_type": "morse",
                                          "input_length": 1, "output_length": 1}
