"""The memory tool's queries: a tenant's memories by space, recalled through the full-text index
the migration maintains per database vendor."""

from __future__ import annotations

from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from foundation.rfc3339 import format_time

from ...fulltext import query_terms
from ...models import Memory

__all__ = [
    "MemoryHit",
    "acount_memories",
    "adelete_memory",
    "arecall_memories",
    "astore_memory",
    "count_memories",
    "delete_memory",
    "recall_memories",
    "store_memory",
]


@dataclass(frozen=True, slots=True)
class MemoryHit:
    id: int
    content: str
    created_at: str  # RFC 3339, UTC with a Z suffix (foundation.rfc3339)


def _hit(row: Memory) -> MemoryHit:
    return MemoryHit(row.pk, row.content, format_time(row.created_at))


def store_memory(tenant: str, space: str, content: str, *, session_id: str) -> MemoryHit:
    row = Memory.objects.create(
        tenant=tenant, space=space, content=content, session_id=session_id, created_at=timezone.now()
    )
    return _hit(row)


def count_memories(tenant: str, space: str) -> int:
    return Memory.objects.filter(tenant=tenant, space=space).count()


def delete_memory(tenant: str, space: str, memory_id: int) -> bool:
    deleted, _ = Memory.objects.filter(tenant=tenant, space=space, pk=memory_id).delete()
    return deleted > 0


def recall_memories(tenant: str, space: str, query: str, *, limit: int) -> list[MemoryHit]:
    """The tenant's memories in `space` that match any word of `query`, best first (BM25 on
    SQLite's FTS5, ts_rank on PostgreSQL), then newest; the newest ones for an empty query."""
    terms = query_terms(query)
    scoped = Memory.objects.filter(tenant=tenant, space=space)
    if not terms:
        return [_hit(row) for row in scoped.order_by("-created_at", "-pk")[:limit]]
    vendor = connection.vendor
    if vendor == "sqlite":
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        sql = (
            "SELECT m.id FROM tools_app_memory_fts f JOIN tools_app_memory m ON m.id = f.rowid"
            " WHERE tools_app_memory_fts MATCH %s AND m.tenant = %s AND m.space = %s"
            " ORDER BY bm25(tools_app_memory_fts), m.created_at DESC, m.id DESC LIMIT %s"
        )
        params: list[str | int] = [match, tenant, space, limit]
    elif vendor == "postgresql":
        # plainto_tsquery ANDs the words; recall wants any of them, ranked by how many match
        sql = (
            "SELECT m.id FROM tools_app_memory m,"
            " CAST(replace(CAST(plainto_tsquery('simple', %s) AS text), '&', '|') AS tsquery) q"
            " WHERE to_tsvector('simple', m.content) @@ q AND m.tenant = %s AND m.space = %s"
            " ORDER BY ts_rank(to_tsvector('simple', m.content), q) DESC, m.created_at DESC, m.id DESC LIMIT %s"
        )
        params = [" ".join(terms), tenant, space, limit]
    else:  # no full-text index on this vendor: any word, newest first
        condition = Q()
        for term in terms:
            condition |= Q(content__icontains=term)
        return [_hit(row) for row in scoped.filter(condition).order_by("-created_at", "-pk")[:limit]]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ids = [row[0] for row in cursor.fetchall()]
    found = {row.pk: row for row in scoped.filter(pk__in=ids)}
    return [_hit(found[pk]) for pk in ids if pk in found]


astore_memory = database_sync_to_async(store_memory)
acount_memories = database_sync_to_async(count_memories)
adelete_memory = database_sync_to_async(delete_memory)
arecall_memories = database_sync_to_async(recall_memories)
