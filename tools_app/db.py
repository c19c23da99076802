"""The only ORM user of tools_app (besides models and admin)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from foundation.hostconfig import ToolBindingConfig
from foundation.logs import logger

from .knowledge import KnowledgeJobStatus, ParsedDocument
from .models import (
    Chunk,
    Document,
    KnowledgeBase,
    KnowledgeJob,
    Memory,
    SessionCredential,
    Task,
    TaskStatus,
    ToolBinding,
)
from .origins import url_origin
from .vault import RecoveryRecord, SealedCredential, recovery_record

__all__ = [
    "DocumentRow",
    "KnowledgeHit",
    "KnowledgeJobRow",
    "aclaim_next_knowledge_job",
    "afail_stale_knowledge_jobs",
    "claim_knowledge_job",
    "claim_next_knowledge_job",
    "complete_knowledge_job",
    "create_knowledge_job",
    "fail_knowledge_job",
    "fail_stale_knowledge_jobs",
    "get_document",
    "get_knowledge_job",
    "record_knowledge_job_progress",
    "requeue_knowledge_job",
    "MemoryHit",
    "add_document",
    "asearch_knowledge",
    "ensure_knowledge_base",
    "search_knowledge",
    "StoredCredential",
    "TaskRow",
    "acount_memories",
    "acreate_task",
    "adelete_memory",
    "alist_tasks",
    "arecall_memories",
    "astore_memory",
    "aupdate_task_status",
    "count_memories",
    "create_task",
    "delete_memory",
    "list_tasks",
    "recall_memories",
    "store_memory",
    "update_task_status",
    "adelete_credentials",
    "aget_credential",
    "aimport_credentials",
    "aload_admin_bindings",
    "astore_credentials",
    "binding_config",
    "binding_fields",
    "count_credentials_to_rotate",
    "credentials_to_rotate",
    "delete_credentials",
    "get_credential",
    "import_credentials",
    "load_admin_bindings",
    "mirror_config_bindings",
    "recovery_records",
    "replace_sealed_credential",
    "revoke_credential",
    "store_credentials",
]


def mirror_config_bindings(bindings: Sequence[ToolBindingConfig]) -> None:
    """Show the config's tool bindings in the admin, read-only; drop ones no longer configured."""
    with transaction.atomic():
        names = []
        for binding in bindings:
            names.append(binding.name)
            ToolBinding.objects.update_or_create(
                name=binding.name,
                defaults={
                    "description": binding.description,
                    "input_schema": binding.input_schema,
                    "output_schema": binding.output_schema,
                    "url": binding.url,
                    "tenants": binding.tenants,
                    "token_env": binding.token_env,
                    "transport": binding.effective_transport,
                    "mcp_tool": binding.mcp_tool,
                    "timeout_seconds": binding.timeout_seconds,
                    "max_output_bytes": binding.max_output_bytes,
                    "inspect_session": binding.inspect_session,
                    "require_approval": binding.require_approval,
                    "approval_timeout_seconds": binding.approval_timeout_seconds,
                    "method": binding.method,
                    "query": binding.query or None,
                    "headers": binding.headers or None,
                    "body": binding.body,
                    "provider": binding.provider,
                    "operation": binding.operation,
                    "parameters": binding.parameters,
                    "from_config": True,
                },
            )
        ToolBinding.objects.filter(from_config=True).exclude(name__in=names).delete()


def declared_token_origins() -> dict[str, frozenset[str]]:
    """The token variables the host config's tools name (the only ones an admin binding may use),
    each with the origins of those tools (the only ones it may be sent to)."""
    rows = ToolBinding.objects.filter(from_config=True).exclude(token_env="")
    origins: dict[str, set[str]] = {}
    for token_env, url in rows.values_list("token_env", "url"):
        origins.setdefault(token_env, set()).add(url_origin(url))
    return {name: frozenset(found - {""}) for name, found in origins.items()}


def binding_config(row: ToolBinding) -> ToolBindingConfig:
    """The validated config form of a row (the admin form checked it the same way)."""
    return ToolBindingConfig.model_validate(binding_fields(row))


