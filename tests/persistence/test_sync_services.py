"""Background sync against real services: Celery sync workers on Redis (one killed in the middle
of an upload), an S3 outage that fills the dirty set, the PostgreSQL discovery index shared by
two servers, and cursors into a tail a restore dropped.

Every server here is a real `runbrain` process; workers are real `manage.py syncworker`
processes; S3, Redis and PostgreSQL are the loopback services of tests/fixtures/services.py.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from persistence_app.discovery import MAX_CONNECTIONS, DiscoveryIndex, TenantMismatch
from tests.fixtures.server import ROOT, BrainServer, create_session, history, send_ok, wait_for_turn_end
from tests.fixtures.services import MotoS3, PostgresServer, RedisServer
from tests.support.tcp_gate import TcpGate

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

SYNC_TIMEOUT_SECONDS = 60.0  # generous: a publish takes well under a second here
WORKER_START_SECONDS = 30.0
WORKER_STOP_SECONDS = 15.0
S3_KEY_ENV, S3_SECRET_ENV = "TEST_S3_ACCESS_KEY", "TEST_S3_SECRET_KEY"
INDEX_URL_ENV = "TEST_BRAIN_INDEX_URL"

_redis_databases = itertools.count(1)


def _wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until `predicate` returns something truthy; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _turn(server: BrainServer, session_id: str, text: str) -> list[dict[str, Any]]:
    accepted = send_ok(server, session_id, text)
    return wait_for_turn_end(server, session_id, accepted["id"])


def _events_size(server: BrainServer, session_id: str) -> int:
    return (server.data_dir / "sessions" / session_id / "events.jsonl").stat().st_size


def _sync(server: BrainServer, session_id: str) -> dict[str, Any]:
    with server.client() as client:
        response = client.get(f"/sessions/{session_id}/sync")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _wait_synced(server: BrainServer, session_id: str, timeout: float = SYNC_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The sync status once a checkpoint covers the whole local event log and nothing is pending."""

    last: dict[str, Any] = {}

    def synced() -> dict[str, Any] | None:
        last.update(_sync(server, session_id), local_bytes=_events_size(server, session_id))
        if last["pending"] or not last.get("checkpoint") or last["history_bytes"] != last["local_bytes"]:
            return None
        return _sync(server, session_id)

    try:
        return _wait(synced, timeout, f"session {session_id} to be published")  # type: ignore[no-any-return]
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last status {last}; server log:\n{server.logs()[-4000:]}") from None


def _filesystem(archive: Path, **extra: Any) -> dict[str, Any]:
    return {"provider": "filesystem", "directory": str(archive), "interval_seconds": 1, **extra}


def _s3(moto: MotoS3, bucket: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": "s3",
        "bucket": bucket,
        "endpoint": moto.endpoint,
        "region": moto.region,
        "access_key_env": S3_KEY_ENV,
        "secret_key_env": S3_SECRET_ENV,
        "interval_seconds": 1,
        **extra,
    }


def _s3_server(
    brain_factory: Callable[..., BrainServer], moto: MotoS3, persistence: dict[str, Any], **env: str
) -> BrainServer:
    server = brain_factory(start=False, persistence=persistence)
    server.env.update({S3_KEY_ENV: moto.access_key, S3_SECRET_ENV: moto.secret_key, **env})
    server.start()
    return server


def _s3_json(moto: MotoS3, bucket: str, key: str) -> dict[str, Any]:
    body = moto.client().get_object(Bucket=bucket, Key=key)["Body"]
    try:
        return json.loads(body.read())  # type: ignore[no-any-return]
    finally:
        body.close()


def _messages(events: list[dict[str, Any]]) -> list[str]:
    return [event["data"]["text"] for event in events if event["type"] == "user.message"]


# --- Celery sync workers -----------------------------------------------------------------------


class SyncWorker:
    """A `manage.py syncworker` process for one server: same environment, config and cwd."""

    def __init__(self, server: BrainServer, log_path: Path) -> None:
        self.server = server
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, concurrency: int = 2) -> None:
        command = [sys.executable, "manage.py", "syncworker", "--config", str(self.server.config_path)]
        command += ["--concurrency", str(concurrency)]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=self.server.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its pool children share its process group
            )
        _wait(self._ready, WORKER_START_SECONDS, f"the sync worker to start:\n{self.log()[-3000:]}")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"the sync worker exited ({self.process.returncode}):\n{self.log()[-3000:]}")
        return " ready." in self.log()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def children(self) -> list[int]:
        return [pid for pid in _pids() if _parent(pid) == self.pid]

    def stop(self) -> int | None:
        """SIGTERM (Celery's warm shutdown), then SIGKILL of the whole process group."""
        process, self.process = self.process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            return process.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # pool children left behind, if any


