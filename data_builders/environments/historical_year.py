"""HistoricalYearEnv (docs/guide.md#when2tool-environments): first-match lookup of an event phrase in the task's
corpus."""
from __future__ import annotations

from typing import Any

from .base import ToolEnvironment


def match_corpus_key(corpus: dict, query: Any) -> str | None:
    """The benchmark's matching rule: the first key (in stored order) equal to, containing or contained in
    the stripped, lowercased query. An empty query is contained in every key, so it matches the first."""
    q = query.strip().lower()  # a non-string query raises; the runtime reports it as a tool error
    for key in corpus:
        k = key.lower()
        if k == q or q in k or k in q:
            return key
    return None


class HistoricalYearEnv(ToolEnvironment):
    name = "HistoricalYearEnv"

    def __init__(self, parameters: dict | None = None, tools=None):
        super().__init__(parameters, tools)
        self.corpus: dict = self.parameters.get("corpus") or {}

    def lookup_year(self, event: str) -> dict:
        key = match_corpus_key(self.corpus, event)
        if key is None:
            return {
                "success": False,
                "message": f"Event not found: {event}",
                "query": event,
                "available_entries": len(self.corpus),
            }
        return {
            "success": True,
            "event": key,
            "passage": self.corpus[key],
            "query": event,
            "source": "historical_records",
            "confidence": "exact_match",
            "related_entries": list(self.corpus)[:5],
        }