def binding_fields(row: ToolBinding) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": row.name,
        "tenants": row.tenants,
        "timeout_seconds": row.timeout_seconds,
        "max_output_bytes": row.max_output_bytes,
        "inspect_session": row.inspect_session,
        "require_approval": row.require_approval,
        "approval_timeout_seconds": row.approval_timeout_seconds,
    }
    for key in (
        "description",
        "input_schema",
        "url",
        "output_schema",
        "token_env",
        "transport",
        "mcp_tool",
        "provider",
        "operation",
        "parameters",
    ):
        value = getattr(row, key)
        if value not in (None, ""):
            fields[key] = value
    for key in ("method", "query", "headers", "body"):  # transport rest
        value = getattr(row, key)
        if value not in (None, "", {}):
            fields[key] = value
    return fields


def load_admin_bindings() -> list[ToolBindingConfig]:
    """Admin-created bindings; a row that no longer validates is skipped and logged."""
    bindings = []
    for row in ToolBinding.objects.filter(from_config=False).order_by("name"):
        try:
            bindings.append(binding_config(row))
        except ValidationError as exc:
            logger.warning("skipping invalid tool binding", extra={"tool": row.name, "error": str(exc)[:300]})
    return bindings


aload_admin_bindings = database_sync_to_async(load_admin_bindings)


# -- sealed session credentials ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredCredential:
    pk: int
    tenant: str
    session_id: str
    alias: str
    sealed: SealedCredential


_SEALED_FIELDS = ("version", "key_id", "nonce", "ciphertext", "revoked")


def _sealed(row: Mapping[str, Any]) -> SealedCredential:
    if row["revoked"]:
        return SealedCredential.tombstone()
    return SealedCredential(row["version"], row["key_id"], row["nonce"], row["ciphertext"])


def _sealed_fields(sealed: SealedCredential) -> dict[str, Any]:
    return {
        "version": sealed.version,
        "key_id": sealed.key_id,
        "nonce": sealed.nonce,
        "ciphertext": sealed.ciphertext,
        "revoked": sealed.revoked,
    }


def _new_rows(tenant: str, session_id: str, sealed: Mapping[str, SealedCredential]) -> list[SessionCredential]:
    now = timezone.now()
    return [
        SessionCredential(
            session_id=session_id, alias=alias, tenant=tenant, created_at=now, updated_at=now, **_sealed_fields(record)
        )
        for alias, record in sealed.items()
    ]


def store_credentials(tenant: str, session_id: str, sealed: Mapping[str, SealedCredential]) -> None:
    """The sealed credentials of a session being created."""
    SessionCredential.objects.bulk_create(_new_rows(tenant, session_id, sealed))


def delete_credentials(session_id: str) -> None:
    """Undo store_credentials for a session whose creation failed."""
    SessionCredential.objects.filter(session_id=session_id).delete()


def get_credential(tenant: str, session_id: str, alias: str) -> SealedCredential | None:
    """A binding's record (a tombstone when revoked), or None when it has none."""
    row = (
        SessionCredential.objects.filter(tenant=tenant, session_id=session_id, alias=alias)
        .values(*_SEALED_FIELDS)
        .first()
    )
    return _sealed(row) if row is not None else None


def recovery_records(session_id: str) -> list[RecoveryRecord]:
    """Every record of a session, tombstones included, by alias: what its checkpoints carry."""
    rows = SessionCredential.objects.filter(session_id=session_id).order_by("alias").values("alias", *_SEALED_FIELDS)
    return [recovery_record(row["alias"], _sealed(row)) for row in rows]


def import_credentials(tenant: str, session_id: str, sealed: Mapping[str, SealedCredential]) -> None:
    """A restored checkpoint's records. An existing local record wins over the archive's (it is
    as new or newer: a binding's credential is only ever set at create, then rotated or revoked),
    except that a revocation is final: an archived tombstone replaces a live local record."""
    with transaction.atomic():
        present = set(SessionCredential.objects.filter(session_id=session_id).values_list("alias", flat=True))
        missing = {alias: record for alias, record in sealed.items() if alias not in present}
        SessionCredential.objects.bulk_create(_new_rows(tenant, session_id, missing), ignore_conflicts=True)
        for alias, record in sealed.items():
            if record.revoked and alias in present:
                revoke_credential(session_id, alias)


def revoke_credential(session_id: str, alias: str) -> bool:
    """Replace a live record with a tombstone; False when the binding has no live record."""
    tombstone = _sealed_fields(SealedCredential.tombstone())
    updated = SessionCredential.objects.filter(session_id=session_id, alias=alias, revoked=False).update(
        **tombstone, updated_at=timezone.now()
    )
    return updated == 1