def _tasks(log: str, state: str) -> set[str]:
    """Ids of the publish tasks a worker log shows as `state` (received, succeeded)."""
    marker = "brain.sync.publish["
    return {
        line.split(marker, 1)[1].split("]", 1)[0]
        for line in log.splitlines()
        if marker in line and f"] {state}" in line
    }


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces


def _flock_holders(path: Path) -> set[int]:
    """Processes holding a flock on `path`, from /proc/locks."""
    inode = path.stat().st_ino
    holders = set()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            holders.add(int(fields[4]))
    return holders


def _tcp_table() -> list[tuple[int, int, int, str]]:
    """(local port, remote port, bytes received and unread, inode) of established IPv4 sockets."""
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01":  # ESTABLISHED
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            rows.append((local, remote, int(fields[4].split(":")[1], 16), fields[9]))
    return rows


def _sending_to(pid: int, port: int) -> bool:
    """True when `pid` has a connection to `port` whose request bytes wait, unread, at the
    server's end (the server is stopped in the middle of serving it)."""
    sockets = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = str(fd.readlink())
                if target.startswith("socket:["):
                    sockets.add(target[8:-1])
    table = _tcp_table()
    clients = {local for local, remote, _, inode in table if inode in sockets and remote == port}
    return any(local == port and remote in clients and unread > 0 for local, remote, unread, _ in table)


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    """A Redis database of its own for this test's broker, emptied first."""
    import redis

    url = redis_server.url.rsplit("/", 1)[0] + f"/{next(_redis_databases) % 16}"
    with redis.Redis.from_url(url) as connection:
        connection.flushdb()
    return url


@pytest.fixture
def sync_worker(tmp_path: Path) -> Iterator[Callable[[BrainServer], SyncWorker]]:
    """Start sync workers for servers; each is stopped at the end (SIGTERM, then SIGKILL)."""
    workers: list[SyncWorker] = []

    def start(server: BrainServer) -> SyncWorker:
        worker = SyncWorker(server, tmp_path / f"syncworker{len(workers)}.log")
        workers.append(worker)
        worker.start()
        return worker

    yield start
    for worker in workers:
        worker.stop()


def test_a_celery_worker_publishes_what_the_server_dispatches(
    brain_factory: Callable[..., BrainServer],
    sync_worker: Callable[[BrainServer], SyncWorker],
    broker_url: str,
    tmp_path: Path,
) -> None:
    # given: a server that dispatches through Redis, and a worker for it
    archive = tmp_path / "archive"
    server = brain_factory(start=False, persistence=_filesystem(archive))
    server.env["BRAIN_CELERY_BROKER"] = broker_url
    server.start()
    worker = sync_worker(server)
    # when
    session = create_session(server)
    _turn(server, session["id"], "first")
    status = _wait_synced(server, session["id"])
    # then: the worker published it, not the server
    assert len(status["checkpoint"]) == 32
    assert status.get("error") is None
    published = [line for line in worker.log().splitlines() if '"msg": "session published"' in line]
    assert any(session["id"] in line for line in published), worker.log()[-3000:]
    assert "session published" not in server.logs()
    latest = json.loads((archive / "sessions" / session["id"] / "latest").read_bytes())
    assert latest["checkpoint"] == status["checkpoint"]
    manifest = json.loads((archive / "sessions" / session["id"] / "checkpoints" / status["checkpoint"]).read_bytes())
    assert manifest["history_bytes"] == _events_size(server, session["id"])
    # and: the worker stops cleanly on SIGTERM
    assert worker.stop() == 0


