"""Every write to a session is fenced by its lease, not only sends: two real `runbrain` instances
on one real PostgreSQL and a shared filesystem archive. An owner paused past its lease (SIGSTOP,
then SIGCONT) forwards the writes it receives to its successor and makes none on its own copy;
while it cannot renew its lease (its heartbeat refused by the database) it answers every write
(interrupt, close, resume, an approval's decision, restore, send) 503 and changes nothing."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures.server import BrainServer, create_session, history, send, send_ok, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 3
BOUND_SECONDS = 30.0  # bounded waits, never asserted on
INTERRUPT_REQUESTED = {"status": "interrupt_requested"}
CLOSE_REQUESTED = {"status": "close_requested"}
APPROVAL_ID = "0" * 32


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    return fleet_factory(
        brain_factory, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_write_fence"
    )


def _until(predicate: Callable[[], bool], what: str) -> None:
    began = time.monotonic()
    while time.monotonic() - began < BOUND_SECONDS:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {BOUND_SECONDS} s")


def _served(server: BrainServer, session_id: str) -> dict[str, Any]:
    """The session once `server` serves it (retryable 503s while a lapsing lease is elsewhere)."""
    served: dict[str, Any] = {}

    def answered() -> bool:
        with server.client() as client:
            response = client.get(f"/sessions/{session_id}")
        assert response.status_code in (200, 503), response.text
        served.update(response.json() if response.status_code == 200 else {})
        return response.status_code == 200

    _until(answered, "served")
    return served


def _flush(server: BrainServer, session_id: str) -> str:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/flush")
    assert response.status_code == 200, response.text
    return str(response.json()["checkpoint"])


def _database(server: BrainServer) -> str:
    return server.env["BRAIN_DATABASE_URL"]


def _lease(server: BrainServer, session_id: str) -> tuple[str, int, bool]:
    """(owner, epoch, expired) of the session's lease row, on the database's clock."""
    with psycopg.connect(_database(server)) as connection:
        row = connection.execute(
            "SELECT owner, epoch, expires_at <= now() FROM fleet_app_sessionlease WHERE session_id = %s",
            (session_id,),
        ).fetchone()
    assert row is not None
    return str(row[0]), int(row[1]), bool(row[2])


def _row_status(server: BrainServer, session_id: str) -> str:
    with psycopg.connect(_database(server)) as connection:
        row = connection.execute("SELECT status FROM sessions_app_session WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture
def paused() -> Iterator[list[BrainServer]]:
    """Servers a test stopped with SIGSTOP: continued at the end whatever happened."""
    stopped: list[BrainServer] = []
    yield stopped
    for server in stopped:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)


def _pause(server: BrainServer, paused: list[BrainServer]) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    paused.append(server)


def _resume(server: BrainServer) -> None:
    assert server.process is not None
    server.process.send_signal(signal.SIGCONT)


def _log_bytes(server: BrainServer, session_id: str) -> bytes:
    return (server.data_dir / "sessions" / session_id / "events.jsonl").read_bytes()


def _writes(server: BrainServer, session_id: str, checkpoint: str) -> list[tuple[int, Any]]:
    """Interrupt, close, resume, an approval's decision, restore and send, sent to `server`."""
    answers = []
    with server.client() as client:
        for method, path, body in (
            ("POST", "events", {"type": "user.interrupt"}),
            ("POST", "close", None),
            ("POST", "resume", None),
            ("POST", f"approvals/{APPROVAL_ID}", {"decision": "approve"}),
            ("POST", "restore", {"checkpoint": checkpoint}),
            ("POST", "events", {"type": "user.message", "text": "through a"}),
        ):
            response = client.request(method, f"/sessions/{session_id}/{path}", json=body)
            answers.append((response.status_code, response.json()))
    return answers


def test_a_paused_former_owner_forwards_writes_to_its_successor_and_makes_none_itself(
    fleet: Callable[[str], BrainServer], paused: list[BrainServer]
) -> None:
    # given a session of A, uploaded idle
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    _flush(a, sid)
    before = _log_bytes(a, sid)
    # when A is paused past its lease, B takes the session and runs a slow turn, and A continues
    _pause(a, paused)
    assert _served(b, sid)["status"] == "idle"
    slow = send_ok(b, sid, "sleep:60")
    wait_for_status(b, sid, "running")
    _resume(a)
    # then an interrupt and a close sent to A are forwarded to B, the owner, and carried out there
    with a.client() as client:
        interrupt = client.post(f"/sessions/{sid}/events", json={"type": "user.interrupt"})
        assert (interrupt.status_code, interrupt.json()) == (202, INTERRUPT_REQUESTED)
        wait_for_status(b, sid, "interrupted")
        close = client.post(f"/sessions/{sid}/close")
        assert (close.status_code, close.json()) == (202, CLOSE_REQUESTED)
    wait_for_status(b, sid, "closed")
    events = history(b, sid)
    assert [(event["type"], event.get("input_id"), event["data"]) for event in events[-3:]] == [
        ("session.error", slow["id"], {"code": "conflict", "message": "turn interrupted"}),
        ("session.status", slow["id"], {"status": "interrupted"}),
        ("session.status", None, {"status": "closed"}),
    ]
    assert _lease(b, sid)[:2] == ("brain-b", 2)
    # and A's own copy is as it was when it was paused: it wrote nothing
    _until(lambda: "sessions taken by another instance" in a.logs(), "A learns the session was taken")
    assert _log_bytes(a, sid) == before
    _until(lambda: _row_status(b, sid) == "closed", "B's close in the row")


