"""The input journal across two real `runbrain` instances (one PostgreSQL, a shared filesystem
archive): inputs A acknowledged after its last upload survive its kill -9. The ones that never
started run exactly once on B; the one whose turn had started is reported lost and the session
is interrupted; an idempotency key sent to A replays to the same event on B. Inputs an interrupt
cancelled on A are reported cancelled on B, never run."""

from __future__ import annotations

import time
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


def _journal_states(server: BrainServer, session_id: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(server.env["BRAIN_DATABASE_URL"]) as connection:
        rows = connection.execute(
            "SELECT input_id, state FROM fleet_app_journalentry WHERE session_id = %s ORDER BY seq", (session_id,)
        ).fetchall()
    return [(str(input_id), str(state)) for input_id, state in rows]


def test_inputs_an_interrupt_cancelled_on_a_killed_owner_are_reported_cancelled_never_run(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a session of A uploaded idle, a slow turn running and two inputs queued behind it
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = create_session(a)["id"]
    hello = send_ok(a, session_id, "hello")
    wait_for_status(a, session_id, "idle")
    _flush(a, session_id)
    slow = send_ok(a, session_id, "sleep:60")
    one = send_ok(a, session_id, "one")
    two = send_ok(a, session_id, "two")
    wait_for_status(a, session_id, "running")
    # when an interrupt cancels the queued inputs on A, and A dies before uploading that
    with a.client() as client:
        assert client.post(f"/sessions/{session_id}/events", json={"type": "user.interrupt"}).status_code == 202
    wait_for_status(a, session_id, "interrupted")
    expected = [(slow["id"], "started"), (one["id"], "cancelled"), (two["id"], "cancelled")]
    began = time.monotonic()
    while _journal_states(a, session_id) != expected and time.monotonic() - began < 30:
        time.sleep(0.05)
    assert _journal_states(a, session_id) == expected
    a.kill()
    served, _ = _serves(b, session_id, within=FAILOVER_BOUND_SECONDS)
    # then on B the started turn is reported lost and the two inputs cancelled, as A had said
    assert served["status"] == "interrupted"
    events = history(b, session_id)
    errors = [(event["input_id"], event["data"]["message"]) for event in events if event["type"] == "session.error"]
    assert errors == [
        (slow["id"], f"turn lost with the instance that ran it: input {slow['id']}"),
        (one["id"], "queued input interrupted before execution"),
        (two["id"], "queued input interrupted before execution"),
    ]
    # and after a resume nothing runs: the cancelled inputs never do
    with b.client() as client:
        assert client.post(f"/sessions/{session_id}/resume").status_code == 200
    wait_for_status(b, session_id, "idle")
    runs = [
        event["input_id"]
        for event in history(b, session_id)
        if event["type"] == "session.status" and event["data"]["status"] == "running"
    ]
    assert runs == [hello["id"]]  # the slow turn's start died with A's unuploaded events
