"""PrimeEnv (docs/guide.md#when2tool-environments): primality, the n-th prime and prime factorisation.

The original uses plain trial division with no timeout; the runtime's 10^15 argument cap is its
only bound. Deviations (guards), each returning exactly what the original would have returned:

* ``is_prime`` uses a deterministic Miller-Rabin test (the first 12 prime bases are exact for every
  n < 3.3·10^24) instead of ~10^7 trial divisions for a prime near 10^15.
* ``factorize`` divides out primes below 1000 and splits what remains with Miller-Rabin and
  Brent's Pollard rho (fixed seeds, so deterministic); the result is the same sorted
  ``[[p, e], ...]`` the original's trial division produces, in milliseconds instead of seconds.
* ``nth_prime`` sieves instead of testing candidates one by one, and refuses
  n > :data:`MAX_NTH_PRIME` (the original would run for years on n = 10^15; the sieve for
  n = 10^6 needs ~8 MB and well under a second).
"""
from __future__ import annotations

import math
from collections import Counter

from .base import ToolEnvironment

MAX_NTH_PRIME = 1_000_000
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)  # deterministic below 3.3e24
_SMALL_PRIMES = tuple(p for p in range(2, 1000) if all(p % d for d in range(2, int(p ** 0.5) + 1)))


def is_probable_prime(n: int) -> bool:
    """Exact primality for every n < 3.3·10^24 (far above the 10^15 argument cap)."""
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _pollard_brent(n: int) -> int:
    """A non-trivial factor of the odd composite n (not a prime power of a small prime)."""
    for c in range(1, 200):  # fixed seeds: deterministic; a failed cycle retries with the next c
        y, m, g, r, q = 2, 128, 1, 1, 1
        f = lambda v: (v * v + c) % n  # noqa: E731 - the iteration map
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = f(y)
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(m, r - k)):
                    y = f(y)
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += m
            r *= 2
        if g == n:  # the batch overshot: step back one value at a time
            g = 1
            while g == 1:
                ys = f(ys)
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g
    raise ArithmeticError(f"Pollard rho failed to split {n}")  # not reached for n <= 10^15


def prime_factors(n: int) -> Counter:
    """Prime -> exponent for n >= 2."""
    out: Counter = Counter()
    for p in _SMALL_PRIMES:
        while n % p == 0:
            out[p] += 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if is_probable_prime(m):
            out[m] += 1
            continue
        r = math.isqrt(m)
        if r * r == m:  # perfect squares make rho slow to split; take the root directly
            stack += [r, r]
            continue
        d = _pollard_brent(m)
        stack += [d, m // d]
    return out


def _prime_upper_bound(n: int) -> int:
    """An upper bound on the n-th prime (Rosser: p_n < n(ln n + ln ln n) for n >= 6)."""
    if n < 6:
        return 13
    return int(n * (math.log(n) + math.log(math.log(n)))) + 3


def nth_prime_sieve(n: int) -> int:
    """The n-th prime (1-indexed) from an odd-only sieve of Eratosthenes."""
    if n == 1:
        return 2
    limit = _prime_upper_bound(n)
    size = (limit - 1) // 2  # index i stands for the odd number 2i+1, for i in [0, size]
    sieve = bytearray([1]) * (size + 1)
    sieve[0] = 0  # 1 is not prime
    for i in range(1, (math.isqrt(limit) - 1) // 2 + 1):
        if sieve[i]:
            p = 2 * i + 1
            start = p * p // 2
            sieve[start::p] = bytes(len(range(start, size + 1, p)))
    # The (n-1)-th odd prime; count in chunks with bytes.count, then locate inside the chunk.
    need, chunk = n - 1, 1 << 16
    for lo in range(0, size + 1, chunk):
        hi = min(lo + chunk, size + 1)
        c = sieve.count(1, lo, hi)
        if c < need:
            need -= c
            continue
        i = lo - 1
        for _ in range(need):
            i = sieve.index(1, i + 1, hi)
        return 2 * i + 1
    raise AssertionError(f"sieve bound too small for n={n}")  # Rosser's bound makes this unreachable


class PrimeEnv(ToolEnvironment):
    name = "PrimeEnv"

    def is_prime(self, n: int) -> dict:
        return {"success": True, "result": is_probable_prime(n)}

    def nth_prime(self, n: int) -> dict:
        if n < 1:
            return {"success": False, "message": "n must be >= 1."}
        if n > MAX_NTH_PRIME:
            return {"success": False, "message": f"n must be <= {MAX_NTH_PRIME} (tool limit)."}
        return {"success": True, "result": nth_prime_sieve(n)}

    def factorize(self, n: int) -> dict:
        if n < 2:
            return {"success": False, "message": "n must be >= 2."}
        return {"success": True, "result": [[p, e] for p, e in sorted(prime_factors(n).items())]}
