"""Tenants, API tokens (SHA-256 digests only), sessions and the approvals of their tool calls.
State and tiny pure properties."""

from __future__ import annotations

from django.db import models

from .records import ApprovalStatus, SessionStatus  # plain values, so the runtime needs no model import


class TokenSource(models.TextChoices):
    CONFIG = "config", "host config"
    ADMIN = "admin", "admin"


class Tenant(models.Model):
    name = models.CharField(max_length=128, primary_key=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A bearer grant. The token value itself is never stored, only its SHA-256 digest."""

    digest = models.CharField(max_length=64, unique=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tokens")
    label = models.CharField(max_length=128, blank=True, help_text="token_env for config tokens")
    manage = models.BooleanField(default=False)
    read_only = models.BooleanField(default=False)
    session = models.CharField(max_length=32, blank=True, help_text="limit to one session ID")
    source = models.CharField(max_length=8, choices=TokenSource.choices, default=TokenSource.ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.label or self.digest[:12]} ({self.tenant_id})"


class Session(models.Model):
    id = models.CharField(max_length=32, primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="sessions")
    harness = models.CharField(max_length=64)
    model = models.CharField(max_length=256)
    config = models.JSONField()
    descriptors = models.JSONField(default=list)
    status = models.CharField(max_length=16, default=SessionStatus.IDLE)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    checkpoint_id = models.CharField(max_length=32)
    checkpoint_offset = models.BigIntegerField(default=0)
    checkpoint_time = models.DateTimeField()
    # aliases of the bindings created with a private credential (Session.credential_bindings);
    # the sealed values live in tools_app's SessionCredential
    credential_bindings = models.JSONField(default=list)
    # a sub-agent's session: the session and tool call that spawned it, and how many such links
    # lie above it (0 for a session a client created); the parent's tool.result names the child
    parent_session = models.CharField(max_length=32, blank=True, default="", db_index=True)
    parent_call = models.CharField(max_length=64, blank=True, default="")
    depth = models.PositiveSmallIntegerField(default=0)
    # where the session's model key comes from (records.model_credential_source): {}, a sealed
    # api_key (the value in tools_app's SessionCredential under vault.MODEL_CREDENTIAL_ALIAS) or
    # a reference to the host config's model_credentials; never a key
    model_credential = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["tenant", "id"]), models.Index(fields=["status"])]

    def __str__(self) -> str:
        return self.id


class Approval(models.Model):
    """A person's decision on one tool call of a tool that requires approval. Its status leaves
    `pending` once, by a conditional UPDATE (sessions_app.db.finish_approval)."""

    id = models.CharField(max_length=32, primary_key=True)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="approvals")
    tenant = models.CharField(max_length=128)
    call_id = models.CharField(max_length=32)
    tool = models.CharField(max_length=64)
    arguments = models.JSONField()
    status = models.CharField(
        max_length=16,
        choices=[(status.value, status.value) for status in ApprovalStatus],
        default=ApprovalStatus.PENDING.value,
    )
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    decided_by = models.CharField(max_length=160, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["session", "status"]), models.Index(fields=["tenant", "status"])]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"
