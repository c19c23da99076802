"""The only ORM user of persistence_app (besides models and admin): sync-state rows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.db import transaction
from django.db.models import F

from foundation.rfc3339 import format_time
from foundation.rfc3339 import parse_time as _parse

from .models import SyncState

__all__ = [
    "Publication",
    "SyncRow",
    "abump_epoch",
    "apermanently_failed",
    "aget_state",
    "astates",
    "bump_epoch",
    "current_epoch",
    "delete_state",
    "get_state",
    "permanently_failed",
    "record_failure",
    "record_publication",
    "states",
]


@dataclass(frozen=True, slots=True)
class SyncRow:
    session_id: str
    epoch: int
    synced_seq: int
    checkpoint: str
    history_bytes: int
    resume_offset: int
    native_checkpoint: str
    published_at: str  # RFC 3339, "" before the first publication
    error: str
    failed_seq: int
    error_permanent: bool


@dataclass(frozen=True, slots=True)
class Publication:
    checkpoint: str
    history_bytes: int
    resume_offset: int
    native_checkpoint: str
    time: str


def _row(state: SyncState) -> SyncRow:
    return SyncRow(
        session_id=state.session_id,
        epoch=state.epoch,
        synced_seq=state.synced_seq,
        checkpoint=state.checkpoint,
        history_bytes=state.history_bytes,
        resume_offset=state.resume_offset,
        native_checkpoint=state.native_checkpoint,
        published_at=format_time(state.published_at) if state.published_at else "",
        error=state.error,
        failed_seq=state.failed_seq,
        error_permanent=state.error_permanent,
    )


def get_state(session_id: str) -> SyncRow | None:
    state = SyncState.objects.filter(session_id=session_id).first()
    return _row(state) if state is not None else None


def states(session_ids: Iterable[str]) -> dict[str, SyncRow]:
    return {state.session_id: _row(state) for state in SyncState.objects.filter(session_id__in=list(session_ids))}


def permanently_failed() -> list[str]:
    """Sessions whose last publish failed in a way retrying within the job could not fix."""
    rows = SyncState.objects.filter(error_permanent=True).order_by("session_id")
    return list(rows.values_list("session_id", flat=True))


def _locked_row(session_id: str, tenant: str) -> SyncState:
    state, _ = SyncState.objects.select_for_update().get_or_create(session_id=session_id, defaults={"tenant": tenant})
    return state


def current_epoch(session_id: str) -> int:
    epoch = SyncState.objects.filter(session_id=session_id).values_list("epoch", flat=True).first()
    return int(epoch or 0)


def bump_epoch(session_id: str, tenant: str) -> int:
    """Fence every publish of the session that is in flight; returns the new epoch."""
    with transaction.atomic():
        state = _locked_row(session_id, tenant)
        SyncState.objects.filter(session_id=session_id).update(epoch=F("epoch") + 1)
        return state.epoch + 1


def record_publication(session_id: str, tenant: str, seq: int, publication: Publication) -> None:
    with transaction.atomic():
        state = _locked_row(session_id, tenant)
        state.synced_seq = max(state.synced_seq, seq)
        state.checkpoint = publication.checkpoint
        state.history_bytes = publication.history_bytes
        state.resume_offset = publication.resume_offset
        state.native_checkpoint = publication.native_checkpoint
        state.published_at = _parse(publication.time)
        if state.failed_seq <= seq:
            state.error, state.failed_seq, state.error_permanent = "", 0, False
        state.save()


def delete_state(session_id: str) -> None:
    """A deleted session's sync-state row."""
    SyncState.objects.filter(session_id=session_id).delete()


def record_failure(session_id: str, tenant: str, seq: int, error: str, *, permanent: bool) -> None:
    with transaction.atomic():
        state = _locked_row(session_id, tenant)
        state.error = error[:1000]
        state.failed_seq = max(state.failed_seq, seq)
        state.error_permanent = permanent
        state.save()


aget_state = database_sync_to_async(get_state)
astates = database_sync_to_async(states)
abump_epoch = database_sync_to_async(bump_epoch)
apermanently_failed = database_sync_to_async(permanently_failed)
