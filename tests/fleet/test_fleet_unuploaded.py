"""A session whose owner dies before its first upload moves anyway: real `runbrain` instances on
one real PostgreSQL and a real S3 API server (moto). The archive holds nothing of the session,
so the next owner builds it as it was created from its row in the fleet's database and takes
every input the journal holds: those never started run once, started ones are reported lost.
A load that keeps failing leaves the lease's epoch where it is, however often it is retried."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.fixtures.server import BrainServer, create_session, history, open_stream, send, send_ok, wait_for_status
from tests.fixtures.services import MotoS3, PostgresServer
from tests.fleet.support import fleet_factory
from tests.fleet.test_fleet_failover import FAILOVER_BOUND_SECONDS, LEASE_SECONDS, _serves

KEY_ENV, SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
NEVER_SECONDS = 3600  # a sync interval that uploads only on flush (and at startup)
BOUND_SECONDS = 30.0  # bounded waits, never asserted on


class Fleet:
    """Fleet instances by name on one database and one S3 bucket, tokens shared."""

    def __init__(
        self, brain_factory: Callable[..., BrainServer], postgres: PostgresServer, moto: MotoS3, tmp_path: Path
    ) -> None:
        self.bucket = moto.create_bucket(f"brain-unuploaded-{secrets.token_hex(4)}")
        self.moto = moto
        persistence = {
            "provider": "s3",
            "bucket": self.bucket,
            "endpoint": moto.endpoint,
            "region": moto.region,
            "access_key_env": KEY_ENV,
            "secret_key_env": SECRET_ENV,
            "interval_seconds": NEVER_SECONDS,
        }
        self._instance = fleet_factory(
            brain_factory,
            postgres,
            tmp_path,
            lease_seconds=LEASE_SECONDS,
            database_prefix="brain_unuploaded",
            persistence=persistence,
            environment={KEY_ENV: moto.access_key, SECRET_ENV: moto.secret_key},
        )
        self._first: BrainServer | None = None

    def __call__(self, name: str) -> BrainServer:
        server = self._instance(name)
        self._first = self._first or server
        return server

    @property
    def database(self) -> str:
        assert self._first is not None, "no instance started yet"
        return self._first.env["BRAIN_DATABASE_URL"]

    def latest(self, session_id: str) -> bytes | None:
        """The bytes of the session's `latest` in the bucket, None without one."""
        client = self.moto.client()
        try:
            return bytes(client.get_object(Bucket=self.bucket, Key=f"sessions/{session_id}/latest")["Body"].read())
        except client.exceptions.NoSuchKey:
            return None

    def put_latest(self, session_id: str, body: bytes) -> None:
        self.moto.client().put_object(Bucket=self.bucket, Key=f"sessions/{session_id}/latest", Body=body)

    def lease(self, session_id: str) -> tuple[str, int]:
        """(owner, epoch) of the session's lease row."""
        with psycopg.connect(self.database) as connection:
            row = connection.execute(
                "SELECT owner, epoch FROM fleet_app_sessionlease WHERE session_id = %s", (session_id,)
            ).fetchone()
        assert row is not None
        return str(row[0]), int(row[1])


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, moto_s3: MotoS3, tmp_path: Path
) -> Fleet:
    return Fleet(brain_factory, postgres_server, moto_s3, tmp_path)


def _flush(server: BrainServer, session_id: str) -> dict[str, Any]:
    with server.client() as client:
        response = client.post(f"/sessions/{session_id}/flush")
    assert response.status_code == 200, response.text
    body = response.json()
    assert isinstance(body, dict)
    return body


def _texts(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["id"], event["data"]["text"]) for event in events if event["type"] == "user.message"]


def _runs(events: list[dict[str, Any]]) -> list[str]:
    return [
        event["input_id"]
        for event in events
        if event["type"] == "session.status" and event["data"]["status"] == "running"
    ]


def test_a_session_whose_owner_dies_before_its_first_upload_moves_with_every_acknowledged_input(
    fleet: Fleet,
) -> None:
    # given a session created on A, a turn done, a slow one started and two inputs queued behind
    # it, none of it ever uploaded (A uploads only on flush)
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a, instructions="be brief")
    sid = session["id"]
    hello = send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    slow = send_ok(a, sid, "sleep:60")
    one = send_ok(a, sid, "one", key="key-one")
    two = send_ok(a, sid, "two")
    assert fleet.latest(sid) is None
    # when A dies
    a.kill()
    served, seconds = _serves(b, sid, within=FAILOVER_BOUND_SECONDS)
    print(f"failover of a never-uploaded session after kill -9: {seconds:.2f} s")
    # then B serves the same session as it was created, its started turns reported lost
    assert served["id"] == sid
    assert served["status"] == "interrupted"
    assert (served["harness"], served["config"], served["created_at"]) == (
        session["harness"],
        session["config"],
        session["created_at"],
    )
    assert fleet.lease(sid) == ("brain-b", 2)
    events = history(b, sid)
    assert _texts(events) == [(hello["id"], "hello"), (slow["id"], "sleep:60"), (one["id"], "one"), (two["id"], "two")]
    errors = [(event["input_id"], event["data"]) for event in events if event["type"] == "session.error"]
    lost = f"turn lost with the instance that ran it: input {hello['id']}, {slow['id']}"
    assert errors == [(hello["id"], {"code": "conflict", "message": lost})]
    assert _runs(events) == []
    # when a stream is open on B and the session is resumed there
    with open_stream(b, sid) as stream:
        with b.client() as client:
            assert client.post(f"/sessions/{sid}/resume").status_code == 200
        wait_for_status(b, sid, "idle")
        streamed = stream.wait_for_event("session.status", input_id=two["id"], status="idle")
    # then the inputs that never started run once each, on B, and the stream shows all of it
    events = history(b, sid)
    assert _runs(events) == [one["id"], two["id"]]
    assert [event["id"] for event in streamed if "cursor" in event] == [event["id"] for event in events]
    # and the key sent to A replays on B to the same event, running nothing
    replay = send(b, sid, "one", key="key-one")
    assert replay.status_code == 202, replay.text
    assert replay.json()["id"] == one["id"]
    assert history(b, sid) == events
    # and B's first upload puts the session in the archive under its epoch
    assert _flush(b, sid)["pending"] is False
    latest = fleet.latest(sid)
    assert latest is not None and orjson.loads(latest)["epoch"] == 2


