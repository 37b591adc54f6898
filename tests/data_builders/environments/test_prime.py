"""PrimeEnv: results identical to plain trial division, error messages, bounded cost."""
from __future__ import annotations

import random
import time

from data_builders.environments import serialize
from data_builders.environments.prime import MAX_NTH_PRIME, PrimeEnv


def call(tool, n):
    return PrimeEnv().call(tool, {"n": n})


def trial_division(n):
    """The original's algorithm (plain trial division), used as the reference on small n."""
    out, d = [], 2
    while d * d <= n:
        e = 0
        while n % d == 0:
            n, e = n // d, e + 1
        if e:
            out.append([d, e])
        d += 1
    if n > 1:
        out.append([n, 1])
    return out


def test_is_prime_matches_trial_division():
    for n in range(-3, 3000):
        expected = n >= 2 and trial_division(n) == [[n, 1]]
        assert call("is_prime", n) == {"success": True, "result": expected}, n
    assert serialize(call("is_prime", 7)) == '{"success": true, "result": true}'


def test_is_prime_large_and_adversarial():
    assert call("is_prime", 999_999_999_999_989)["result"] is True  # largest prime below 10^15
    assert call("is_prime", 10**15)["result"] is False
    assert call("is_prime", 31_622_743 * 31_622_741)["result"] is False  # two primes near sqrt(10^15)
    for pseudoprime in (561, 3_215_031_751, 2_152_302_898_747, 3_474_749_660_383, 341_550_071_728_321):
        assert call("is_prime", pseudoprime)["result"] is False, pseudoprime  # Carmichael / strong pseudoprimes


def test_nth_prime():
    assert call("nth_prime", 1) == {"success": True, "result": 2}
    for n, p in [(2, 3), (3, 5), (5, 11), (6, 13), (10, 29), (100, 541), (453, 3203), (1000, 7919),
                 (10_000, 104_729), (78_498, 999_983)]:
        assert call("nth_prime", n)["result"] == p, n
    primes = [n for n in range(2, 2000) if trial_division(n) == [[n, 1]]]
    assert [call("nth_prime", i + 1)["result"] for i in range(len(primes))] == primes


def test_nth_prime_errors_and_guard():
    assert call("nth_prime", 0) == {"success": False, "message": "n must be >= 1."}
    assert call("nth_prime", -4) == {"success": False, "message": "n must be >= 1."}
    # Guard (deviation): the original would count primes one by one up to p_n for any n <= 10^15.
    start = time.perf_counter()
    assert call("nth_prime", MAX_NTH_PRIME) == {"success": True, "result": 15_485_863}
    assert time.perf_counter() - start < 2.0
    assert call("nth_prime", MAX_NTH_PRIME + 1) == {"success": False, "message": "n must be <= 1000000 (tool limit)."}
    assert call("nth_prime", 10**15) == {"success": False, "message": "n must be <= 1000000 (tool limit)."}


def test_factorize_matches_trial_division():
    for n in range(2, 5000):
        assert call("factorize", n) == {"success": True, "result": trial_division(n)}, n
    r = random.Random(11)
    for _ in range(200):
        n = r.randint(10**6, 10**10)
        assert call("factorize", n)["result"] == trial_division(n), n


def test_factorize_large_inputs_fast_and_exact():
    p, q = 31_622_743, 31_622_741  # the two largest primes below sqrt(10^15)
    cases = {
        10**15: [[2, 15], [5, 15]],
        999_999_999_999_989: [[999_999_999_999_989, 1]],
        p * q: [[q, 1], [p, 1]],
        p * p: [[p, 2]],
        2 * 3 * p * 1009: [[2, 1], [3, 1], [1009, 1], [p, 1]],
        99_991**3: [[99_991, 3]],
        2**49: [[2, 49]],
        3**31: [[3, 31]],
    }
    start = time.perf_counter()
    for n, expected in cases.items():
        assert call("factorize", n) == {"success": True, "result": expected}, n
    assert time.perf_counter() - start < 1.0


def test_factorize_errors_and_coercion():
    assert call("factorize", 1) == {"success": False, "message": "n must be >= 2."}
    assert call("factorize", -12) == {"success": False, "message": "n must be >= 2."}
    assert call("factorize", "12") == {"success": True, "result": [[2, 2], [3, 1]]}
    assert call("factorize", 12.7) == {"success": True, "result": [[2, 2], [3, 1]]}
    assert call("factorize", 10**15 + 1) == {"success": False,
                                            "message": "Argument 'n' too large (max 1000000000000000)."}
    assert PrimeEnv().call("factorize", {}) == {"success": False, "message": "Missing required parameter n."}
    assert call("factorize", "twelve") == {"success": False, "message": "Parameter n should have type integer."}
