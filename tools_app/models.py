"""Tool bindings (the `tools` entries of the host config, mirrored for the admin), the admin's
approval rules, the sealed
private credentials of session bindings, and what the built-in providers keep: memories (with a
full-text index the migration maintains per database vendor), tasks, and knowledge bases with
their documents, chunks and ingestion jobs."""

from __future__ import annotations

from django.db import models

from .ingest.documents import KnowledgeJobStatus


class ToolBinding(models.Model):
    name = models.CharField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(null=True, blank=True)
    output_schema = models.JSONField(null=True, blank=True)
    url = models.URLField("URL", max_length=2048, blank=True)
    tenants = models.JSONField(help_text="tenant IDs allowed to see and enable the tool")
    token_env = models.CharField(
        "token variable", max_length=256, blank=True, help_text="the environment variable holding its bearer token"
    )
    transport = models.CharField(max_length=32, blank=True)
    mcp_tool = models.CharField("MCP tool", max_length=256, blank=True, help_text="the tool's name on the MCP server")
    timeout_seconds = models.PositiveIntegerField(default=300)
    max_output_bytes = models.PositiveIntegerField(default=1 << 20)
    inspect_session = models.BooleanField(default=False)
    require_approval = models.BooleanField(default=False, help_text="each call waits for a person's decision")
    approval_timeout_seconds = models.PositiveIntegerField(default=600)
    method = models.CharField(max_length=8, blank=True, help_text="transport rest: GET, POST, PUT, PATCH or DELETE")
    query = models.JSONField(null=True, blank=True, help_text="transport rest: query parameter templates")
    headers = models.JSONField(null=True, blank=True, help_text="transport rest: header templates")
    body = models.JSONField(null=True, blank=True, help_text="transport rest: the JSON body template")
    provider = models.CharField(max_length=64, blank=True, help_text="transport provider: an installed provider")
    operation = models.CharField(max_length=64, blank=True, help_text="transport provider: the provider's operation")
    parameters = models.JSONField(null=True, blank=True, help_text="transport provider: the binding's parameters")
    from_config = models.BooleanField("from the host config", default=False, editable=False)

    def __str__(self) -> str:
        return self.name


class ApprovalRule(models.Model):
    """An admin's approval rule (foundation.hostconfig.approvals.ApprovalRule): calls of any kind
    of tool that match it wait for a person's decision. The host config's rules come first."""

    tools = models.JSONField(default=list, help_text='patterns on the name the model sees, e.g. ["runtime_*"]')
    kinds = models.JSONField(default=list, help_text="config, provider, runtime (empty: every kind)")
    providers = models.JSONField(null=True, blank=True, help_text="installed providers (empty: any tool)")
    tenants = models.JSONField(null=True, blank=True, help_text="tenant IDs (empty: every tenant)")
    approval_timeout_seconds = models.PositiveIntegerField(default=600)

    def __str__(self) -> str:
        return ", ".join(str(pattern) for pattern in self.tools) if isinstance(self.tools, list) else "rule"


class SessionCredential(models.Model):
    """One binding's private credential, sealed by tools_app.vault (AES-256-GCM, bound to tenant,
    session and alias). Never the value in clear. A revoked record stays as a tombstone: no key id,
    nonce or ciphertext, so a call of its binding stops instead of running without it."""

    session_id = models.CharField(max_length=32)
    alias = models.CharField(max_length=32)
    tenant = models.CharField(max_length=128)
    version = models.PositiveSmallIntegerField()
    key_id = models.CharField(max_length=128, blank=True)
    nonce = models.CharField(max_length=24, blank=True)  # base64 of 12 bytes
    ciphertext = models.TextField(blank=True)  # base64
    revoked = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session_id", "alias"], name="one_credential_per_binding")]
        indexes = [models.Index(fields=["key_id"])]  # rotation finds records not under the active key

    def __str__(self) -> str:
        return f"{self.session_id}/{self.alias}"


class Memory(models.Model):
    """One remembered fact of a tenant, in a named memory space ("" is the tenant's default).
    Searched through a full-text index the migration creates for the database vendor (an FTS5
    table kept in sync by triggers on SQLite, a GIN expression index on PostgreSQL)."""

    tenant = models.CharField(max_length=128)
    space = models.CharField(max_length=64, blank=True)
    content = models.TextField()
    session_id = models.CharField(max_length=32, blank=True)  # the session that stored it
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "space", "created_at"])]
        verbose_name_plural = "memories"

    def __str__(self) -> str:
        return self.content[:60]


class TaskStatus(models.TextChoices):
    PENDING = "pending"  # created, not started
    IN_PROGRESS = "in_progress"  # someone works on it
    COMPLETED = "completed"  # done
    CANCELLED = "cancelled"  # dropped


class Task(models.Model):
    """A tenant's work item; a subtask names its parent (of the same tenant)."""

    tenant = models.CharField(max_length=128)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="subtasks")
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    session_id = models.CharField(max_length=32, blank=True)  # the session that created it
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "id"]), models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return self.title


class KnowledgeBase(models.Model):
    """A tenant's named collection of documents that `knowledge_search` bindings search."""

    tenant = models.CharField(max_length=128)
    name = models.CharField(max_length=64, help_text="what a knowledge_search binding's parameters.bases name")
    description = models.TextField(blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="one_knowledge_base_name_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


class Document(models.Model):
    """One ingested file of a knowledge base; its text lives in its chunks."""

    base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    title = models.CharField(max_length=300)
    source = models.CharField(max_length=500, help_text="the file name it was added from")
    media_type = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField(help_text="bytes of the file")
    chunk_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["base", "created_at"])]

    def __str__(self) -> str:
        return self.title


class Chunk(models.Model):
    """A passage of a document's extracted text, the unit a search returns. Searched through a
    full-text index the migration creates for the database vendor (an FTS5 table kept in sync by
    triggers on SQLite, a GIN expression index on PostgreSQL)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    position = models.PositiveIntegerField(help_text="0 for the document's first chunk")
    start = models.PositiveIntegerField(help_text="character offset in the document's extracted text")
    end = models.PositiveIntegerField()
    page = models.PositiveIntegerField(null=True, blank=True, help_text="PDF: the page the chunk starts on (1-based)")
    text = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["document", "position"], name="one_chunk_per_position")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.position}"


class KnowledgeJob(models.Model):
    """The ingestion of one uploaded file into a knowledge base, run by a worker process with CPU
    and memory budgets (tools_app.providers.knowledge.jobs): its state, progress and why it failed."""

    base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="jobs")
    tenant = models.CharField(max_length=128, help_text="the base's tenant: jobs are capped per tenant")
    source = models.CharField(max_length=500, help_text="the file name it was uploaded as")
    title = models.CharField(max_length=300, blank=True, help_text="the title asked for (default: the document's)")
    size = models.PositiveBigIntegerField(help_text="bytes of the file")
    spool_path = models.CharField(max_length=1024, help_text="where the file waits for its worker")
    status = models.CharField(
        max_length=16,
        choices=[(status.value, status.value) for status in KnowledgeJobStatus],
        default=KnowledgeJobStatus.QUEUED.value,
    )
    progress = models.PositiveSmallIntegerField(default=0, help_text="percent done")
    stage = models.CharField(max_length=200, blank=True, help_text="what the worker is doing")
    error = models.TextField(blank=True, help_text="why the document was not added")
    document = models.ForeignKey(Document, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "tenant"]), models.Index(fields=["base", "created_at"])]

    def __str__(self) -> str:
        return f"{self.source} ({self.status})"
