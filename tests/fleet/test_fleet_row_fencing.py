"""Session rows in a fleet's shared PostgreSQL: the write-behind of status and checkpoint is
fenced by the lease (a former owner back from a pause cannot overwrite its successor's row), and
an instance starting up settles only the running sessions whose lease last named it."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from django.db import connections
from pytest_django import DjangoDbBlocker

from fleet_app.lease_token import Leases as HeldLeases
from fleet_app.leases import LeaseManager
from fleet_app.models import SessionLease
from sessions_app import db
from sessions_app.models import Session, Tenant
from sessions_app.records import SessionRecord, SessionStatus
from sessions_app.runtime.writebehind import WriteBehind
from tests.fixtures.services import PostgresServer
from tests.fleet.conftest import drop_database, postgres_alias


@pytest.fixture(scope="module")
def shared_alias(postgres_server: PostgresServer, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    """A fleet's whole database (every app migrated), as its instances share it."""
    alias = postgres_alias(postgres_server, django_db_blocker, prefix="rows")
    yield alias
    drop_database(alias)


@pytest.fixture
def shared(shared_alias: str, django_db_blocker: DjangoDbBlocker) -> Iterator[str]:
    with django_db_blocker.unblock():
        yield shared_alias
        connections[shared_alias].close()


def _session(alias: str, status: SessionStatus = SessionStatus.IDLE) -> SessionRecord:
    record = SessionRecord.new(
        id=secrets.token_hex(16),
        checkpoint=secrets.token_hex(16),
        tenant="acme",
        harness="instant",
        config={"model": "a/b", "tools": []},
        descriptors=[],
    )
    record = dataclasses.replace(record, status=status)
    Tenant.objects.using(alias).get_or_create(name=record.tenant)
    Session.objects.using(alias).create(
        id=record.id, **{**record.row_fields(), "updated_at": db.parse_time(record.created_at)}
    )
    return record


def _lease(alias: str, session_id: str, owner: str, epoch: int, incarnation: str = "") -> None:
    now = datetime.now(UTC)
    incarnation = incarnation or _incarnation(owner)
    SessionLease.objects.using(alias).update_or_create(
        session_id=session_id,
        defaults={
            "owner": owner,
            "incarnation": incarnation,
            "epoch": epoch,
            "expires_at": now + timedelta(seconds=30),
            "updated": now,
        },
    )


def _incarnation(owner: str) -> str:
    """The one process of each instance in these tests."""
    return f"{owner}-process"


def _fence(owner: str, epochs: dict[str, int], incarnation: str = "") -> db.LeaseFence:
    return db.LeaseFence(owner, epochs, incarnation or _incarnation(owner))


def _changed(record: SessionRecord, status: SessionStatus, checkpoint: str) -> SessionRecord:
    return dataclasses.replace(
        record,
        status=status,
        checkpoint={**record.checkpoint, "id": checkpoint, "offset": record.checkpoint["offset"] + 7},
    )


def _row(alias: str, session_id: str) -> tuple[str, str, int]:
    row = Session.objects.using(alias).get(id=session_id)
    return row.status, row.checkpoint_id, row.checkpoint_offset


def test_a_former_owners_row_write_is_refused_and_its_successors_stands(shared: str) -> None:
    # given a session A held at epoch 1, taken by B at epoch 2, and B's row written under it
    record = _session(shared)
    _lease(shared, record.id, "brain-b", 2)
    successor = _changed(record, SessionStatus.INTERRUPTED, "b" * 32)
    written = db.save_session_states([successor], fence=_fence("brain-b", {record.id: 2}), using=shared)
    assert written == 1
    # when A, back from a pause and still believing it holds epoch 1, writes its row behind
    former = _changed(record, SessionStatus.RUNNING, "a" * 32)
    refused = db.save_session_states([former], fence=_fence("brain-a", {record.id: 1}), using=shared)
    # then nothing is written: the row is B's
    assert refused == 0
    assert _row(shared, record.id) == ("interrupted", "b" * 32, 7)
    # and a stale epoch of B's own (B took it again since: epoch 3) is refused too
    _lease(shared, record.id, "brain-b", 3)
    stale = db.save_session_states(
        [_changed(record, SessionStatus.IDLE, "c" * 32)], fence=_fence("brain-b", {record.id: 2}), using=shared
    )
    assert stale == 0
    assert _row(shared, record.id) == ("interrupted", "b" * 32, 7)


