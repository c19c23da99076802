"""A delete with the archive on S3 (moto) and the PostgreSQL discovery index: `latest`, the
session's objects and its index entry go, so neither a server with an empty data dir (a cold
load, a failover) nor a restart brings it back."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_turn_end
from tests.fixtures.services import MotoS3, PostgresServer, RedisServer
from tests.persistence.test_sync_services import SyncWorker
from tests.support.client import delete_session

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

S3_KEY_ENV, S3_SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
INDEX_URL_ENV = "TEST_BRAIN_INDEX_URL"
QUEUE_WAIT_SECONDS = 30.0  # generous: a dispatch and a publish take well under a second here


def _server(brain_factory: Callable[..., BrainServer], moto: MotoS3, bucket: str, index_url: str) -> BrainServer:
    persistence = {
        "provider": "s3",
        "bucket": bucket,
        "endpoint": moto.endpoint,
        "region": moto.region,
        "access_key_env": S3_KEY_ENV,
        "secret_key_env": S3_SECRET_ENV,
        "interval_seconds": 1,
        "postgres_env": INDEX_URL_ENV,
    }
    server = brain_factory(start=False, persistence=persistence)
    server.env.update({S3_KEY_ENV: moto.access_key, S3_SECRET_ENV: moto.secret_key, INDEX_URL_ENV: index_url})
    server.start()
    return server


def _keys(moto: MotoS3, bucket: str, session_id: str) -> list[str]:
    listed = moto.client().list_objects_v2(Bucket=bucket, Prefix=f"sessions/{session_id}/")
    return [item["Key"] for item in listed.get("Contents", [])]


def _ids(server: BrainServer) -> set[str]:
    with server.client() as client:
        return {session["id"] for session in client.get("/sessions", params={"limit": 1000}).json()["sessions"]}


@pytest.fixture
def index_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"brain_index_{secrets.token_hex(4)}")


def test_a_deleted_session_leaves_nothing_in_the_archive_or_the_index_to_revive(
    brain_factory: Callable[..., BrainServer], moto_s3: MotoS3, index_url: str
) -> None:
    # given: a session published to S3 and indexed, and a second server sharing both
    bucket = moto_s3.create_bucket(f"delete-{secrets.token_hex(4)}")
    server = _server(brain_factory, moto_s3, bucket, index_url)
    other = _server(brain_factory, moto_s3, bucket, index_url)
    session = create_session(server)
    kept = create_session(server)
    accepted = send_ok(server, session["id"], "hello")
    wait_for_turn_end(server, session["id"], accepted["id"])
    server.sdk().flush(session["id"])
    server.sdk().flush(kept["id"])
    assert f"sessions/{session['id']}/latest" in _keys(moto_s3, bucket, session["id"])
    assert session["id"] in _ids(other)  # from the index

    # when
    delete_session(server.sdk(), session["id"])

    # then: its `latest` and every object of it are gone, the other session's stay
    assert _keys(moto_s3, bucket, session["id"]) == []
    assert f"sessions/{kept['id']}/latest" in _keys(moto_s3, bucket, kept["id"])
    # and: no server lists it or loads it from the archive
    assert session["id"] not in _ids(other)
    assert kept["id"] in _ids(other)
    with other.client() as client:
        answer: Any = client.get(f"/sessions/{session['id']}")
    assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    # and: a restart of the server that had it revives nothing, and publishes nothing
    server.restart()
    with server.client() as client:
        assert client.get(f"/sessions/{session['id']}").status_code == 404
    server.sdk().flush(kept["id"])
    assert _keys(moto_s3, bucket, session["id"]) == []
    assert session["id"] not in _ids(server)


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    url = redis_server.url.rsplit("/", 1)[0] + "/15"  # a database of its own, emptied first
    with redis.Redis.from_url(url) as connection:
        connection.flushdb()
    return url


def test_an_upload_job_queued_before_the_delete_writes_nothing_after_it(
    brain_factory: Callable[..., BrainServer], broker_url: str, tmp_path: Path
) -> None:
    # given: a settled session whose publish waits on the broker, with no sync worker yet
    archive = tmp_path / "archive"
    persistence = {"provider": "filesystem", "directory": str(archive), "interval_seconds": 1}
    server = brain_factory(start=False, persistence=persistence)
    server.env["BRAIN_CELERY_BROKER"] = broker_url
    server.start()
    session = create_session(server)
    accepted = send_ok(server, session["id"], "hello")
    wait_for_turn_end(server, session["id"], accepted["id"])
    with redis.Redis.from_url(broker_url) as connection:
        deadline = time.monotonic() + QUEUE_WAIT_SECONDS
        while connection.llen("celery") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        queued = connection.llen("celery")
    assert queued >= 1, "no publish job reached the broker"

    # when: the session is deleted, then a worker takes the queued jobs
    delete_session(server.sdk(), session["id"])
    worker = SyncWorker(server, tmp_path / "syncworker.log")
    worker.start()
    try:
        deadline = time.monotonic() + QUEUE_WAIT_SECONDS
        while worker.log().count("succeeded in") < queued and time.monotonic() < deadline:
            time.sleep(0.1)
        log = worker.log()
    finally:
        worker.stop()

    # then: every job ran and wrote nothing: no `latest`, no object, no sync row error
    assert log.count("succeeded in") == queued, log[-3000:]
    assert "\"outcome\": 'gone'" in log or "'outcome': 'gone'" in log, log[-3000:]
    assert not (archive / "sessions" / session["id"]).exists()
    with server.client() as client:
        assert client.get(f"/sessions/{session['id']}").status_code == 404
