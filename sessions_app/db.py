"""The only ORM user of sessions_app (besides models and admin): sync units plus `a*` twins."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import import_module
from typing import Any

from channels.auth import get_user
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import Exists, Q

from fleet_app.lease_token import LeaseFence
from fleet_app.models import JournalEntry, SessionLease
from foundation.hostconfig import HostConfig
from foundation.rfc3339 import format_time as _format_time
from foundation.rfc3339 import parse_time

from .models import ApiToken, Approval, Session, Tenant, TokenSource
from .records import ApprovalRecord, ApprovalStatus, Principal, SessionRecord, SessionStatus, model_credential_source

__all__ = [
    "acancel_pending_approvals",
    "aclaim_running_sessions",
    "acreate_approval",
    "afinish_approval",
    "awithdraw_decision",
    "aget_approval",
    "acreate_session",
    "achild_sessions",
    "delete_session_rows",
    "afind_grant",
    "aget_session",
    "aget_session_by_id",
    "aimport_session",
    "get_session_by_id",
    "import_session",
    "alist_sessions",
    "asave_session_states",
    "asave_session_config",
    "LeaseFence",
    "digest_token",
    "mirror_config_tokens",
    "parse_time",
]


def digest_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _record(row: Session) -> SessionRecord:
    return SessionRecord(
        id=row.id,
        tenant=row.tenant_id,
        harness=row.harness,
        config=row.config,
        descriptors=row.descriptors,
        status=SessionStatus(row.status),
        created_at=_format_time(row.created_at),
        updated_at=_format_time(row.updated_at),
        checkpoint={
            "id": row.checkpoint_id,
            "offset": row.checkpoint_offset,
            "time": _format_time(row.checkpoint_time),
        },
        credential_bindings=list(row.credential_bindings),
        parent_session=row.parent_session,
        parent_call=row.parent_call,
        depth=row.depth,
        model_credential=model_credential_source(row.model_credential),
    )


def mirror_config_tokens(config: HostConfig, tokens: Iterable[str]) -> None:
    """Make the config's grants the config-sourced tokens in the database (read-only in admin)."""
    with transaction.atomic():
        digests = []
        for grant, value in zip(config.tokens, tokens, strict=True):
            Tenant.objects.get_or_create(name=grant.tenant)
            digest = digest_token(value)
            digests.append(digest)
            ApiToken.objects.update_or_create(
                digest=digest,
                defaults={
                    "tenant_id": grant.tenant,
                    "label": grant.token_env,
                    "manage": grant.manage,
                    "read_only": grant.read_only,
                    "session": grant.session,
                    "source": TokenSource.CONFIG,
                },
            )
        ApiToken.objects.filter(source=TokenSource.CONFIG).exclude(digest__in=digests).delete()
        for binding in config.tools:
            for tenant in binding.tenants:
                Tenant.objects.get_or_create(name=tenant)


def find_grant(digest: str) -> Principal | None:
    fields = ("tenant_id", "manage", "read_only", "session", "label", "source")
    row = ApiToken.objects.filter(digest=digest).values(*fields).first()
    if row is None:
        return None
    # A config token's label is the environment variable it is read from: records of what the
    # token did (an approval's decided_by) name the token, never the variable.
    named = row["label"] if row["source"] != TokenSource.CONFIG else ""
    return Principal(
        tenant=row["tenant_id"],
        manage=row["manage"],
        read_only=row["read_only"],
        session=row["session"],
        label=named or f"token {digest[:12]}",
    )


def create_session(record: SessionRecord) -> None:
    created = parse_time(record.created_at)
    Tenant.objects.get_or_create(name=record.tenant)
    Session.objects.create(id=record.id, **{**record.row_fields(), "updated_at": created})


def get_session(tenant: str, session_id: str) -> SessionRecord | None:
    row = Session.objects.filter(tenant_id=tenant, id=session_id).first()
    return _record(row) if row is not None else None


def get_session_by_id(session_id: str) -> SessionRecord | None:
    """Any tenant's session: for the sync publisher and restore's tenant check."""
    row = Session.objects.filter(id=session_id).first()
    return _record(row) if row is not None else None


def import_session(record: SessionRecord) -> bool:
    """Create or replace a session's row from an archived checkpoint. False (and nothing
    written) when the id belongs to another tenant."""
    with transaction.atomic():
        existing = Session.objects.select_for_update().filter(id=record.id).values_list("tenant_id", flat=True).first()
        if existing is not None and existing != record.tenant:
            return False
        Tenant.objects.get_or_create(name=record.tenant)
        Session.objects.update_or_create(id=record.id, defaults=record.row_fields())
    return True


