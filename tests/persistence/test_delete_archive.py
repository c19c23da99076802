"""A delete with the archive on S3 (moto) and the PostgreSQL discovery index: `latest`, the
session's objects and its index entry go, so neither a server with an empty data dir (a cold
load, a failover) nor a restart brings it back."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_turn_end
from tests.fixtures.services import MotoS3, PostgresServer
from tests.support.client import delete_session

S3_KEY_ENV, S3_SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
INDEX_URL_ENV = "TEST_BRAIN_INDEX_URL"


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
