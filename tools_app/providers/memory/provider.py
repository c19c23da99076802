"""`memory`: facts a tenant's agents keep across sessions (`memory_store`, `memory_recall`,
`memory_forget`), in the database with full-text search (memory/db.py: FTS5 on SQLite, text
search on PostgreSQL). Scoped by the trusted tenant of the call and the binding's optional
`parameters.space`; the model's arguments can name neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from pydantic import Field

from runners.protocol import ToolDescriptor

from ..base import ProviderCall, ProviderEnvironment, ToolProvider
from ..options import CommonOptions, parse_options, select_operations
from .db import acount_memories, adelete_memory, arecall_memories, astore_memory

__all__ = ["MAX_MEMORY_BYTES", "MAX_RECALL", "MemoryOptions", "MemoryProvider"]

MAX_MEMORY_BYTES = 8 * 1024  # a memory is a fact, not a document: the knowledge base holds those
MAX_RECALL = 20  # results of one recall: what fits a model's context beside the conversation
MAX_QUERY_CHARS = 1000  # a recall query is a question
SPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_MAX_MEMORIES = 10_000  # per tenant and space: a runaway loop cannot fill the database


class MemoryOptions(CommonOptions):
    max_memories: int = Field(default=DEFAULT_MAX_MEMORIES, ge=1, le=1_000_000)


OPERATIONS: dict[str, ToolDescriptor] = {
    "memory_store": {
        "name": "memory_store",
        "description": "Store one fact to remember in later sessions (at most 8 KiB). Keep it short and "
        "self-contained: it is found again by the words it contains.",
        "input_schema": {
            "type": "object",
            "properties": {"content": {"type": "string", "minLength": 1}},
            "required": ["content"],
            "additionalProperties": False,
        },
    },
    "memory_recall": {
        "name": "memory_recall",
        "description": "Recall stored facts matching the words of a query, best matches first (the most "
        "recent ones for an empty query).",
        "input_schema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": MAX_QUERY_CHARS},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    "memory_forget": {
        "name": "memory_forget",
        "description": "Forget one stored fact by the id memory_recall returned.",
        "input_schema": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
}


def _space(parameters: object) -> str:
    if parameters is None:
        return ""
    if not isinstance(parameters, dict) or not parameters.keys() <= {"space"}:
        raise ValueError("parameters: memory bindings take only {space}")
    space = parameters.get("space", "")
    if not isinstance(space, str) or (space and not SPACE_NAME.fullmatch(space)):
        raise ValueError("parameters.space: must be 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit")
    return space


def _error(message: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": message}], "is_error": True}


class MemoryProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(MemoryOptions, options)
        if self.settings.parameters_schema is not None:
            raise ValueError("parameters_schema: memory bindings take {space} only")

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        _space(parameters)
        return select_operations(OPERATIONS, operations)

    async def handle(self, call: ProviderCall) -> object:
        space = _space(call.parameters)
        arguments = call.arguments
        if call.operation == "memory_store":
            content = str(arguments["content"])  # a string: the descriptor requires it
            size = len(content.encode())
            if size > MAX_MEMORY_BYTES:
                return _error(f"memory too large: {size} bytes; a memory holds at most {MAX_MEMORY_BYTES} bytes")
            if await acount_memories(call.tenant, space) >= self.settings.max_memories:
                return _error(f"memory full: at most {self.settings.max_memories} memories; forget some first")
            stored = await astore_memory(call.tenant, space, content, session_id=call.session_id)
            return {
                "content": [{"type": "text", "text": f"stored memory {stored.id}"}],
                "structured_content": {"id": stored.id, "created_at": stored.created_at},
            }
        if call.operation == "memory_recall":
            limit = arguments.get("limit", MAX_RECALL)
            hits = await arecall_memories(call.tenant, space, arguments["query"], limit=limit)
            memories = [{"id": hit.id, "content": hit.content, "created_at": hit.created_at} for hit in hits]
            return {"content": [], "structured_content": {"memories": memories}}
        forgotten = await adelete_memory(call.tenant, space, arguments["id"])
        if not forgotten:
            return _error(f"no memory {arguments['id']}")
        return {"content": [{"type": "text", "text": f"forgot memory {arguments['id']}"}]}
