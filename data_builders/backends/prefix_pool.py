"""Token prefixes shared across prompts, kept with their KV cache so that each is prefilled once.

An agent's first prompts differ only in their last few dozen tokens: the system prompt and an environment's tool
listing come first (the main job's 32 first prompts of a shard: 85 % of their 17,500 tokens are shared with another
prompt of the shard, and the test shard's with the train shard's). :func:`shared_prefixes` finds the prefixes that
several prompts of one call share; :class:`PrefixPool` keeps each with its KV (least recently used out, bounded in
bytes) and gives any later prompt the longest prefix it has in common with one of them — the first ``n`` tokens'
KV of a kept prefix serve every prompt that starts with those ``n`` tokens, since a causal model's KV at a position
depends on the tokens up to it only. What is stored is opaque here (the HF backend keeps per-layer tensors).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _longest_shared(rows: Sequence[Sequence[int]]) -> list[int]:
    """Each row's longest common prefix with any other row: sorted, it is the one with a neighbour."""
    order = sorted(range(len(rows)), key=lambda i: rows[i])
    best = [0] * len(rows)
    for a, b in zip(order, order[1:]):
        n = common_prefix(rows[a], rows[b])
        best[a], best[b] = max(best[a], n), max(best[b], n)
    return best


def shared_prefixes(rows: Sequence[Sequence[int]], min_tokens: int) -> list[tuple[int, ...]]:
    """The longest prefix each row shares with another row, where that is at least ``min_tokens`` long, once each,
    shortest first; then, the same way, the prefixes those share with each other (the system prompt that prompts
    with different tool listings begin with), so that each shared part is computed once.

    A prefix never covers a row's last token: a generation needs one uncached token per row."""
    found = {tuple(rows[i][:min(n, len(rows[i]) - 1)]) for i, n in enumerate(_longest_shared(rows))}
    found = {p for p in found if len(p) >= min_tokens}
    level = sorted(found)
    while len(level) > 1:
        shorter = {p[:n] for p, n in zip(level, _longest_shared(level)) if min_tokens <= n < len(p)} - found
        found |= shorter
        level = sorted(shorter)
    return sorted(found, key=len)


class PrefixPool:
    """Token prefixes with their KV, at most ``max_bytes`` of it (least recently used out)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, row: Sequence[int], limit: int | None = None) -> tuple[int, Any]:
        """``(n, kv)``: the longest prefix (at most ``limit`` tokens) ``row`` shares with a kept one, and that
        one's KV (its first ``n`` tokens are ``row``'s); ``(0, None)`` when none shares a token."""
        limit = len(row) if limit is None else min(limit, len(row))
        best, kv, key = 0, None, None
        for tokens, (value, _size) in self._entries.items():
            if best < limit and tokens[:1] == tuple(row[:1]):
                n = common_prefix(tokens, row[:limit])
                if n > best:
                    best, kv, key = n, value, tokens
        if key is not None:
            self._entries.move_to_end(key)
        return best, kv

    def add(self, tokens: Sequence[int], kv: Any, size: int) -> None:
        """Keep ``tokens``' KV (``size`` bytes); the least recently used prefixes leave to make room. A prefix
        larger than the whole pool is not kept."""
        key = tuple(tokens)
        if key in self._entries or size > self.max_bytes:
            return
        while self._entries and self.bytes + size > self.max_bytes:
            _, (_, freed) = self._entries.popitem(last=False)
            self.bytes -= freed
        self._entries[key] = (kv, size)
        self.bytes += size

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0
