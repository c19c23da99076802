"""The admin's list of live sessions: those loaded somewhere right now, with their status, the
instance that owns them and their age. In a fleet, every session whose lease is held and not
expired (statuses from the database, which hears of them write-behind, except for this
instance's own sessions, read live); on a single server, the sessions loaded in it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.http import HttpRequest

from fleet_app.admin import in_fleet
from fleet_app.models import SessionLease

from .admin_controls import request_brain
from .models import Session

__all__ = ["MAX_LIVE_LISTED", "LiveSession", "live_sessions"]

MAX_LIVE_LISTED = 500  # rows on the page: a page view stays one bounded query whatever the fleet holds
THIS_SERVER = "this server"  # the owner column without a `cluster` block


@dataclass(frozen=True, slots=True)
class LiveSession:
    id: str
    tenant: str
    status: str
    owner: str  # the owning instance's name (THIS_SERVER on a single server)
    created_at: datetime
    age: timedelta


def live_sessions(request: HttpRequest) -> tuple[list[LiveSession], bool]:
    """(the live sessions, newest first, up to MAX_LIVE_LISTED; whether more were left off)."""
    brain = request_brain(request)
    now = datetime.now(UTC)
    if in_fleet(request):
        leases = SessionLease.objects.exclude(owner="").filter(expires_at__gt=now)
        owners = dict(leases.values_list("session_id", "owner")[: MAX_LIVE_LISTED + 1])
    else:
        loaded = list(brain.engine.actors) if brain is not None else []  # a snapshot of the dict's keys
        owners = {session_id: THIS_SERVER for session_id in loaded[: MAX_LIVE_LISTED + 1]}
    rows = Session.objects.filter(id__in=list(owners)[:MAX_LIVE_LISTED]).order_by("-created_at")
    listed = []
    for row in rows.values("id", "tenant_id", "status", "created_at"):
        record = brain.engine.loaded_record(row["id"]) if brain is not None else None
        listed.append(
            LiveSession(
                id=row["id"],
                tenant=row["tenant_id"],
                status=str(record.status if record is not None else row["status"]),
                owner=owners[row["id"]],
                created_at=row["created_at"],
                age=now - row["created_at"],
            )
        )
    return listed, len(owners) > MAX_LIVE_LISTED
