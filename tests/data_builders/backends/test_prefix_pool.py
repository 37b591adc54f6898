"""The shared-prefix pool's token logic: which prefixes are shared, which kept one a prompt gets, what leaves."""
from __future__ import annotations

from data_builders.backends.prefix_pool import PrefixPool, common_prefix, shared_prefixes

SYSTEM = list(range(100, 140))      # 40 tokens every prompt starts with
TOOLS_A, TOOLS_B = list(range(200, 230)), list(range(300, 330))


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2 and common_prefix([], [1]) == 0 and common_prefix([7], [8]) == 0


def test_shared_prefixes_are_each_rows_longest_shared_prefix_once():
    a1, a2 = SYSTEM + TOOLS_A + [1, 2], SYSTEM + TOOLS_A + [3, 4, 5]
    b1, b2 = SYSTEM + TOOLS_B + [6], SYSTEM + TOOLS_B + [7]
    lone = [9] * 50
    got = shared_prefixes([b1, lone, a1, a2, b2], min_tokens=32)
    # per tool set, the system prompt and its tools, and the system prompt both begin with; the prompt sharing
    # nothing gives nothing
    assert got == [tuple(SYSTEM), tuple(SYSTEM + TOOLS_A), tuple(SYSTEM + TOOLS_B)]
    # shorter than min_tokens: not worth a forward of its own
    assert shared_prefixes([[1] * 10 + [2], [1] * 10 + [3]], min_tokens=32) == []


def test_a_shared_prefix_leaves_each_row_its_last_token():
    row = SYSTEM + [5]
    assert shared_prefixes([row, list(row)], min_tokens=8) == [tuple(SYSTEM)]


def test_match_gives_the_longest_common_prefix_with_any_kept_one():
    pool = PrefixPool(max_bytes=1000)
    pool.add(SYSTEM + TOOLS_A, "kv-a", 10)
    pool.add(SYSTEM + TOOLS_B, "kv-b", 10)
    assert pool.match(SYSTEM + TOOLS_B + [1]) == (70, "kv-b")
    # a prompt sharing only the system prompt gets that part of a kept prefix (a causal model's KV at a position
    # depends on the tokens up to it only)
    n, kv = pool.match(SYSTEM + [7, 7])
    assert n == 40 and kv in ("kv-a", "kv-b")
    assert pool.match(SYSTEM + TOOLS_A + [1], limit=50) == (50, "kv-a")
    assert pool.match([1, 2, 3]) == (0, None)


def test_least_recently_used_prefixes_leave_when_the_bytes_run_out():
    pool = PrefixPool(max_bytes=25)
    pool.add([1] * 5, "one", 10)
    pool.add([2] * 5, "two", 10)
    pool.match([1] * 5 + [0])           # "one" used: "two" is now the least recently used
    pool.add([3] * 5, "three", 10)
    assert len(pool) == 2 and pool.bytes == 20
    assert pool.match([2] * 6) == (0, None) and pool.match([1] * 6)[1] == "one"
    pool.add([4] * 5, "too big", 26)    # larger than the whole pool: not kept, nothing evicted for it
    assert len(pool) == 2 and pool.match([4] * 6) == (0, None)
    pool.clear()
    assert len(pool) == 0 and pool.bytes == 0