def count_credentials_to_rotate(active_key_id: str) -> int:
    return SessionCredential.objects.filter(revoked=False).exclude(key_id=active_key_id).count()


def credentials_to_rotate(active_key_id: str, *, after: int, limit: int) -> list[StoredCredential]:
    """Live records not sealed under the active key, in primary-key order after `after`."""
    rows = (
        SessionCredential.objects.filter(revoked=False, pk__gt=after)
        .exclude(key_id=active_key_id)
        .order_by("pk")
        .values("pk", "tenant", "session_id", "alias", *_SEALED_FIELDS)[:limit]
    )
    return [StoredCredential(row["pk"], row["tenant"], row["session_id"], row["alias"], _sealed(row)) for row in rows]


def replace_sealed_credential(stored: StoredCredential, sealed: SealedCredential) -> bool:
    """Store a re-encrypted record unless the record changed meanwhile (a revocation, another
    rotation): a conditional UPDATE on the fields it was read with."""
    updated = SessionCredential.objects.filter(
        pk=stored.pk, revoked=False, key_id=stored.sealed.key_id, nonce=stored.sealed.nonce
    ).update(**_sealed_fields(sealed), updated_at=timezone.now())
    return updated == 1


astore_credentials = database_sync_to_async(store_credentials)
adelete_credentials = database_sync_to_async(delete_credentials)
aget_credential = database_sync_to_async(get_credential)
aimport_credentials = database_sync_to_async(import_credentials)


# -- memories ------------------------------------------------------------------------------------

MAX_QUERY_TERMS = 16  # a recall query's words: enough for a question, bounded for the index


@dataclass(frozen=True, slots=True)
class MemoryHit:
    id: int
    content: str
    created_at: str  # RFC 3339


def _hit(row: Memory) -> MemoryHit:
    return MemoryHit(row.pk, row.content, row.created_at.isoformat())


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


def _terms(query: str) -> list[str]:
    words = "".join(ch if ch.isalnum() else " " for ch in query).split()
    return list(dict.fromkeys(word.lower() for word in words))[:MAX_QUERY_TERMS]


def recall_memories(tenant: str, space: str, query: str, *, limit: int) -> list[MemoryHit]:
    """The tenant's memories in `space` that match any word of `query`, best first (BM25 on
    SQLite's FTS5, ts_rank on PostgreSQL), then newest; the newest ones for an empty query."""
    terms = _terms(query)
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
        params: list[Any] = [match, tenant, space, limit]
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


# -- tasks ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: int
    parent_id: int | None
    title: str
    description: str
    status: str
    created_at: str
    updated_at: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "parent_id": self.parent_id,
            "title": self.title,
            "description": self.description,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def _task_row(row: Task) -> TaskRow:
    return TaskRow(
        row.pk,
        row.parent_id,
        row.title,
        row.description,
        row.status,
        row.created_at.isoformat(),
        row.updated_at.isoformat(),
    )


def create_task(
    tenant: str, title: str, *, description: str, session_id: str, parent_id: int | None = None
) -> TaskRow | None:
    """A new pending task; None when `parent_id` names no task of this tenant."""
    if parent_id is not None and not Task.objects.filter(tenant=tenant, pk=parent_id).exists():
        return None
    now = timezone.now()
    row = Task.objects.create(
        tenant=tenant,
        parent_id=parent_id,
        title=title,
        description=description,
        session_id=session_id,
        created_at=now,
        updated_at=now,
    )
    return _task_row(row)


def update_task_status(tenant: str, task_id: int, status: TaskStatus) -> TaskRow | None:
    """The task with its new status; None when this tenant has no such task."""
    updated = Task.objects.filter(tenant=tenant, pk=task_id).update(status=status, updated_at=timezone.now())
    if updated != 1:
        return None
    return _task_row(Task.objects.get(tenant=tenant, pk=task_id))


def list_tasks(
    tenant: str, *, after: int = 0, limit: int, status: str = "", parent_id: int | None = None
) -> list[TaskRow]:
    """A page of the tenant's tasks in id order after `after`."""
    rows = Task.objects.filter(tenant=tenant, pk__gt=after)
    if status:
        rows = rows.filter(status=status)
    if parent_id is not None:
        rows = rows.filter(parent_id=parent_id)
    return [_task_row(row) for row in rows.order_by("pk")[:limit]]