def test_a_worker_killed_in_the_middle_of_an_upload_is_requeued_and_publishes(
    brain_factory: Callable[..., BrainServer],
    sync_worker: Callable[[BrainServer], SyncWorker],
    broker_url: str,
    moto_s3: MotoS3,
) -> None:
    # given: a published session of a Celery-mode server on S3
    bucket = moto_s3.create_bucket(f"brain-killed-{secrets.token_hex(4)}")
    server = _s3_server(brain_factory, moto_s3, _s3(moto_s3, bucket), BRAIN_CELERY_BROKER=broker_url)
    worker = sync_worker(server)
    session = create_session(server)
    _turn(server, session["id"], "before the kill")
    _wait_synced(server, session["id"])
    lock = server.data_dir / "sync-locks" / f"{session['id']}.publish"
    moto = moto_s3.process
    assert moto is not None
    # when: S3 hangs while the next publish uploads, and its pool child is killed
    log_mark = len(worker.log())
    moto.send_signal(signal.SIGSTOP)
    try:
        _turn(server, session["id"], "during the kill")

        def uploading_child() -> int | None:
            holders = [pid for pid in _flock_holders(lock) if pid in worker.children()] if lock.exists() else []
            return next((pid for pid in holders if _sending_to(pid, moto_s3.port)), None)

        child = _wait(uploading_child, 30, "a pool child in the middle of an upload to the stopped S3 server")
        in_flight = _tasks(worker.log()[log_mark:], "received") - _tasks(worker.log()[log_mark:], "succeeded")
        assert in_flight, worker.log()[log_mark:]
        os.kill(child, signal.SIGKILL)
        _wait(lambda: child not in worker.children(), 10, "the killed child to be reaped")
    finally:
        moto.send_signal(signal.SIGCONT)
    # then: the task comes back (acks_late, reject_on_worker_lost) and the session is published
    status = _wait_synced(server, session["id"])
    after = worker.log()[log_mark:]
    assert "WorkerLostError" in after, after
    assert in_flight <= _tasks(after, "succeeded"), after  # the killed child's task ran again
    latest = _s3_json(moto_s3, bucket, f"sessions/{session['id']}/latest")
    assert latest["checkpoint"] == status["checkpoint"]
    # and: a server with an empty data dir restores the reported checkpoint with its history
    expected = history(server, session["id"])
    worker.stop()
    server.stop()
    other = _s3_server(brain_factory, moto_s3, _s3(moto_s3, bucket))
    restored = other.sdk().restore(session["id"], status["checkpoint"])
    assert restored["status"] == "interrupted"
    assert history(other, session["id"])[: len(expected)] == expected
    assert _messages(expected) == ["before the kill", "during the kill"]


# --- an archive outage ---------------------------------------------------------------------------


@pytest.fixture
def s3_gate(moto_s3: MotoS3) -> Iterator[TcpGate]:
    """moto's S3 behind a forwarder the test can shut: an outage that keeps the bucket and its
    objects (a restarted moto would come back empty, and for a moment without the bucket)."""
    gate = TcpGate(moto_s3.port)
    gate.open()
    yield gate
    gate.close()


