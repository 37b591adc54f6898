"""GameRuleEnv (docs/guide.md#when2tool-environments): first-match lookup of a rule question in the task's corpus.

The matching rule is HistoricalYear's (one implementation, imported); only the payload differs:
here ``query`` carries the *matched key*, not the caller's argument, on success.
"""
from __future__ import annotations

from .base import ToolEnvironment
from .historical_year import match_corpus_key


class GameRuleEnv(ToolEnvironment):
    name = "GameRuleEnv"

    def __init__(self, parameters: dict | None = None, tools=None):
        super().__init__(parameters, tools)
        self.corpus: dict = self.parameters.get("corpus") or {}

    def lookup_rule(self, query: str) -> dict:
        key = match_corpus_key(self.corpus, query)
        if key is None:
            return {
                "success": False,
                "message": f"Rule not found: {query}",
                "query": query,
                "available_entries": len(self.corpus),
            }
        return {
            "success": True,
            "query": key,
            "passage": self.corpus[key],
            "source": "game_rules_database",
            "confidence": "exact_match",
            "related_rules": list(self.corpus)[:5],
        }
