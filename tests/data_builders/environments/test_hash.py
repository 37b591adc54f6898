"""HashEnv.compute_hash: standard digests, the five custom hashes and their test vectors."""
from __future__ import annotations

import hashlib

import pytest

from data_builders.environments import ENVIRONMENTS, serialize
from data_builders.environments.hash import HashEnv

CUSTOM = ("fnv1a_custom", "djb2_custom", "sdbm_custom", "murmur_custom", "jenkins_custom")


def h(input_string, algorithm, env=None):
    return (env or HashEnv()).call("compute_hash", {"input_string": input_string, "algorithm": algorithm})


def ok(algorithm, echo, digest):
    return {"success": True, "algorithm": algorithm, "input": echo, "hash": digest}


def test_registered_and_exposed():
    assert ENVIRONMENTS["HashEnv"] is HashEnv
    assert [s["function"]["name"] for s in HashEnv().tool_specs()] == ["compute_hash"]


@pytest.mark.parametrize(
    ("algorithm", "abc", "empty"),
    [
        ("fnv1a_custom", "45c643068c37529f", "cbf29c3a299ccc67"),
        ("djb2_custom", "0001102b5419dc83", "00000000abcd0731"),
        ("sdbm_custom", "92aeef0ddd4614c0", "1f2e3d4c5b6a7980"),
        ("murmur_custom", "2ee7bdea66bd41dc", "0000000095c9e361"),
        ("jenkins_custom", "a9083dd89eaa41b6", "7a6b5c4d3e2f1001"),
    ],
)
def test_benchmark_custom_vectors(algorithm, abc, empty):
    # The benchmark's spot check: "abc" vectors, and "" gives the zero-padded offset.
    assert h("abc", algorithm) == ok(algorithm, "abc", abc)
    assert h("", algorithm) == ok(algorithm, "", empty)


@pytest.mark.parametrize(
    ("algorithm", "digest"),
    [
        ("md5", "900150983cd24fb0d6963f7d28e17f72"),
        ("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ],
)
def test_standard_digests(algorithm, digest):
    out = h("abc", algorithm)
    assert out == ok(algorithm, "abc", digest)
    assert list(out) == ["success", "algorithm", "input", "hash"]


def test_empty_string_standard_digests():
    assert h("", "md5")["hash"] == "d41d8cd98f00b204e9800998ecf8427e"
    assert h("", "sha1")["hash"] == "da39a3ee5e6b4b0d3255bfef95601890afd80709"


def test_custom_scheme_on_multibyte_utf8():
    # "é" is two UTF-8 bytes; apply the benchmark's recurrence by hand: h = ((h ^ b) * prime) mod 2^64.
    offset, prime = 0xCBF29C3A299CCC67, 1099511628249
    expected = offset
    for b in (0xC3, 0xA9):
        expected = ((expected ^ b) * prime) % 2**64
    assert h("é", "fnv1a_custom")["hash"] == f"{expected:016x}"
    assert h("é", "md5")["hash"] == hashlib.md5("é".encode()).hexdigest()


def test_custom_output_is_always_16_lowercase_hex_digits():
    for algorithm in CUSTOM:
        for text in ("a", "Zz9", "x" * 50):
            digest = h(text, algorithm)["hash"]
            assert len(digest) == 16 and digest == digest.lower() and int(digest, 16) < 2**64


def test_algorithm_name_is_stripped_and_lowercased():
    assert h("abc", "  MD5 \n") == ok("md5", "abc", "900150983cd24fb0d6963f7d28e17f72")
    assert h("abc", "JENKINS_CUSTOM") == ok("jenkins_custom", "abc", "a9083dd89eaa41b6")


def test_unknown_algorithm_echoes_the_name_as_given():
    assert h("abc", " Blake2 ") == {"success": False, "message": "Unknown algorithm:  Blake2 "}
    assert h("abc", "fnv1a") == {"success": False, "message": "Unknown algorithm: fnv1a"}
    # The algorithm is checked before the input is used, so a bad input does not matter here.
    assert h(123, "crc32") == {"success": False, "message": "Unknown algorithm: crc32"}


def test_input_echo_is_cut_to_200_chars():
    exact = "a" * 200
    assert h(exact, "md5")["input"] == exact
    longer = "b" * 200 + "cd"
    out = h(longer, "sha1")
    assert out["input"] == "b" * 200 + "..."
    assert out["hash"] == hashlib.sha1(longer.encode()).hexdigest()  # the whole input is hashed


def test_runtime_errors_and_pipeline_checks():
    assert h(123, "md5") == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'encode'"}
    assert h("abc", 5) == {
        "success": False, "message": "[TOOL_RUNTIME_ERROR] AttributeError: 'int' object has no attribute 'strip'"}
    lone_surrogate = h("\ud800", "md5")
    assert lone_surrogate["success"] is False
    assert lone_surrogate["message"].startswith("[TOOL_RUNTIME_ERROR] UnicodeEncodeError:")
    env = HashEnv()
    assert env.call("compute_hash", {"input_string": "abc"}) == {
        "success": False, "message": "Missing required parameter algorithm."}
    assert env.call("compute_hash", {"input_string": "x" * 5001, "algorithm": "md5"}) == {
        "success": False, "message": "Argument 'input_string' too long (5001 chars, max 5000)."}
    assert env.call("sha", {}) == {"success": False, "message": "Tool sha not available in this task."}


def test_serialisation():
    assert serialize(h("abc", "djb2_custom")) == (
        '{"success": true, "algorithm": "djb2_custom", "input": "abc", "hash": "0001102b5419dc83"}')