def test_an_archive_outage_fills_the_queue_then_drains_without_losing_anything(
    brain_factory: Callable[..., BrainServer], moto_s3: MotoS3, s3_gate: TcpGate
) -> None:
    # given: an in-process server on S3 whose dirty set holds 2 sessions, one session published
    bucket = moto_s3.create_bucket(f"brain-outage-{secrets.token_hex(4)}")
    server = _s3_server(brain_factory, moto_s3, _s3(moto_s3, bucket, queue=2, endpoint=s3_gate.url))
    body = {"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}}
    first = create_session(server)
    _turn(server, first["id"], "before the outage")
    before = _wait_synced(server, first["id"])
    with server.client() as client:
        # when: S3 is unreachable while a session runs a turn and another one is created
        with s3_gate.shut():
            _turn(server, first["id"], "during the outage")
            second = create_session(server)
            # then: the dirty set is full: writes are 429, readiness is 503, reads still work
            created = client.post("/sessions", json=body)
            assert created.status_code == 429, created.text
            assert created.json()["error"]["code"] == "overloaded"
            assert created.headers["Retry-After"] == "1"
            sent = client.post(f"/sessions/{first['id']}/events", json={"type": "user.message", "text": "more"})
            assert sent.status_code == 429, sent.text
            assert sent.json()["error"]["code"] == "overloaded"
            assert sent.headers["Retry-After"] == "1"
            ready = httpx.get(server.url + "/health/ready", timeout=10)
            assert ready.status_code == 503
            assert ready.json() == {"status": "not_ready"}
            assert client.get(f"/sessions/{second['id']}").status_code == 200
            assert _messages(history(server, first["id"])) == ["before the outage", "during the outage"]
            listed = {session["id"] for session in client.get("/sessions").json()["sessions"]}
            assert {first["id"], second["id"]} <= listed
            during = _sync(server, first["id"])
            assert during["pending"] is True
            assert during["checkpoint"] == before["checkpoint"]  # the last one that made it
            outage_ended = time.monotonic()
        # and when S3 is reachable again, the backlog drains
        _wait(
            lambda: httpx.get(server.url + "/health/ready", timeout=10).status_code == 200,
            SYNC_TIMEOUT_SECONDS,
            "readiness after the outage",
        )
        ready_after = time.monotonic() - outage_ended
        for session in (first, second):
            _wait_synced(server, session["id"])
        drained_after = time.monotonic() - outage_ended
        # then: writes are accepted again
        _turn(server, first["id"], "after the outage")
        third = client.post("/sessions", json=body)
        assert third.status_code == 201, third.text
    # and: every session is published in full
    for session_id in (first["id"], second["id"], third.json()["id"]):
        status = _wait_synced(server, session_id)
        assert status.get("error") is None, status
        latest = _s3_json(moto_s3, bucket, f"sessions/{session_id}/latest")
        assert latest["checkpoint"] == status["checkpoint"]
        manifest = _s3_json(moto_s3, bucket, f"sessions/{session_id}/checkpoints/{latest['checkpoint']}")
        assert manifest["history_bytes"] == _events_size(server, session_id)
    # and: nothing was lost: a server with an empty data dir restores the whole conversation
    expected = history(server, first["id"])
    server.stop()
    other = _s3_server(brain_factory, moto_s3, _s3(moto_s3, bucket, endpoint=s3_gate.url))
    restored = other.sdk().get(first["id"])  # a cold load of `latest`
    assert restored["status"] == "interrupted"
    assert history(other, first["id"])[: len(expected)] == expected
    assert _messages(expected) == ["before the outage", "during the outage", "after the outage"]
    print(f"S3 back: ready after {ready_after:.1f}s, backlog drained after {drained_after:.1f}s")


# --- the PostgreSQL discovery index ---------------------------------------------------------------


@pytest.fixture
def index_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"brain_index_{secrets.token_hex(4)}")


def _index_server(brain_factory: Callable[..., BrainServer], archive: Path, url: str, **extra: Any) -> BrainServer:
    server = brain_factory(start=False, persistence=_filesystem(archive, postgres_env=INDEX_URL_ENV, **extra))
    server.env[INDEX_URL_ENV] = url
    server.start()
    return server


def _listed(server: BrainServer, name: str = "alice") -> list[dict[str, Any]]:
    with server.client(name) as client:
        response = client.get("/sessions", params={"limit": 1000})
    assert response.status_code == 200, response.text
    return response.json()["sessions"]  # type: ignore[no-any-return]


def test_the_discovery_index_shows_other_servers_sessions_to_their_tenant_only(
    brain_factory: Callable[..., BrainServer], index_url: str, tmp_path: Path
) -> None:
    # given: two servers with their own data dirs, one archive and one index
    archive = tmp_path / "archive"
    a = _index_server(brain_factory, archive, index_url)
    b = _index_server(brain_factory, archive, index_url + "?application_name=brain-b")
    remote = create_session(a)
    _turn(a, remote["id"], "on a")
    a.sdk().flush(remote["id"])
    local = create_session(b)
    b.sdk().flush(local["id"])
    # when / then: B lists A's session from the index, and its own once
    listed = _listed(b)
    ids = [session["id"] for session in listed]
    assert sorted(ids) == sorted({remote["id"], local["id"]})
    assert next(s for s in listed if s["id"] == remote["id"])["status"] != "interrupted"  # A's, from the index
    # and: a GET cold-loads it; from then on B's local row wins
    loaded = b.sdk().get(remote["id"])
    assert loaded["status"] == "interrupted"
    listed = _listed(b)
    assert [session["id"] for session in listed].count(remote["id"]) == 1
    assert next(s for s in listed if s["id"] == remote["id"])["status"] == "interrupted"
    assert _messages(history(b, remote["id"])) == ["on a"]
    # and: another tenant neither lists nor gets it, on either server
    for server in (a, b):
        assert {s["id"] for s in _listed(server, "charlie")}.isdisjoint({remote["id"], local["id"]})
    with b.client("charlie") as charlie:
        assert charlie.get(f"/sessions/{remote['id']}").status_code == 404
        assert charlie.get(f"/sessions/{local['id']}").status_code == 404
    fresh = create_session(a)
    with b.client("charlie") as charlie:  # not indexed yet, and not charlie's once it is
        assert charlie.get(f"/sessions/{fresh['id']}").status_code == 404


