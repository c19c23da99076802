"""The only ORM user of tools_app (besides models and admin)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction
from pydantic import ValidationError

from brainsite.hostconfig import ToolBindingConfig
from brainsite.logs import logger

from .models import ToolBinding

__all__ = ["aload_admin_bindings", "binding_config", "binding_fields", "load_admin_bindings", "mirror_config_bindings"]


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


def declared_token_envs() -> frozenset[str]:
    """The token variables the host config's tools name: the only ones an admin binding may use."""
    rows = ToolBinding.objects.filter(from_config=True).exclude(token_env="")
    return frozenset(rows.values_list("token_env", flat=True))


def binding_config(row: ToolBinding) -> ToolBindingConfig:
    """The validated config form of a row (the admin form checked it the same way)."""
    return ToolBindingConfig.model_validate(binding_fields(row))


def binding_fields(row: ToolBinding) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": row.name,
        "description": row.description,
        "input_schema": row.input_schema,
        "url": row.url,
        "tenants": row.tenants,
        "timeout_seconds": row.timeout_seconds,
        "max_output_bytes": row.max_output_bytes,
        "inspect_session": row.inspect_session,
    }
    for key in ("output_schema", "token_env", "transport", "mcp_tool"):
        value = getattr(row, key)
        if value not in (None, ""):
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