def test_a_session_created_on_an_instance_that_died_at_once_is_served_idle_elsewhere(fleet: Fleet) -> None:
    # given a session A created and died with, nothing sent, nothing uploaded
    a, b = fleet("brain-a"), fleet("brain-b")
    session = create_session(a)
    sid = session["id"]
    a.kill()
    # when a client asks B for it
    served, _ = _serves(b, sid, within=FAILOVER_BOUND_SECONDS)
    # then it is there, idle, with nothing in its history, and takes input on B
    assert (served["id"], served["status"], served["config"]) == (sid, "idle", session["config"])
    assert history(b, sid) == []
    sent = send_ok(b, sid, "first on b")
    wait_for_status(b, sid, "idle")
    events = history(b, sid)
    assert _texts(events) == [(sent["id"], "first on b")]
    assert _runs(events) == [sent["id"]]
    assert [event["data"]["text"] for event in events if event["type"] == "assistant.message"] == ["echo: first on b"]


def _row_status(fleet: Fleet, session_id: str) -> str:
    with psycopg.connect(fleet.database) as connection:
        row = connection.execute("SELECT status FROM sessions_app_session WHERE id = %s", (session_id,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_closed_session_whose_owner_died_before_uploading_it_stays_closed(fleet: Fleet) -> None:
    # given a session A created, ran a turn on and closed, its row saying so, nothing uploaded
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    with a.client() as client:
        assert client.post(f"/sessions/{sid}/close").status_code == 202
    _until(lambda: _row_status(fleet, sid) == "closed", "the close is in the row")
    a.kill()
    # when B is asked for it
    served, _ = _serves(b, sid, within=FAILOVER_BOUND_SECONDS)
    # then it is closed there too: nothing reopens it, nothing runs
    assert served["status"] == "closed"
    refused = send(b, sid, "after close")
    assert refused.status_code == 409, refused.text
    events = history(b, sid)
    assert [(event["type"], event["data"]) for event in events] == [("session.status", {"status": "closed"})]


def _until(predicate: Callable[[], bool], what: str) -> None:
    began = time.monotonic()
    while time.monotonic() - began < BOUND_SECONDS:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {BOUND_SECONDS} s")


def test_a_load_that_keeps_failing_does_not_move_the_epoch_however_often_it_is_retried(fleet: Fleet) -> None:
    # given a session of A uploaded under epoch 1, whose archived latest is then unreadable
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    sid = create_session(a)["id"]
    send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    _flush(a, sid)
    good = fleet.latest(sid)
    assert good is not None
    fleet.put_latest(sid, b"not a checkpoint")
    a.kill()
    # when B is asked for it until its lease has been taken, and then again, through B and C
    answers: list[tuple[int, str]] = []

    def refused_on_b() -> bool:
        with b.client() as client:
            response = client.get(f"/sessions/{sid}")
        answers.append((response.status_code, response.json()["error"]["code"]))
        return response.status_code == 409

    _until(refused_on_b, "B tries to load the session")
    for server in (b, c, b, c, b):
        with server.client() as client:
            response = client.get(f"/sessions/{sid}")
        answers.append((response.status_code, response.json()["error"]["code"]))
    # then each answer is the retryable 503 while A's lease lives, then the load's 409; B keeps
    # the lease it took, at the epoch it took it with: the retries move nothing
    assert set(answers[:-6]) <= {(503, "unavailable")}
    assert answers[-6:] == [(409, "conflict")] * 6
    assert fleet.lease(sid) == ("brain-b", 2)
    # when the archive is readable again, the next request is served, still under epoch 2
    fleet.put_latest(sid, good)
    with c.client() as client:
        response = client.get(f"/sessions/{sid}")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "idle"
    assert fleet.lease(sid) == ("brain-b", 2)
    assert [event["data"]["text"] for event in history(c, sid) if event["type"] == "user.message"] == ["hello"]
