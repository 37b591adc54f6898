"""PrimeEnv tasks (docs/guide.md#when2tool-tasks-and-gold-formats): is-prime, n-th prime, factorisation of a composite.

Gold values use plain trial division here (the environment uses Miller-Rabin, Pollard rho and a
sieve), so the oracle test cross-checks two implementations. Ordinals are always written "<n>th",
as in When2Tool ("2th", "3th").
"""
from __future__ import annotations

import math
import random
from functools import lru_cache

from .common import Draw, EnvGenerator

TOOLS = ("is_prime", "nth_prime", "factorize")
_FACTOR_FORMAT = "Write as 'p1^e1 * p2^e2' (use p^1 as just p). Answer with only the factorization."


def trial_factors(n: int) -> list[tuple[int, int]]:
    out, d = [], 2
    while d * d <= n:
        e = 0
        while n % d == 0:
            n, e = n // d, e + 1
        if e:
            out.append((d, e))
        d += 1
    if n > 1:
        out.append((n, 1))
    return out


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, math.isqrt(n) + 1))


@lru_cache(maxsize=None)  # a few hundred distinct n; recounting from 2 each time would dominate
def nth_prime(n: int) -> int:
    count, candidate = 0, 1
    while count < n:
        candidate += 1
        count += is_prime(candidate)
    return candidate


# Per difficulty: is-prime ranges for the "Is N prime?" and "Is N a prime number?" forms, the
# n-th prime range and the factorisation range (When2Tool's: n up to 99 / 999 / 999,999).
_RANGES = {
    "easy": ((2, 99), (2, 99), (2, 20), (6, 99)),
    "medium": ((100, 999), (100, 999), (20, 80), (100, 499)),
    "hard": ((100_000, 999_999), (10_000, 99_999), (200, 480), (1_000, 9_999)),
}
_PRIME_SHARE = 0.3  # draw a prime this often for is-prime questions, else a uniform number


def _is_prime_candidate(r: random.Random, lo: int, hi: int) -> int:
    if r.random() < _PRIME_SHARE:
        while True:
            n = r.randint(lo, hi)
            if is_prime(n):
                return n
    return r.randint(lo, hi)


def make(difficulty: str, r: random.Random) -> Draw:
    short, long, nth, factor = _RANGES[difficulty]
    kind = r.choice(("is", "is_a", "nth", "factor"))
    if kind in ("is", "is_a"):
        n = _is_prime_candidate(r, *(short if kind == "is" else long))
        wording = "prime" if kind == "is" else "a prime number"
        return f"Is {n} {wording}? Answer True or False.", str(is_prime(n)), {}
    if kind == "nth":
        k = r.randint(*nth)
        return f"What is the {k}th prime number? Answer with only the number.", str(nth_prime(k)), {}
    while True:  # factorisation questions are always about composites
        n = r.randint(*factor)
        factors = trial_factors(n)
        if factors != [(n, 1)]:
            break
    answer = " * ".join(str(p) if e == 1 else f"{p}^{e}" for p, e in factors)
    return f"What is the prime factorization of {n}? {_FACTOR_FORMAT}", answer, {}


GENERATOR = EnvGenerator("PrimeEnv", "prime", tools=lambda difficulty: TOOLS, make=make)
