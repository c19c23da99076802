"""Tool bindings: the `tools` entries of the host config, mirrored for the admin."""

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
