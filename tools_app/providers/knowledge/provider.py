"""`knowledge`: `knowledge_search` over a tenant's knowledge bases (documents chunked by
tools_app.ingest, ranked by knowledge/db.py: BM25 through FTS5 on SQLite, ts_rank_cd on
PostgreSQL). The binding's `parameters.bases` names the bases; the trusted tenant of the call
scopes them, and the model's arguments can name neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from runners.protocol import ToolDescriptor

from ..base import ProviderCall, ProviderEnvironment, ToolProvider
from ..options import CommonOptions, parse_options, select_operations
from .db import MAX_KNOWLEDGE_RESULTS, KnowledgeHit, asearch_knowledge

__all__ = ["BASE_NAME", "MAX_BASES", "MAX_RESULTS", "KnowledgeOptions", "KnowledgeProvider"]

MAX_RESULTS = MAX_KNOWLEDGE_RESULTS  # chunks of one search
DEFAULT_RESULTS = 5  # what a search returns unless the model asks for more
MAX_QUERY_CHARS = 1000  # a search query is a question
MAX_BASES = 16  # knowledge bases one binding searches
BASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class KnowledgeOptions(CommonOptions):
    pass


OPERATIONS: dict[str, ToolDescriptor] = {
    "knowledge_search": {
        "name": "knowledge_search",
        "description": "Search the knowledge base's documents for passages matching the words of a query, best "
        "matches first. Each result gives the passage, its document's title and source, and where it sits in "
        "the document.",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


def _bases(parameters: object) -> list[str]:
    if not isinstance(parameters, dict) or set(parameters) != {"bases"}:
        raise ValueError("parameters: knowledge bindings take {bases: [knowledge base names]}")
    bases = parameters["bases"]
    if not isinstance(bases, list) or not 1 <= len(bases) <= MAX_BASES:
        raise ValueError(f"parameters.bases: must list 1 to {MAX_BASES} knowledge base names")
    for name in bases:
        if not isinstance(name, str) or not BASE_NAME.fullmatch(name):
            raise ValueError("parameters.bases: each name is 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit")
    return list(dict.fromkeys(bases))


def _where(hit: KnowledgeHit) -> str:
    page = f", page {hit.page}" if hit.page is not None else ""
    return f"{hit.source}, chunk {hit.position + 1}, characters {hit.start}-{hit.end}{page}"


class KnowledgeProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(KnowledgeOptions, options)
        if self.settings.parameters_schema is not None:
            raise ValueError("parameters_schema: knowledge bindings take {bases} only")

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        _bases(parameters)
        return select_operations(OPERATIONS, operations)

    async def handle(self, call: ProviderCall) -> dict[str, Any]:
        bases = _bases(call.parameters)
        query = str(call.arguments["query"])  # a string: the descriptor requires it
        limit = call.arguments.get("limit", DEFAULT_RESULTS)
        hits = await asearch_knowledge(call.tenant, bases, query, limit=limit)
        if not hits:
            text = f"no passages match {query!r}"
        else:
            blocks = [f"[{rank}] {hit.title} ({_where(hit)})\n{hit.text}" for rank, hit in enumerate(hits, 1)]
            text = "\n\n".join(blocks)
        return {
            "content": [{"type": "text", "text": text}],
            "structured_content": {"results": [hit.as_dict() for hit in hits]},
        }