def list_sessions(tenant: str, *, after: str, limit: int, only: str = "") -> list[SessionRecord]:
    rows = Session.objects.filter(tenant_id=tenant, id__gt=after).order_by("id")
    if only:
        rows = rows.filter(id=only)
    return [_record(row) for row in rows[:limit]]


STATE_FIELDS = ("status", "updated_at", "checkpoint_id", "checkpoint_offset", "checkpoint_time")


def save_session_states(
    records: list[SessionRecord], *, fence: LeaseFence | None = None, using: str = DEFAULT_DB_ALIAS
) -> int:
    """Write-behind of runtime state: status, updated_at and checkpoint. Returns the rows written.

    One prepared UPDATE run with executemany in one transaction: bulk_update's CASE/WHEN
    statement costs milliseconds of Python per hundred rows, in a thread that holds the GIL
    while the event loop waits.

    In a fleet (`fence`), a row is written only while the fleet's lease table still gives its
    session to this process of this instance at the epoch the record was written under, in the
    same statement: a former owner back from a pause never overwrites its successor's row, even
    a successor that re-joined under the same name.
    """
    if not records:
        return 0
    database = connections[using]
    meta = Session._meta
    fields = [meta.get_field(name) for name in STATE_FIELDS]
    quote = database.ops.quote_name
    columns = [str(field.column) for field in fields]  # type: ignore[union-attr]  # concrete fields have columns
    assignments = ", ".join(f"{quote(column)} = %s" for column in columns)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(str(meta.pk.column))} = %s"
    if fence is not None:
        sql += (
            f" AND EXISTS (SELECT 1 FROM {quote(SessionLease._meta.db_table)}"
            " WHERE session_id = %s AND owner = %s AND incarnation = %s AND epoch = %s)"
        )
    prepare = [field.get_db_prep_save for field in fields]  # type: ignore[union-attr]  # concrete fields
    params = []
    for record in records:
        row: tuple[Any, ...] = (
            prepare[0](record.status, database),
            prepare[1](parse_time(record.updated_at), database),
            prepare[2](record.checkpoint["id"], database),
            prepare[3](record.checkpoint["offset"], database),
            prepare[4](parse_time(record.checkpoint["time"]), database),
            record.id,
        )
        if fence is not None:
            epoch = fence.epochs.get(record.id)
            if epoch is None:
                continue  # no longer held here: the successor writes the row
            row += (record.id, fence.owner, fence.incarnation, epoch)
        params.append(row)
    if not params:
        return 0
    with transaction.atomic(using=using), database.cursor() as cursor:
        cursor.executemany(sql, params)
        return max(int(cursor.rowcount), 0)


def save_session_config(record: SessionRecord, *, fence: LeaseFence | None = None) -> bool:
    """A configuration change applied (session.configure): the row's config and descriptors,
    fenced like the write-behind's rows in a fleet. Whether the row was written."""
    rows = Session.objects.filter(id=record.id)
    if fence is not None:
        epoch = fence.epochs.get(record.id)
        if epoch is None:
            return False  # no longer held here: the successor owns the row
        held = SessionLease.objects.filter(
            session_id=record.id, owner=fence.owner, incarnation=fence.incarnation, epoch=epoch
        )
        rows = rows.filter(Exists(held))
    return rows.update(config=dict(record.config), descriptors=list(record.descriptors)) > 0


def claim_running_sessions(
    marked: Iterable[str] = (), *, owner: str | None = None, using: str = DEFAULT_DB_ALIAS
) -> list[SessionRecord]:
    """Sessions the database last saw running, or `marked` running on disk: after a restart
    their turns are gone. In a fleet (`owner`), only those whose lease last named this
    instance: the others' running sessions are theirs, or taken on their next request."""
    running = Q(status=SessionStatus.RUNNING)
    if owner is not None:
        leased = SessionLease.objects.using(using).filter(owner=owner).values("session_id")
        running &= Q(id__in=leased)
    rows = Session.objects.using(using).filter(running | Q(id__in=list(marked))).order_by("id")
    return [_record(row) for row in rows]


def delete_session_rows(session_id: str) -> None:
    """A deleted session's rows: the session, its approvals, its input journal and its lease
    (a former owner's fenced writes then match no lease), in one transaction."""
    with transaction.atomic():
        Approval.objects.filter(session_id=session_id).delete()
        Session.objects.filter(id=session_id).delete()
        JournalEntry.objects.filter(session_id=session_id).delete()
        SessionLease.objects.filter(session_id=session_id).delete()


def child_sessions(session_id: str, *, limit: int) -> list[str]:
    """Up to `limit` ids of the sub-agent sessions a session spawned (and not deleted)."""
    rows = Session.objects.filter(parent_session=session_id).order_by("id").values_list("id", flat=True)
    return list(rows[:limit])


