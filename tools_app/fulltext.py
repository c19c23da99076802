"""The words of a full-text query, as the memory and knowledge searches send them to the index
(FTS5 on SQLite, tsquery on PostgreSQL). Pure: no Django."""

from __future__ import annotations

__all__ = ["MAX_QUERY_TERMS", "query_terms"]

MAX_QUERY_TERMS = 16  # a query's words: enough for a question, bounded for the index


def query_terms(query: str) -> list[str]:
    """The distinct lower-cased words of `query`, first MAX_QUERY_TERMS of them."""
    words = "".join(ch if ch.isalnum() else " " for ch in query).split()
    return list(dict.fromkeys(word.lower() for word in words))[:MAX_QUERY_TERMS]