acreate_task = database_sync_to_async(create_task)
aupdate_task_status = database_sync_to_async(update_task_status)
alist_tasks = database_sync_to_async(list_tasks)


# -- knowledge bases -----------------------------------------------------------------------------

MAX_KNOWLEDGE_RESULTS = 10  # chunks of one search: about 10,000 characters beside the conversation
CHUNK_INSERT_BATCH = 500  # rows per INSERT while adding a document


@dataclass(frozen=True, slots=True)
class DocumentRow:
    id: int
    base: str
    title: str
    source: str
    media_type: str
    size: int
    chunk_count: int


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    base: str
    document_id: int
    title: str
    source: str
    media_type: str
    position: int
    start: int
    end: int
    page: int | None
    text: str
    score: float  # higher is better; comparable only within one search

    def as_dict(self) -> dict[str, Any]:
        position: dict[str, Any] = {"chunk": self.position, "start": self.start, "end": self.end}
        if self.page is not None:
            position["page"] = self.page
        return {
            "knowledge_base": self.base,
            "document": {
                "id": self.document_id,
                "title": self.title,
                "source": self.source,
                "media_type": self.media_type,
            },
            "position": position,
            "score": round(self.score, 6),
            "text": self.text,
        }


def ensure_knowledge_base(tenant: str, name: str, *, description: str = "") -> KnowledgeBase:
    """The tenant's knowledge base `name`, created when it does not exist yet."""
    base, _ = KnowledgeBase.objects.get_or_create(
        tenant=tenant, name=name, defaults={"description": description, "created_at": timezone.now()}
    )
    return base


def add_document(base_id: int, document: ParsedDocument, *, source: str) -> DocumentRow:
    """Store a parsed document and its chunks in one transaction (the search index follows)."""
    with transaction.atomic():
        base = KnowledgeBase.objects.get(pk=base_id)
        row = Document.objects.create(
            base=base,
            title=document.title,
            source=source[:500],
            media_type=document.media_type,
            size=document.size,
            chunk_count=len(document.chunks),
            created_at=timezone.now(),
        )
        Chunk.objects.bulk_create(
            (
                Chunk(
                    document=row, position=span.position, start=span.start, end=span.end, page=span.page, text=span.text
                )
                for span in document.chunks
            ),
            batch_size=CHUNK_INSERT_BATCH,
        )
    return DocumentRow(row.pk, base.name, row.title, row.source, row.media_type, row.size, row.chunk_count)


def get_document(document_id: int) -> DocumentRow | None:
    row = Document.objects.select_related("base").filter(pk=document_id).first()
    if row is None:
        return None
    return DocumentRow(row.pk, row.base.name, row.title, row.source, row.media_type, row.size, row.chunk_count)


def search_knowledge(tenant: str, bases: Sequence[str], query: str, *, limit: int) -> list[KnowledgeHit]:
    """The chunks of the tenant's knowledge bases named in `bases` that match any word of
    `query`, best first (BM25 on SQLite's FTS5, ts_rank_cd on PostgreSQL). Another tenant's base
    of the same name is never searched; an empty query finds nothing."""
    terms = _terms(query)
    base_ids = list(KnowledgeBase.objects.filter(tenant=tenant, name__in=list(bases)).values_list("pk", flat=True))
    if not terms or not base_ids or limit < 1:
        return []
    limit = min(limit, MAX_KNOWLEDGE_RESULTS)
    placeholders = ", ".join(["%s"] * len(base_ids))
    vendor = connection.vendor
    if vendor == "sqlite":
        match = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
        sql = (
            "SELECT c.id, -bm25(tools_app_chunk_fts) FROM tools_app_chunk_fts f"
            " JOIN tools_app_chunk c ON c.id = f.rowid JOIN tools_app_document d ON d.id = c.document_id"
            f" WHERE tools_app_chunk_fts MATCH %s AND d.base_id IN ({placeholders})"
            " ORDER BY bm25(tools_app_chunk_fts), c.id LIMIT %s"
        )
        params: list[Any] = [match, *base_ids, limit]
    elif vendor == "postgresql":
        # plainto_tsquery ANDs the words; a search wants any of them, ranked by cover density
        sql = (
            "SELECT c.id, ts_rank_cd(to_tsvector('simple', c.text), q) AS rank FROM tools_app_chunk c"
            " JOIN tools_app_document d ON d.id = c.document_id,"
            " CAST(replace(CAST(plainto_tsquery('simple', %s) AS text), '&', '|') AS tsquery) q"
            f" WHERE to_tsvector('simple', c.text) @@ q AND d.base_id IN ({placeholders})"
            " ORDER BY rank DESC, c.id LIMIT %s"
        )
        params = [" ".join(terms), *base_ids, limit]
    else:  # no full-text index on this vendor: any word, in document order
        condition = Q()
        for term in terms:
            condition |= Q(text__icontains=term)
        rows = Chunk.objects.filter(condition, document__base_id__in=base_ids).order_by("pk")[:limit]
        ranked = [(row.pk, 0.0) for row in rows]
        return _knowledge_hits(ranked)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        ranked = [(row[0], float(row[1])) for row in cursor.fetchall()]
    return _knowledge_hits(ranked)


