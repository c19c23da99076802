"""Two real `runbrain` instances on one real PostgreSQL and a shared filesystem archive: a
session created on A is served by B once A dies (kill -9) or stops (SIGTERM), and an instance
back after its session was taken never serves its stale copy. Requests go straight to the
instance under test (forwarding to the owner is another layer's)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.server import BrainServer, create_session, history, send_ok, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 3
FAILOVER_BOUND_SECONDS = LEASE_SECONDS + 5  # the promise: the next request succeeds within this


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    """A factory of fleet instances by name, sharing the database, the archive and the tokens."""
    return fleet_factory(
        brain_factory, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_fleet"
    )


def _flush(server: BrainServer, session_id: str) -> None:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/flush")
    assert response.status_code == 200, response.text


def _serves(server: BrainServer, session_id: str, *, within: float) -> tuple[dict[str, Any], float]:
    """The session as `server` first serves it, and how long that took (bounded wait)."""
    began = time.monotonic()
    last: httpx.Response | None = None
    with server.client() as client:
        while time.monotonic() - began < within:
            last = client.get(f"/sessions/{session_id}")
            if last.status_code == 200:
                return last.json(), time.monotonic() - began
            assert last.status_code == 503, last.text  # retryable while the lease is elsewhere
            assert last.headers["retry-after"] == "1"
            assert last.json()["error"]["code"] == "unavailable"
            time.sleep(0.1)
    raise AssertionError(f"not served within {within} s: {last.text if last else None}")


def test_a_session_moves_to_another_instance_when_its_owner_is_killed(fleet: Callable[[str], BrainServer]) -> None:
    # given a session created on A, one turn done and uploaded
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    first = send_ok(a, session["id"], "hello")
    wait_for_status(a, session["id"], "idle")
    _flush(a, session["id"])
    # when A dies
    a.kill()
    served, seconds = _serves(b, session["id"], within=FAILOVER_BOUND_SECONDS)
    print(f"failover after kill -9: {seconds:.2f} s")
    # then B serves it, idle, with A's turn, and runs a new one
    assert served["status"] == "idle"
    second = send_ok(b, session["id"], "again")
    wait_for_status(b, session["id"], "idle")
    inputs = [event["data"]["text"] for event in history(b, session["id"]) if event["type"] == "user.message"]
    assert inputs == ["hello", "again"]
    assert first["id"] != second["id"]


def test_a_graceful_stop_hands_the_session_over_at_once(fleet: Callable[[str], BrainServer]) -> None:
    # given
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    send_ok(a, session["id"], "hello")
    wait_for_status(a, session["id"], "idle")
    # when A stops gracefully (it uploads, then releases the lease)
    assert a.stop(signal.SIGTERM) == 0
    served, seconds = _serves(b, session["id"], within=FAILOVER_BOUND_SECONDS)
    print(f"handoff after SIGTERM: {seconds:.2f} s")
    # then B serves the uploaded state: the turn is there, the session idle
    assert served["status"] == "idle"
    inputs = [event["data"]["text"] for event in history(b, session["id"]) if event["type"] == "user.message"]
    assert inputs == ["hello"]


def test_an_instance_back_after_its_session_was_taken_drops_its_stale_copy(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a session of A that B took after A died, and then ran a turn on
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    send_ok(a, session["id"], "on a")
    wait_for_status(a, session["id"], "idle")
    _flush(a, session["id"])
    a.kill()
    _serves(b, session["id"], within=FAILOVER_BOUND_SECONDS)
    send_ok(b, session["id"], "on b")
    wait_for_status(b, session["id"], "idle")
    # when A comes back while B owns the session
    a.start()
    with a.client() as client:
        answer = client.get(f"/sessions/{session['id']}")
    # then A does not load its stale copy: it refuses (retryable) or forwards to the owner, B
    assert answer.status_code in (200, 503), answer.text
    if answer.status_code == 503:
        assert answer.json()["error"]["code"] == "unavailable"
    assert not [path for path in (a.data_dir / "sessions").iterdir() if path.name.startswith(f"{session['id']}-")]
    # when B hands the session back by stopping gracefully
    assert b.stop(signal.SIGTERM) == 0
    served, _ = _serves(a, session["id"], within=FAILOVER_BOUND_SECONDS)
    # then A serves B's state, its old copy kept aside, not deleted
    assert served["status"] == "idle"
    inputs = [event["data"]["text"] for event in history(a, session["id"]) if event["type"] == "user.message"]
    assert inputs == ["on a", "on b"]
    kept = [path.name for path in (a.data_dir / "sessions").iterdir() if path.name.startswith(f"{session['id']}-")]
    assert len(kept) == 1
