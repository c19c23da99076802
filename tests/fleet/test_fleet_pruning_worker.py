"""Journal pruning when a Celery sync worker publishes: a fleet instance that dispatches its
publishes to a real `manage.py syncworker` (Redis broker, PostgreSQL, a shared filesystem
archive) forgets the inputs the worker's checkpoint covers, as it does for its own publishes;
and a worker whose job carries an epoch the lease has moved past prunes nothing."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from fleet_app import db
from fleet_app.journal import InputJournal
from persistence_app.tasks import prune_covered
from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import SECRET
from tests.fleet.test_fleet_journal import _journal_rows
from tests.persistence.test_sync_services import SyncWorker, _filesystem, _wait, broker_url, sync_worker

__all__ = ["broker_url", "sync_worker"]

LEASE_SECONDS = 10
PUBLISH_WAIT_SECONDS = 60.0  # the scheduler's first interval, the broker hop and the upload


def _instance(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path, broker: str
) -> BrainServer:
    """One fleet instance whose background publishes go through the broker (interval 1 s)."""
    archive = tmp_path / "archive"
    archive.mkdir()
    server = brain_factory(start=False, persistence=_filesystem(archive))
    server.config["cluster"] = {
        "instance": "brain-a",
        "url": server.url,
        "lease_seconds": LEASE_SECONDS,
        "shared_directory": True,
    }
    database = postgres_server.create_database(f"brain_fleet_prune_{secrets.token_hex(4)}")
    server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": SECRET, "BRAIN_CELERY_BROKER": broker}
    server.start()
    return server


def _published_by(log: str, session_id: str) -> list[str]:
    return [line for line in log.splitlines() if '"msg": "session published"' in line and session_id in line]


def test_a_checkpoint_a_celery_worker_publishes_prunes_the_inputs_it_covers(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    broker_url: str,
    sync_worker: Callable[[BrainServer], SyncWorker],
    tmp_path: Path,
) -> None:
    # given: a fleet instance publishing through a Celery worker, and two settled inputs journaled
    server = _instance(brain_factory, postgres_server, tmp_path, broker_url)
    worker = sync_worker(server)
    session_id = create_session(server)["id"]
    send_ok(server, session_id, "first")
    wait_for_status(server, session_id, "idle")
    send_ok(server, session_id, "second")
    wait_for_status(server, session_id, "idle")
    # when: the scheduler hands the dirty session to the worker, which publishes it
    _wait(lambda: _journal_rows(server, session_id) == 0, PUBLISH_WAIT_SECONDS, "the journal to be pruned")
    # then: the worker published the checkpoint (the server did not) and the journal holds nothing
    assert _published_by(worker.log(), session_id), worker.log()[-3000:]
    assert _published_by(server.logs(), session_id) == []
    assert _journal_rows(server, session_id) == 0
    # and: a later input is journaled again until a checkpoint covers it
    send_ok(server, session_id, "third")
    wait_for_status(server, session_id, "idle")
    _wait(lambda: _journal_rows(server, session_id) == 0, PUBLISH_WAIT_SECONDS, "the third input to be pruned")


def test_a_worker_job_whose_lease_moved_on_prunes_nothing(fleet_db: str) -> None:
    # given: a session whose lease brain-b took (epoch 2) after brain-a dispatched a publish at epoch 1
    journal = InputJournal(database=fleet_db)
    session_id = secrets.token_hex(16)
    processes = {name: secrets.token_hex(8) for name in ("brain-a", "brain-b")}
    for name, incarnation in processes.items():
        assert db.join_instance(name, url=f"http://{name}", incarnation=incarnation, lease_seconds=60, using=fleet_db)
    a, b = processes["brain-a"], processes["brain-b"]
    assert db.acquire_lease(session_id, owner="brain-a", incarnation=a, lease_seconds=60, using=fleet_db) == 1
    entries = [
        db.record_input(session_id, input_id=secrets.token_hex(16), key=None, payload={}, epoch=1, using=fleet_db)
        for _ in range(3)
    ]
    assert db.release_lease(session_id, owner="brain-a", incarnation=a, epoch=1, using=fleet_db)
    assert db.acquire_lease(session_id, owner="brain-b", incarnation=b, lease_seconds=60, using=fleet_db) == 2
    # when: the epoch-1 job's checkpoint, covering the first two, is published
    pruned = prune_covered(journal, session_id, entries[1].seq, epoch=1)
    # then: nothing is pruned (brain-b may be replaying them from an older checkpoint)
    assert pruned is False
    assert [row.seq for row in db.journal_after(session_id, 0, using=fleet_db)] == [entry.seq for entry in entries]
    # when: a job at the lease's own epoch publishes the same coverage
    pruned = prune_covered(journal, session_id, entries[1].seq, epoch=2)
    # then: the entries it covers are gone, the rest kept
    assert pruned is True
    assert [row.seq for row in db.journal_after(session_id, 0, using=fleet_db)] == [entries[2].seq]
