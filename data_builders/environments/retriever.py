"""RetrieverEnv (docs/guide.md#when2tool-environments): title-only keyword search over the task's small corpus,
then full reads.

The ranking is deliberately crude (it is the benchmark's): query tokens keep their punctuation and
count as hits when they are *substrings* of the lowercased title, so ``of`` hits ``official`` and
``spain?`` misses ``Spain``. Reproducing it exactly matters more than making it good, because the
model's search results (and so its tool-use trajectories) must equal the original's.
"""
from __future__ import annotations

from .base import ToolEnvironment

SNIPPET_CHARS = 100


def score_title(query: str, title: str) -> int:
    """Number of whitespace-split, lowercased query tokens found as substrings of the lowercased title.

    Duplicate tokens each count (``"capital capital"`` scores 2 on a title containing "capital")."""
    t = title.lower()
    return sum(1 for token in query.lower().split() if token in t)


def snippet(text: str) -> str:
    return text[:SNIPPET_CHARS] + ("..." if len(text) > SNIPPET_CHARS else "")


class RetrieverEnv(ToolEnvironment):
    name = "RetrieverEnv"

    def __init__(self, parameters: dict | None = None, tools=None):
        super().__init__(parameters, tools)
        self.corpus: list = self.parameters.get("corpus") or []

    def search_corpus(self, query: str, top_k: int = 3) -> dict:
        scored = [(score_title(query, doc["title"]), doc) for doc in self.corpus]
        # Score descending, then id as a *string* ascending: doc1 < doc10 < doc2.
        scored.sort(key=lambda sd: (-sd[0], str(sd[1]["id"])))
        # Slicing bounds the work whatever top_k is; max(1, .) means top_k <= 0 still returns one hit.
        top = scored[: max(1, top_k)]
        hits = [
            {"id": doc["id"], "title": doc["title"], "snippet": snippet(doc["text"]), "score": s}
            for s, doc in top
        ]
        return {
            "success": True,
            "data": {"query": query, "total_hits": len(self.corpus), "returned": len(hits), "hits": hits},
        }

    def read_doc(self, doc_id: str) -> dict:
        for doc in self.corpus:
            if doc["id"] == doc_id:
                text = doc["text"]
                return {
                    "success": True,
                    "data": {
                        "doc_id": doc["id"],
                        "title": doc["title"],
                        "content": text,
                        "word_count": len(text.split()),
                        "source": "local_corpus",
                    },
                }
        return {"success": False, "message": "Document not found."}
