"""DELETE /sessions/{id} in a fleet (real `runbrain` instances on one PostgreSQL and a shared
filesystem archive): a delete through an instance that does not own the session reaches its
owner, which removes it; no instance serves it afterwards, and its lease is gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from brain import BrainError

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_turn_end
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory
from tests.support.client import delete_session

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

LEASE_SECONDS = 10  # nobody dies here: a long lease keeps renewals out of the way


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    return fleet_factory(
        brain_factory, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_delete"
    )


def _lease_rows(server: BrainServer, session_id: str) -> int:
    url = server.env["BRAIN_DATABASE_URL"]
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM fleet_app_sessionlease WHERE session_id = %s", (session_id,))
        return int(row.fetchone()[0])  # type: ignore[index]


def test_a_delete_through_another_instance_reaches_the_owner_and_leaves_nothing_anywhere(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a session A owns, with a turn done and published
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    accepted = send_ok(a, session["id"], "hello")
    wait_for_turn_end(a, session["id"], accepted["id"])
    a.sdk().flush(session["id"])
    assert _lease_rows(a, session["id"]) == 1

    # when: deleted through B, which does not own it
    delete_session(b.sdk(), session["id"])

    # then: the owner removed it, and neither instance serves it
    assert not (a.data_dir / "sessions" / session["id"]).exists()
    assert not (b.data_dir / "sessions" / session["id"]).exists()
    for server in (a, b):
        with pytest.raises(BrainError) as caught:
            server.sdk().get(session["id"])
        assert (caught.value.status, caught.value.code) == (404, "not_found")
    # and: its lease is released (gone), and a second delete through either is 404
    assert _lease_rows(a, session["id"]) == 0
    for server in (b, a):
        with pytest.raises(BrainError) as caught:
            delete_session(server.sdk(), session["id"])
        assert (caught.value.status, caught.value.code) == (404, "not_found")
    assert not (b.data_dir / "sessions" / session["id"]).exists()
