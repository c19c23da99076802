"""The input journal across two real `runbrain` instances (one PostgreSQL, a shared filesystem
archive): inputs A acknowledged after its last upload survive its kill -9. The ones that never
started run exactly once on B; the one whose turn had started is reported lost and the session
is interrupted; an idempotency key sent to A replays to the same event on B."""

from __future__ import annotations

from collections.abc import Callable

from tests.fixtures.server import BrainServer, create_session, history, send, send_ok, wait_for_status
from tests.fleet.test_fleet_failover import FAILOVER_BOUND_SECONDS, _flush, _serves, fleet

__all__ = ["fleet"]


def test_inputs_acknowledged_on_a_killed_owner_run_once_or_are_reported_lost(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a session of A uploaded idle, then a slow turn started and two inputs queued behind it
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    session_id = session["id"]
    send_ok(a, session_id, "hello")
    wait_for_status(a, session_id, "idle")
    _flush(a, session_id)
    slow = send_ok(a, session_id, "sleep:60")
    one = send_ok(a, session_id, "one", key="key-one")
    two = send_ok(a, session_id, "two")
    # when A dies before any of them is uploaded
    a.kill()
    served, seconds = _serves(b, session_id, within=FAILOVER_BOUND_SECONDS)
    print(f"failover with a journal backlog: {seconds:.2f} s")
    # then the started turn is reported lost and the session is interrupted
    assert served["status"] == "interrupted"
    events = history(b, session_id)
    errors = [event for event in events if event["type"] == "session.error"]
    assert [(error["input_id"], error["data"]["code"]) for error in errors] == [(slow["id"], "conflict")]
    assert errors[0]["data"]["message"] == f"turn lost with the instance that ran it: input {slow['id']}"
    inputs = [(event["id"], event["data"]["text"]) for event in events if event["type"] == "user.message"]
    assert inputs[1:] == [(slow["id"], "sleep:60"), (one["id"], "one"), (two["id"], "two")]
    # when the session is resumed on B, the queued inputs run, each exactly once
    with b.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").status_code == 200
    wait_for_status(b, session_id, "idle")
    events = history(b, session_id)
    runs = [
        event["input_id"]
        for event in events
        if event["type"] == "session.status" and event["data"]["status"] == "running"
    ]
    assert runs[1:] == [one["id"], two["id"]]  # after "hello": one and two once each, slow never on B
    assert [event["data"]["text"] for event in events if event["type"] == "user.message"] == [
        "hello",
        "sleep:60",
        "one",
        "two",
    ]
    # and the key sent to A replays on B to the same event, running nothing
    replay = send(b, session_id, "one", key="key-one")
    assert replay.status_code == 202, replay.text
    assert replay.json()["id"] == one["id"]
    assert history(b, session_id) == events


def _journal_rows(server: BrainServer, session_id: str) -> int:
    import psycopg

    with psycopg.connect(server.env["BRAIN_DATABASE_URL"]) as connection:
        row = connection.execute(
            "SELECT count(*) FROM fleet_app_journalentry WHERE session_id = %s", (session_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_journal_forgets_the_inputs_an_archived_checkpoint_covers(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: two settled inputs, journaled on their way in
    a = fleet("brain-a")
    session_id = create_session(a)["id"]
    send_ok(a, session_id, "first")
    wait_for_status(a, session_id, "idle")
    send_ok(a, session_id, "second")
    wait_for_status(a, session_id, "idle")
    assert _journal_rows(a, session_id) == 2
    # when: the archive gets a checkpoint covering both
    _flush(a, session_id)
    # then: the journal keeps nothing the archive already holds
    assert _journal_rows(a, session_id) == 0
