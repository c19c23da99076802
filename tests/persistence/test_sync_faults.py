"""Background sync when the archive or the index misbehaves, against real `runbrain` processes:
what clients are told of a store failure (never an endpoint, bucket, host, port or user), a
permanent failure retried once its cause is fixed, a hung archive that gives the publisher back
at its deadline, and the startup scan published at once on a freshly booted machine."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, free_port, send_ok, wait_for_turn_end
from tests.fixtures.services import MotoS3, PostgresServer

S3_KEY_ENV, S3_SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
INDEX_URL_ENV = "TEST_BRAIN_INDEX_URL"
WAIT_SECONDS = 60.0  # bounded waits; every one here ends within a few seconds on the fixed code


def _wait(predicate: Callable[[], Any], what: str, timeout: float = WAIT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def _sync(server: BrainServer, session_id: str) -> dict[str, Any]:
    with server.client() as client:
        response = client.get(f"/sessions/{session_id}/sync")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _s3_server(brain_factory: Callable[..., BrainServer], moto: MotoS3, **persistence: Any) -> BrainServer:
    settings = {
        "provider": "s3",
        "endpoint": moto.endpoint,
        "region": moto.region,
        "access_key_env": S3_KEY_ENV,
        "secret_key_env": S3_SECRET_ENV,
        "interval_seconds": 1,
        **persistence,
    }
    server = brain_factory(start=False, persistence=settings)
    server.env.update({S3_KEY_ENV: moto.access_key, S3_SECRET_ENV: moto.secret_key})
    server.start()
    return server


def _log_records(server: BrainServer, message: str) -> list[dict[str, Any]]:
    records = []
    for line in server.logs().splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("msg") == message:
                records.append(record)
    return records


def _assert_tells_nothing(text: str, *secrets_: str) -> None:
    for secret in secrets_:
        assert secret not in text, f"{secret!r} reached a client: {text!r}"


def test_a_missing_bucket_is_retried_on_schedule_and_publishes_once_it_exists(
    brain_factory: Callable[..., BrainServer], moto_s3: MotoS3
) -> None:
    # given: a server whose bucket does not exist yet, retrying permanent failures after 1 s
    bucket = f"brain-missing-{secrets.token_hex(4)}"
    server = _s3_server(brain_factory, moto_s3, bucket=bucket, retry_seconds=1)
    session = create_session(server)
    # when: its publish fails on the missing bucket
    failed = _wait(lambda: (status := _sync(server, session["id"])).get("error") and status, "the failure")
    with server.client() as client:
        flushed = client.post(f"/sessions/{session['id']}/flush")
    # then: clients learn why in words that name neither bucket nor endpoint; the log has both
    assert failed["error"] == "the archive's bucket does not exist"
    assert failed.get("checkpoint") is None
    assert flushed.status_code == 500
    assert flushed.json()["error"] == {
        "code": "brain_error",
        "message": "flush failed: the archive's bucket does not exist",
    } | {key: value for key, value in flushed.json()["error"].items() if key not in ("code", "message")}
    for text in (json.dumps(failed), flushed.text):
        _assert_tells_nothing(text, bucket, str(moto_s3.port), "127.0.0.1")
    logged = _log_records(server, "sync failed")
    assert any(bucket in record["error"] and "NoSuchBucket" in record["error"] for record in logged), logged
    # and when the bucket is created, with no change to the session
    moto_s3.create_bucket(bucket)
    status = _wait(lambda: (status := _sync(server, session["id"])).get("checkpoint") and status, "the retry")
    # then: the retry published it
    assert status.get("error") is None
    assert status["pending"] is False
    latest = json.loads(
        moto_s3.client().get_object(Bucket=bucket, Key=f"sessions/{session['id']}/latest")["Body"].read()
    )
    assert latest["checkpoint"] == status["checkpoint"]
    assert any(
        record["session_id"] == session["id"] for record in _log_records(server, "sync retry of a failed session")
    )


def test_an_unreachable_archive_is_reported_without_its_address(brain_factory: Callable[..., BrainServer]) -> None:
    # given: an S3 endpoint on a loopback port nobody listens on
    port = free_port()
    server = brain_factory(
        start=False,
        persistence={
            "provider": "s3",
            "bucket": "brain-secret-bucket",
            "endpoint": f"http://127.0.0.1:{port}",
            "region": "us-east-1",
            "access_key_env": S3_KEY_ENV,
            "secret_key_env": S3_SECRET_ENV,
            "interval_seconds": 1,
        },
    )
    server.env.update({S3_KEY_ENV: "AKIAEXAMPLEUSER", S3_SECRET_ENV: "secret"})
    server.start()
    session = create_session(server)
    # when: the publish gives up after its retries
    failed = _wait(lambda: (status := _sync(server, session["id"])).get("error") and status, "the failure")
    # then
    assert failed["error"] == "the archive cannot be reached"
    _assert_tells_nothing(json.dumps(failed), "brain-secret-bucket", str(port), "127.0.0.1", "AKIAEXAMPLEUSER")
    logged = [record["error"] for record in _log_records(server, "sync failed")]
    assert any(f"127.0.0.1:{port}" in error and "brain-secret-bucket" in error for error in logged), logged


def test_an_unreachable_discovery_index_is_reported_without_host_port_or_user(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> None:
    # given: a discovery index URL naming a role the database does not have
    user = "brain_intruder"
    url = f"postgres://{user}@127.0.0.1:{postgres_server.port}/brain_missing_db"
    server = brain_factory(
        start=False,
        persistence={
            "provider": "filesystem",
            "directory": str(tmp_path / "archive"),
            "interval_seconds": 1,
            "postgres_env": INDEX_URL_ENV,
        },
    )
    server.env[INDEX_URL_ENV] = url
    server.start()
    session = create_session(server)
    # when: a publish cannot write the index, and a cold load cannot read it
    failed = _wait(lambda: (status := _sync(server, session["id"])).get("error") and status, "the failure")
    with server.client() as client:
        unknown = client.get(f"/sessions/{secrets.token_hex(16)}")
    # then: generic reasons only
    assert failed["error"] == "the discovery index is unavailable"
    assert unknown.status_code == 500
    assert unknown.json()["error"]["message"] == "the archive cannot be read: the discovery index is unavailable"
    for text in (json.dumps(failed), unknown.text):
        _assert_tells_nothing(text, user, str(postgres_server.port), "127.0.0.1", "brain_missing_db")
    # and: the log has the full detail (psycopg's connection error, then why each attempt failed)
    assert _log_records(server, "sync failed")[0]["error"].startswith("discovery index write failed: ")
    assert f'port {postgres_server.port} failed: FATAL:  role \\"{user}\\" does not exist' in server.logs()


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A loopback TCP server that accepts connections and never answers; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()


def test_a_hung_archive_gives_the_publisher_back_at_the_deadline(brain_factory: Callable[..., BrainServer]) -> None:
    with _silent_server() as port:
        # given: an S3 endpoint that accepts and never replies, and a 3 s publish deadline
        server = brain_factory(
            start=False,
            persistence={
                "provider": "s3",
                "bucket": "brain-hung",
                "endpoint": f"http://127.0.0.1:{port}",
                "region": "us-east-1",
                "access_key_env": S3_KEY_ENV,
                "secret_key_env": S3_SECRET_ENV,
                "interval_seconds": 1,
                "publish_timeout_seconds": 3,
            },
        )
        server.env.update({S3_KEY_ENV: "key", S3_SECRET_ENV: "secret"})
        server.start()
        # when: a session is published in the background, then flushed
        started = time.monotonic()
        session = create_session(server)
        failed = _wait(lambda: (status := _sync(server, session["id"])).get("error") and status, "the failure")
        background = time.monotonic() - started
        started = time.monotonic()
        with server.client() as client:
            flushed = client.post(f"/sessions/{session['id']}/flush", timeout=120)
        flush_seconds = time.monotonic() - started
        # then: both gave up with a generic reason instead of holding their thread for minutes
        assert failed["error"] == "the archive did not answer in time"
        assert flushed.status_code == 500
        assert flushed.json()["error"]["message"] == "flush failed: the archive did not answer in time"
        assert any("deadline" in record["error"] for record in _log_records(server, "sync failed"))
        # and: the server still serves
        with server.client() as client:
            assert client.get(f"/sessions/{session['id']}").status_code == 200
    print(f"hung archive: background publish failed after {background:.1f}s, flush answered after {flush_seconds:.1f}s")


def _fresh_boot_launcher() -> list[str]:
    """`unshare` running runbrain in a time namespace whose monotonic clock starts near zero,
    as on a machine booted a few seconds ago, however long this one has been up."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("util-linux `unshare` is not installed: this test runs runbrain in a time namespace")
    uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
    launcher = [unshare, "--time", f"--monotonic=-{max(0, uptime - 5)}", "--fork", "--kill-child=SIGTERM"]
    probe = subprocess.run([*launcher, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.fail(
            f"time namespaces (`unshare --time`) are not available here: {probe.stderr.decode(errors='replace')}"
        )
    return launcher


def test_the_startup_scan_publishes_at_once_on_a_freshly_booted_machine(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: background sync an hour apart, a session with a turn, and a kill before any upload
    archive = tmp_path / "archive"
    server = brain_factory(persistence={"provider": "filesystem", "directory": str(archive), "interval_seconds": 3600})
    session = create_session(server)
    wait_for_turn_end(server, session["id"], send_ok(server, session["id"], "not uploaded yet")["id"])
    server.kill()
    latest = archive / "sessions" / session["id"] / "latest"
    assert not latest.exists()
    # when: it comes back on a machine whose monotonic clock is seconds old
    server.launcher = _fresh_boot_launcher()
    server.start()
    # then: the session the scan found is published without waiting an interval
    _wait(latest.exists, "the startup scan's publish")
    status = _sync(server, session["id"])
    assert status["pending"] is False
    assert status["history_bytes"] == (server.data_dir / "sessions" / session["id"] / "events.jsonl").stat().st_size
    assert json.loads(latest.read_bytes())["checkpoint"] == status["checkpoint"]