def test_an_id_indexed_under_another_tenant_is_refused(
    brain_factory: Callable[..., BrainServer], index_url: str, tmp_path: Path
) -> None:
    # given: a local session whose id the index already holds for another tenant (no background
    # sync within the test: only the flush publishes)
    server = _index_server(brain_factory, tmp_path / "archive", index_url, interval_seconds=3600)
    session = create_session(server)
    index = DiscoveryIndex(index_url)
    try:
        foreign = {**session, "tenant": "globex"}
        index.put(foreign, "f" * 32)
        with pytest.raises(TenantMismatch):
            index.put({**session, "tenant": "acme"}, "a" * 32)
        # when
        with server.client() as client:
            flushed = client.post(f"/sessions/{session['id']}/flush")
        # then: the flush fails, the sync status says why, and the index still names globex
        assert flushed.status_code == 403, flushed.text
        assert flushed.json()["error"]["code"] == "forbidden"
        assert "metadata tenant mismatch" in flushed.json()["error"]["message"]
        status = _sync(server, session["id"])
        assert "tenant mismatch" in status.get("error", ""), status
        assert index.owner(session["id"]) == "globex"
        assert index.get("acme", session["id"]) is None
    finally:
        index.close()


def test_a_process_never_opens_more_than_four_index_connections(index_url: str) -> None:
    application = f"brain-test-{secrets.token_hex(4)}"
    index = DiscoveryIndex(f"{index_url}?application_name={application}")
    peak, stop = 0, threading.Event()
    failures: list[BaseException] = []

    def watch() -> None:
        nonlocal peak
        with psycopg.connect(index_url, autocommit=True) as connection:
            while not stop.is_set():
                row = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
                ).fetchone()
                peak = max(peak, int(row[0]) if row else 0)
                time.sleep(0.002)

    def hammer(worker: int) -> None:
        try:
            for round_ in range(40):
                session = {"id": f"{worker:02d}{round_:030d}", "tenant": "acme", "status": "idle"}
                index.put(session, "c" * 32)
                index.list("acme", after="", limit=100)
                index.get("acme", session["id"])
        except BaseException as exc:  # reported below
            failures.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        threads = [threading.Thread(target=hammer, args=(worker,)) for worker in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        stop.set()
        watcher.join(timeout=10)
        index.close()
    assert failures == []
    assert len(DiscoveryIndex(index_url).list("acme", after="", limit=1000)) == 16 * 40
    assert 1 <= peak <= MAX_CONNECTIONS, peak
    print(f"16 threads on one DiscoveryIndex: at most {peak} connections seen")


# --- cursors and restores -------------------------------------------------------------------------


def test_a_cursor_into_a_tail_a_restore_dropped_is_unavailable(
    brain_factory: Callable[..., BrainServer], tmp_path: Path
) -> None:
    # given: a checkpoint, then a turn after it
    server = brain_factory(persistence=_filesystem(tmp_path / "archive"))
    session = create_session(server)
    _turn(server, session["id"], "kept")
    flushed = server.sdk().flush(session["id"])
    kept = history(server, session["id"])
    _turn(server, session["id"], "dropped")
    dropped = history(server, session["id"])[len(kept) :]
    assert dropped
    with server.client() as client:
        path = f"/sessions/{session['id']}/events"
        assert client.get(path, params={"after": dropped[0]["cursor"]}).status_code == 200
        # when
        server.sdk().restore(session["id"], flushed["checkpoint"])
        # then: cursors into the dropped tail are 409, cursors into the kept history still work
        for event in (dropped[0], dropped[-1]):
            response = client.get(path, params={"after": event["cursor"]})
            assert response.status_code == 409, response.text
            assert response.json()["error"]["code"] == "cursor_unavailable"
        page = client.get(path, params={"after": kept[-1]["cursor"]})
        assert page.status_code == 200, page.text
        assert "dropped" not in _messages(page.json()["events"])
