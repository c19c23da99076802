"""The catalog's and the credentials' queries: tool bindings (the config's, mirrored, and the
admin's) and the sealed credentials of session bindings. The built-in tools keep their queries in
their own packages (tools_app.providers.<tool>.db)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from foundation.hostconfig import ApprovalRule as ApprovalRuleConfig
from foundation.hostconfig import ToolBindingConfig
from foundation.logs import logger

from .models import ApprovalRule, SessionCredential, ToolBinding
from .origins import url_origin
from .vault import RecoveryRecord, SealedCredential, recovery_record

__all__ = [
    "StoredCredential",
    "adelete_credentials",
    "aget_credential",
    "aimport_credentials",
    "aload_admin_bindings",
    "aload_approval_rules",
    "approval_rule",
    "astore_credentials",
    "binding_config",
    "binding_fields",
    "count_credentials_to_rotate",
    "credentials_to_rotate",
    "declared_token_origins",
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


def binding_fields(row: ToolBinding) -> dict[str, object]:
    fields: dict[str, object] = {
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


def approval_rule(row: ApprovalRule) -> ApprovalRuleConfig:
    """The validated config form of an admin rule (empty lists: the defaults)."""
    fields = {
        key: value
        for key in ("tools", "kinds", "providers", "tenants")
        if (value := getattr(row, key)) not in (None, [], "")
    }
    return ApprovalRuleConfig.model_validate({**fields, "approval_timeout_seconds": row.approval_timeout_seconds})


def load_approval_rules() -> list[ApprovalRuleConfig]:
    """The admin's approval rules in the order they were made; a row that no longer validates is
    skipped and logged."""
    rules = []
    for row in ApprovalRule.objects.order_by("id"):
        try:
            rules.append(approval_rule(row))
        except ValidationError as exc:
            logger.warning("skipping invalid approval rule", extra={"rule": row.id, "error": str(exc)[:300]})
    return rules


aload_approval_rules = database_sync_to_async(load_approval_rules)


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


def _sealed_fields(sealed: SealedCredential) -> dict[str, object]:
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