def _knowledge_hits(ranked: Sequence[tuple[int, float]]) -> list[KnowledgeHit]:
    rows = Chunk.objects.select_related("document__base").filter(pk__in=[pk for pk, _ in ranked])
    found = {row.pk: row for row in rows}
    hits = []
    for pk, score in ranked:
        row = found.get(pk)
        if row is None:  # deleted between the two queries
            continue
        document = row.document
        hits.append(
            KnowledgeHit(
                document.base.name,
                document.pk,
                document.title,
                document.source,
                document.media_type,
                row.position,
                row.start,
                row.end,
                row.page,
                row.text,
                score,
            )
        )
    return hits


asearch_knowledge = database_sync_to_async(search_knowledge)


# -- knowledge jobs ------------------------------------------------------------------------------

_ACTIVE_JOB = (KnowledgeJobStatus.QUEUED.value, KnowledgeJobStatus.RUNNING.value)
MAX_QUEUED_CANDIDATES = 200  # queued jobs looked at to pick the fairest next one


@dataclass(frozen=True, slots=True)
class KnowledgeJobRow:
    id: int
    tenant: str
    base_id: int
    source: str
    title: str
    size: int
    spool_path: str
    status: KnowledgeJobStatus
    progress: int
    stage: str
    error: str
    document_id: int | None


def _job_row(row: KnowledgeJob) -> KnowledgeJobRow:
    return KnowledgeJobRow(
        row.pk,
        row.tenant,
        row.base_id,
        row.source,
        row.title,
        row.size,
        row.spool_path,
        KnowledgeJobStatus(row.status),
        row.progress,
        row.stage,
        row.error,
        row.document_id,
    )


def create_knowledge_job(
    base_id: int, *, source: str, title: str, size: int, spool_path: str, cap: int | None, running: bool = False
) -> KnowledgeJobRow | None:
    """A queued job for a file spooled at `spool_path`; None (and no row) when the base's tenant
    already has `cap` jobs queued or running. Counted after the insert, among the jobs created
    before it, so two racing uploads never both pass the cap. `running`: its caller runs it now."""
    base = KnowledgeBase.objects.get(pk=base_id)
    row = KnowledgeJob.objects.create(
        base=base,
        tenant=base.tenant,
        source=source[:500],
        title=title[:300],
        size=size,
        spool_path=spool_path,
        created_at=timezone.now(),
        status=(KnowledgeJobStatus.RUNNING if running else KnowledgeJobStatus.QUEUED).value,
        started_at=timezone.now() if running else None,
    )
    if cap is not None:
        ahead = KnowledgeJob.objects.filter(tenant=base.tenant, status__in=_ACTIVE_JOB, pk__lte=row.pk).count()
        if ahead > cap:
            row.delete()
            return None
    return _job_row(row)


def count_active_knowledge_jobs(tenant: str) -> int:
    return KnowledgeJob.objects.filter(tenant=tenant, status__in=_ACTIVE_JOB).count()


def get_knowledge_job(job_id: int) -> KnowledgeJobRow | None:
    row = KnowledgeJob.objects.filter(pk=job_id).first()
    return _job_row(row) if row is not None else None


