"""Tool bindings (the `tools` entries of the host config, mirrored for the admin) and the
sealed private credentials of session bindings."""

from __future__ import annotations

from django.db import models


class ToolBinding(models.Model):
    name = models.CharField(max_length=64, unique=True)
    description = models.TextField()
    input_schema = models.JSONField()
    output_schema = models.JSONField(null=True, blank=True)
    url = models.URLField(max_length=2048)
    tenants = models.JSONField(help_text="tenant IDs allowed to see and enable the tool")
    token_env = models.CharField(max_length=256, blank=True)
    transport = models.CharField(max_length=32, blank=True)
    mcp_tool = models.CharField(max_length=256, blank=True)
    timeout_seconds = models.PositiveIntegerField(default=300)
    max_output_bytes = models.PositiveIntegerField(default=1 << 20)
    inspect_session = models.BooleanField(default=False)
    from_config = models.BooleanField(default=False, editable=False)

    def __str__(self) -> str:
        return self.name


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