afind_grant = database_sync_to_async(find_grant)
acreate_session = database_sync_to_async(create_session)
aget_session = database_sync_to_async(get_session)
aget_session_by_id = database_sync_to_async(get_session_by_id)
aimport_session = database_sync_to_async(import_session)
alist_sessions = database_sync_to_async(list_sessions)
asave_session_states = database_sync_to_async(save_session_states)
asave_session_config = database_sync_to_async(save_session_config)
aclaim_running_sessions = database_sync_to_async(claim_running_sessions)
achild_sessions = database_sync_to_async(child_sessions)


# -- approvals of tool calls ---------------------------------------------------------------------


def _approval(row: Approval) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        session_id=row.session_id,
        tenant=row.tenant,
        call_id=row.call_id,
        tool=row.tool,
        arguments=row.arguments,
        status=row.status,
        created_at=_format_time(row.created_at),
        expires_at=_format_time(row.expires_at),
        decided_by=row.decided_by,
        decided_at=_format_time(row.decided_at) if row.decided_at is not None else None,
        reason=row.reason,
    )


def create_approval(record: ApprovalRecord) -> None:
    """A call's pending approval."""
    Approval.objects.create(
        id=record.id,
        session_id=record.session_id,
        tenant=record.tenant,
        call_id=record.call_id,
        tool=record.tool,
        arguments=record.arguments,
        status=ApprovalStatus.PENDING,
        created_at=parse_time(record.created_at),
        expires_at=parse_time(record.expires_at),
    )


def get_approval(tenant: str, session_id: str, approval_id: str) -> ApprovalRecord | None:
    row = Approval.objects.filter(id=approval_id, tenant=tenant, session_id=session_id).first()
    return _approval(row) if row is not None else None


def finish_approval(
    approval_id: str, status: ApprovalStatus, *, decided_by: str, reason: str, before: datetime | None = None
) -> ApprovalRecord | None:
    """Settle a pending approval (a conditional UPDATE: only one settlement wins); `before`
    refuses a decision at or after its expiry. The row as it is now: None when it is gone."""
    now = datetime.now(UTC)
    pending = Approval.objects.filter(id=approval_id, status=ApprovalStatus.PENDING)
    if before is not None:
        pending = pending.filter(expires_at__gt=before)
    pending.update(status=status, decided_by=decided_by[:160], decided_at=now, reason=reason)
    row = Approval.objects.filter(id=approval_id).first()
    return _approval(row) if row is not None else None


def withdraw_decision(approval_id: str, *, decided: ApprovalStatus, reason: str) -> None:
    """A decision that landed as its call was cancelled: the call never ran, so the row says
    cancelled, not `decided` (conditional on the row still holding that decision)."""
    Approval.objects.filter(id=approval_id, status=decided).update(
        status=ApprovalStatus.CANCELLED, decided_by="brain", decided_at=datetime.now(UTC), reason=reason
    )


def cancel_pending_approvals(session_id: str, *, reason: str) -> list[ApprovalRecord]:
    """A session being loaded has no call waiting: whatever is still pending (its server
    stopped meanwhile) can never be dispatched. Returns the approvals cancelled."""
    cancelled = []
    pending = Approval.objects.filter(session_id=session_id, status=ApprovalStatus.PENDING)
    for approval_id in list(pending.values_list("id", flat=True)):
        record = finish_approval(approval_id, ApprovalStatus.CANCELLED, decided_by="brain", reason=reason)
        if record is not None and record.status == ApprovalStatus.CANCELLED:
            cancelled.append(record)
    return cancelled


acreate_approval = database_sync_to_async(create_approval)
aget_approval = database_sync_to_async(get_approval)
afinish_approval = database_sync_to_async(finish_approval)
awithdraw_decision = database_sync_to_async(withdraw_decision)
acancel_pending_approvals = database_sync_to_async(cancel_pending_approvals)


async def aconsole_tenant(session_key: str, session_id: str) -> str | None:
    """The tenant of a session (canonical id) for the admin's live transcript, when `session_key`
    is the admin session of an active staff member who may view sessions; None otherwise (an
    unknown session too)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = await get_user({"session": store})
    tenant: str | None = await _aconsole_tenant(user, session_id)
    return tenant


def _console_tenant(user: Any, session_id: str) -> str | None:
    if not (user.is_active and user.is_staff and user.has_perm("sessions_app.view_session")):
        return None
    tenant = Session.objects.filter(id=session_id).values_list("tenant_id", flat=True).first()
    return None if tenant is None else str(tenant)


_aconsole_tenant = database_sync_to_async(_console_tenant)