def claim_knowledge_job(job_id: int, *, stale_before: datetime) -> KnowledgeJobRow | None:
    """Mark a queued job running (or one whose worker started it before `stale_before` and was
    lost: a broker redelivery); None when it is not there to run."""
    now = timezone.now()
    claimable = Q(status=KnowledgeJobStatus.QUEUED.value) | Q(
        status=KnowledgeJobStatus.RUNNING.value, started_at__lt=stale_before
    )
    claimed = KnowledgeJob.objects.filter(claimable, pk=job_id).update(
        status=KnowledgeJobStatus.RUNNING.value, started_at=now, progress=0, stage="starting", error=""
    )
    return get_knowledge_job(job_id) if claimed == 1 else None


def claim_next_knowledge_job() -> KnowledgeJobRow | None:
    """The next queued job, claimed: from the tenant with the fewest running jobs, oldest first,
    so one tenant's queue never holds every worker while another tenant waits."""
    running: dict[str, int] = {}
    for tenant in KnowledgeJob.objects.filter(status=KnowledgeJobStatus.RUNNING.value).values_list("tenant", flat=True):
        running[tenant] = running.get(tenant, 0) + 1
    queued = list(
        KnowledgeJob.objects.filter(status=KnowledgeJobStatus.QUEUED.value)
        .order_by("pk")
        .values_list("pk", "tenant")[:MAX_QUEUED_CANDIDATES]
    )
    for job_id, _tenant in sorted(queued, key=lambda item: (running.get(item[1], 0), item[0])):
        claimed = claim_knowledge_job(job_id, stale_before=timezone.now())
        if claimed is not None and claimed.status is KnowledgeJobStatus.RUNNING:
            return claimed
    return None


def record_knowledge_job_progress(job_id: int, percent: int, stage: str) -> None:
    KnowledgeJob.objects.filter(pk=job_id, status=KnowledgeJobStatus.RUNNING.value).update(
        progress=max(0, min(100, percent)), stage=stage[:200]
    )


def complete_knowledge_job(job_id: int, document: ParsedDocument) -> DocumentRow | None:
    """Store the job's document and mark it done, in one transaction; None (nothing stored) when
    the job is no longer running (failed meanwhile, e.g. past its deadline)."""
    with transaction.atomic():
        job = KnowledgeJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != KnowledgeJobStatus.RUNNING.value:
            return None
        stored = add_document(job.base_id, document, source=job.source)
        job.status = KnowledgeJobStatus.DONE.value
        job.progress = 100
        job.stage = f"{stored.chunk_count} chunks indexed"
        job.document_id = stored.id
        job.finished_at = timezone.now()
        job.save(update_fields=["status", "progress", "stage", "document", "finished_at"])
    return stored


def fail_knowledge_job(job_id: int, error: str) -> bool:
    """Mark a queued or running job failed with why; False when it had already ended."""
    failed = KnowledgeJob.objects.filter(pk=job_id, status__in=_ACTIVE_JOB).update(
        status=KnowledgeJobStatus.FAILED.value, error=error[:2000], stage="failed", finished_at=timezone.now()
    )
    return failed == 1


def fail_stale_knowledge_jobs(started_before: datetime, *, error: str) -> list[KnowledgeJobRow]:
    """Running jobs started before `started_before` (their worker is gone: no job outlives its
    deadline), marked failed; returns them so their spooled files can go."""
    stale = [
        _job_row(row)
        for row in KnowledgeJob.objects.filter(status=KnowledgeJobStatus.RUNNING.value, started_at__lt=started_before)
    ]
    return [row for row in stale if fail_knowledge_job(row.id, error)]


def requeue_knowledge_job(job_id: int) -> bool:
    """A running job whose worker the server stopped goes back to the queue."""
    requeued = KnowledgeJob.objects.filter(pk=job_id, status=KnowledgeJobStatus.RUNNING.value).update(
        status=KnowledgeJobStatus.QUEUED.value, progress=0, stage="", started_at=None
    )
    return requeued == 1


aclaim_next_knowledge_job = database_sync_to_async(claim_next_knowledge_job)
afail_stale_knowledge_jobs = database_sync_to_async(fail_stale_knowledge_jobs)
afail_knowledge_job = database_sync_to_async(fail_knowledge_job)
aget_knowledge_job = database_sync_to_async(get_knowledge_job)
arecord_knowledge_job_progress = database_sync_to_async(record_knowledge_job_progress)