_REFUSE_HEARTBEAT = """
CREATE OR REPLACE FUNCTION brain_test_refuse_heartbeat() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'heartbeat refused for %', OLD.name;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER brain_test_refuse_heartbeat BEFORE UPDATE ON fleet_app_instance
FOR EACH ROW WHEN (OLD.name = 'brain-a') EXECUTE FUNCTION brain_test_refuse_heartbeat();
"""
_ALLOW_HEARTBEAT = "DROP TRIGGER brain_test_refuse_heartbeat ON fleet_app_instance"


def test_an_owner_that_cannot_renew_its_lease_refuses_every_write_and_changes_nothing(
    fleet: Callable[[str], BrainServer], paused: list[BrainServer]
) -> None:
    # given a session of A, uploaded idle, then a slow turn running on A
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    checkpoint = _flush(a, sid)
    slow = send_ok(a, sid, "sleep:60")
    wait_for_status(a, sid, "running")
    # when A is paused past its lease, and continues while the database refuses its heartbeat
    # (its renewals fail: a cut-off or overloaded database), nobody else having taken the session
    _pause(a, paused)
    with psycopg.connect(_database(a), autocommit=True) as connection:
        connection.execute(_REFUSE_HEARTBEAT)
    try:
        _until(lambda: _lease(a, sid)[2], "A's lease expires")
        _resume(a)
        before = _log_bytes(a, sid)
        answers = _writes(a, sid, checkpoint)
        with a.client() as client:
            seen = client.get(f"/sessions/{sid}")
        # then every write is refused, retryable, and A's copy is untouched; reads still answer
        assert [(status, body.get("error", {}).get("code", body)) for status, body in answers] == [
            (503, "unavailable")
        ] * 6
        assert answers[0][1]["error"]["message"] == "this instance's lease on the session is lapsing; retry"
        assert _log_bytes(a, sid) == before
        assert (seen.status_code, seen.json()["status"]) == (200, "running")
        assert _lease(a, sid) == ("brain-a", 1, True)
        # when B is asked for the session meanwhile, it takes it from the archive
        taken = _served(b, sid)
    finally:
        with psycopg.connect(_database(a), autocommit=True) as connection:
            connection.execute(_ALLOW_HEARTBEAT)
    # then B serves A's uploaded state, the turn A ran reported lost: nothing A was asked did
    # anything, and once A can renew again it learns the session moved and drops it
    assert taken["status"] == "interrupted"
    _until(lambda: "sessions taken by another instance" in a.logs(), "A learns the session was taken")
    assert _lease(b, sid)[:2] == ("brain-b", 2)
    events = history(b, sid)
    assert [event["data"]["text"] for event in events if event["type"] == "user.message"] == ["hello", "sleep:60"]
    assert [event["input_id"] for event in events if event["type"] == "session.error"] == [slow["id"]]
    assert not [event for event in events if event["type"] == "session.status" and event["data"]["status"] == "closed"]
    # and the same writes sent to A now reach B, which carries them out
    resumed = send(a, sid, "after the move")
    assert resumed.status_code == 409, resumed.text  # forwarded: B's session waits for a resume
    with a.client() as client:
        assert client.post(f"/sessions/{sid}/resume").status_code == 200
    wait_for_status(b, sid, "idle")


def test_a_restore_by_a_later_owner_is_written_under_its_lease_and_kept(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a session of A with two uploaded checkpoints, then taken by B (epoch 2) after A stopped
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    send_ok(a, sid, "one")
    wait_for_status(a, sid, "idle")
    first = _flush(a, sid)
    send_ok(a, sid, "two")
    wait_for_status(a, sid, "idle")
    _flush(a, sid)
    assert a.stop(signal.SIGTERM) == 0
    assert _served(b, sid)["status"] == "idle"
    assert _lease(b, sid)[:2] == ("brain-b", 2)
    # when B restores the first checkpoint
    with b.client() as client:
        restored = client.post(f"/sessions/{sid}/restore", json={"checkpoint": first})
    # then the session is that checkpoint's, on B, under the same lease: the archive's latest
    # does not replace it when it loads
    assert restored.status_code == 200, restored.text
    assert restored.json()["status"] == "interrupted"
    texts = [event["data"]["text"] for event in history(b, sid) if event["type"] == "user.message"]
    assert texts == ["one"]
    assert _lease(b, sid)[:2] == ("brain-b", 2)
    with b.client() as client:
        assert client.post(f"/sessions/{sid}/resume").status_code == 200
    send_ok(b, sid, "three")
    wait_for_status(b, sid, "idle")
    texts = [event["data"]["text"] for event in history(b, sid) if event["type"] == "user.message"]
    assert texts == ["one", "three"]
