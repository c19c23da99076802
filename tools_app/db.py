"""The only ORM user of tools_app (besides models and admin)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from brainsite.hostconfig import ToolBindingConfig

from .models import ToolBinding

__all__ = ["mirror_config_bindings"]


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
                    "from_config": True,
                },
            )
        ToolBinding.objects.filter(from_config=True).exclude(name__in=names).delete()
