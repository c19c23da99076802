"""A paused owner's writes are refused: two real `runbrain` instances on one real PostgreSQL and
a shared filesystem archive. A is stopped (SIGSTOP) past its lease, B takes the session over
and publishes, A continues (SIGCONT): whatever A publishes after that is refused, and the
archive's `latest` never goes back to A's epoch."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 3
BOUND_SECONDS = 30.0  # bounded waits, never asserted on


@pytest.fixture
def archive_dir(tmp_path: Path) -> Path:
    path = tmp_path / "archive"
    path.mkdir()
    return path


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, archive_dir: Path
) -> Callable[..., BrainServer]:
    """Fleet instances by name on one database and one archive; `interval_seconds` is the sync
    interval (an instance with a long one publishes only at its startup scan and on flush)."""
    return fleet_factory(
        brain_factory,
        postgres_server,
        archive_dir,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_fence",
        persistence={"provider": "filesystem", "directory": str(archive_dir)},
    )


def _latest(archive_dir: Path, session_id: str) -> dict[str, Any]:
    value = orjson.loads((archive_dir / "sessions" / session_id / "latest").read_bytes())
    assert isinstance(value, dict)
    return value


def _flush(server: BrainServer, session_id: str) -> dict[str, Any]:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/flush")
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body, dict)
    return body


def _until(predicate: Callable[[], bool], what: str) -> None:
    began = time.monotonic()
    while time.monotonic() - began < BOUND_SECONDS:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {BOUND_SECONDS} s")


def _serve(server: BrainServer, session_id: str) -> None:
    def served() -> bool:
        with server.client() as client:
            answer = client.get(f"/sessions/{session_id}")
        assert answer.status_code in (200, 503), answer.text
        return answer.status_code == 200

    _until(served, "served")


def test_a_paused_owner_never_moves_latest_back(fleet: Callable[..., BrainServer], archive_dir: Path) -> None:
    # given a session of A, uploaded under epoch 1, then a turn A has not uploaded (A's sync
    # interval is an hour: it publishes at startup and on flush only)
    a = fleet("brain-a", interval_seconds=3600)
    b = fleet("brain-b")
    session = create_session(a)
    sid = session["id"]
    send_ok(a, sid, "uploaded on a")
    wait_for_status(a, sid, "idle")
    assert _flush(a, sid)["pending"] is False
    assert _latest(archive_dir, sid)["epoch"] == 1
    send_ok(a, sid, "not uploaded on a")
    wait_for_status(a, sid, "idle")
    # when A is paused past its lease, B takes the session and publishes under epoch 2
    assert a.process is not None
    a.process.send_signal(signal.SIGSTOP)
    try:
        # past the lease (a request forwarded to a paused owner would wait for its read timeout)
        time.sleep(LEASE_SECONDS + 1)
        _serve(b, sid)
        with b.client() as client:  # the turn A did not upload is reported lost: resume first
            if client.get(f"/sessions/{sid}").json()["status"] == "interrupted":
                assert client.post(f"/sessions/{sid}/resume").status_code == 200
        wait_for_status(b, sid, "idle")
        send_ok(b, sid, "on b")
        wait_for_status(b, sid, "idle")
        checkpoint_b = _flush(b, sid)["checkpoint"]
        pointer_b = _latest(archive_dir, sid)
        assert pointer_b["epoch"] == 2
        assert pointer_b["checkpoint"] == checkpoint_b
    finally:
        a.process.send_signal(signal.SIGCONT)
    # then A, running again, learns it lost the lease and writes nothing
    _until(lambda: "sessions taken by another instance" in a.logs(), "A sees the session taken")
    assert _latest(archive_dir, sid) == pointer_b
    # when A restarts with its unuploaded copy: the startup scan publishes it at once
    a.kill()
    a.start()
    _until(lambda: "publish refused: no lease held" in a.logs(), "A's publish refused")
    # then the refusal is permanent, and latest is still B's, epoch 2
    assert _latest(archive_dir, sid) == pointer_b
    with b.client() as client:
        status = client.get(f"/sessions/{sid}/sync").json()
    assert status["checkpoint"] == checkpoint_b