def test_a_fenced_batch_writes_only_the_rows_still_held(shared: str) -> None:
    held, taken, unlisted = _session(shared), _session(shared), _session(shared)
    _lease(shared, held.id, "brain-a", 4)
    _lease(shared, taken.id, "brain-c", 2)
    _lease(shared, unlisted.id, "brain-a", 1)
    batch = [_changed(r, SessionStatus.RUNNING, "d" * 32) for r in (held, taken, unlisted)]
    # `unlisted` has no epoch in the fence (its lease lapsing here): not written, whatever the table says
    written = db.save_session_states(batch, fence=_fence("brain-a", {held.id: 4, taken.id: 1}), using=shared)
    assert written == 1
    assert _row(shared, held.id) == ("running", "d" * 32, 7)
    assert _row(shared, taken.id) == ("idle", taken.checkpoint["id"], 0)
    assert _row(shared, unlisted.id) == ("idle", unlisted.checkpoint["id"], 0)


def test_without_a_fence_a_single_instance_writes_every_row(shared: str) -> None:
    record = _session(shared)
    assert db.save_session_states([_changed(record, SessionStatus.RUNNING, "e" * 32)], using=shared) == 1
    assert _row(shared, record.id) == ("running", "e" * 32, 7)


class Leases:
    """The write-behind's view of a LeaseManager: epochs writable now, and leases still believed held."""

    instance = "brain-a"
    incarnation = _incarnation("brain-a")

    def __init__(self) -> None:
        self.writable: dict[str, int] = {}
        self.lapsing: set[str] = set()

    def held_epoch(self, session_id: str) -> int | None:
        return self.writable.get(session_id)

    def holds(self, session_id: str) -> bool:
        return session_id in self.writable or session_id in self.lapsing

    fence_rows = LeaseManager.fence_rows  # the real rule, over the epochs this test sets


def test_the_write_behind_holds_a_lapsing_sessions_row_until_its_lease_is_renewed(
    shared: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "asave_session_states", _on(shared))
    lapsing, lost = _session(shared), _session(shared)
    _lease(shared, lapsing.id, "brain-a", 1)
    _lease(shared, lost.id, "brain-a", 1)
    leases = Leases()
    leases.lapsing.add(lapsing.id)  # renewal late: not writable now, still believed held
    rows = WriteBehind(cast(HeldLeases, leases))
    rows.mark(_changed(lapsing, SessionStatus.RUNNING, "f" * 32))
    rows.mark(_changed(lost, SessionStatus.RUNNING, "f" * 32))  # neither writable nor held: lost
    asyncio.run(rows.flush())
    assert _row(shared, lapsing.id) == ("idle", lapsing.checkpoint["id"], 0)
    assert _row(shared, lost.id) == ("idle", lost.checkpoint["id"], 0)
    # when the renewal comes back, the lapsing session's row is written; the lost one's never is
    leases.lapsing.clear()
    leases.writable[lapsing.id] = 1
    asyncio.run(rows.flush())
    assert _row(shared, lapsing.id) == ("running", "f" * 32, 7)
    asyncio.run(rows.flush())
    assert _row(shared, lost.id) == ("idle", lost.checkpoint["id"], 0)


def _on(alias: str):  # type: ignore[no-untyped-def]
    """asave_session_states on the test's database, off the loop like the real twin."""

    async def save(records: list[SessionRecord], *, fence: db.LeaseFence | None = None) -> int:
        return await asyncio.to_thread(_in_thread, records, fence, alias)

    return save


def _in_thread(records: list[SessionRecord], fence: db.LeaseFence | None, alias: str) -> int:
    try:
        return db.save_session_states(records, fence=fence, using=alias)
    finally:
        connections[alias].close()


def test_a_starting_instance_settles_only_the_running_sessions_its_lease_named(shared: str) -> None:
    ours, theirs, released, marked = (_session(shared, SessionStatus.RUNNING) for _ in range(4))
    _lease(shared, ours.id, "brain-a", 3)
    _lease(shared, theirs.id, "brain-b", 5)
    _lease(shared, released.id, "", 2)
    _lease(shared, marked.id, "brain-b", 1)
    # brain-a restarting: its own running session, and one its disk marks running (its local copy)
    claimed = db.claim_running_sessions([marked.id], owner="brain-a", using=shared)
    these = {ours.id, theirs.id, released.id, marked.id}  # other tests' rows share the database
    assert {record.id for record in claimed} & these == {ours.id, marked.id}
    # a single instance (no fleet) settles every running session in its database
    everything = db.claim_running_sessions(owner=None, using=shared)
    assert {record.id for record in everything} & these == these
