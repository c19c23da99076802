"""The knowledge tool's queries: knowledge bases, their documents and chunks (searched through
the full-text index the migration maintains per database vendor), and ingestion jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from channels.db import database_sync_to_async
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from ...fulltext import query_terms
from ...ingest.documents import KnowledgeJobStatus, ParsedDocument
from ...models import Chunk, Document, KnowledgeBase, KnowledgeJob

__all__ = [
    "MAX_KNOWLEDGE_RESULTS",
    "DocumentRow",
    "KnowledgeHit",
    "KnowledgeJobRow",
    "aclaim_next_knowledge_job",
    "afail_knowledge_job",
    "afail_stale_knowledge_jobs",
    "aget_knowledge_job",
    "arecord_knowledge_job_progress",
    "asearch_knowledge",
    "add_document",
    "claim_knowledge_job",
    "claim_next_knowledge_job",
    "complete_knowledge_job",
    "count_active_knowledge_jobs",
    "create_knowledge_job",
    "ensure_knowledge_base",
    "fail_knowledge_job",
    "fail_stale_knowledge_jobs",
    "get_document",
    "get_knowledge_job",
    "record_knowledge_job_progress",
    "requeue_knowledge_job",
    "search_knowledge",
]


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

    def as_dict(self) -> dict[str, object]:
        position: dict[str, object] = {"chunk": self.position, "start": self.start, "end": self.end}
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
    terms = query_terms(query)
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
        params: list[str | int] = [match, *base_ids, limit]
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
