"""What one instance trusts of another, against real `runbrain` processes on one PostgreSQL and a
shared archive: a lease belongs to one process (a paused process whose name re-joined writes
nothing, and its successor holds a new epoch), a signed request works only on the fleet's own
paths and carries only its signed headers, a request captured before a restart is refused after
it, and a fleet that could never forward (an `https` cluster.url, the example's secret) does not
start."""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest
import yaml

from fleet_app.signing import receiver_identity, sign_request
from tests.admin.support import OPERATOR, AdminClient, create_superuser
from tests.fixtures.server import ROOT, BrainServer, create_session, history, send, send_ok, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import SECRET, fleet_factory

LEASE_SECONDS = 3
BOUND_SECONDS = 30.0  # bounded waits, never asserted on
SPOOFED_CLIENT = "203.0.113.9"
EXAMPLE_SECRETS = ROOT / "deploy" / "kubernetes" / "secrets.example.yaml"


@pytest.fixture
def archive_dir(tmp_path: Path) -> Path:
    path = tmp_path / "archive"
    path.mkdir()
    return path


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, archive_dir: Path
) -> Callable[..., BrainServer]:
    return fleet_factory(
        brain_factory,
        postgres_server,
        archive_dir,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_trust",
        persistence={"provider": "filesystem", "directory": str(archive_dir)},
    )


def _until(predicate: Callable[[], bool], what: str) -> None:
    began = time.monotonic()
    while time.monotonic() - began < BOUND_SECONDS:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {BOUND_SECONDS} s")


def _query(server: BrainServer, sql: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(server.env["BRAIN_DATABASE_URL"], autocommit=True) as connection:
        return list(connection.execute(sql, params).fetchall())


def _incarnation(server: BrainServer, name: str) -> str:
    rows = _query(server, "SELECT incarnation FROM fleet_app_instance WHERE name = %s", name)
    assert len(rows) == 1, rows
    return str(rows[0][0])


def _signed(
    server: BrainServer,
    name: str,
    method: str,
    target: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    unsigned: list[tuple[str, str]] | None = None,
) -> httpx.Request:
    """A request to instance `name` at `server`, signed with the fleet secret as brain-b would
    sign a forwarded one (its receiver: that name's live process); `unsigned` go first."""
    signed = {"accept": "application/json", "brain-fleet-client": SPOOFED_CLIENT, **(headers or {})}
    signature = sign_request(
        SECRET.encode(),
        sender="brain-b",
        target_instance=receiver_identity(name, _incarnation(server, name)),
        method=method,
        target=target.encode(),
        body=body,
        headers=signed,
        now=time.time(),
        nonce=secrets.token_hex(16),
    )
    return httpx.Request(
        method,
        server.url + target,
        headers=[*(unsigned or []), *signed.items(), *signature.items()],
        content=body,
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


def _texts(server: BrainServer, session_id: str) -> list[str]:
    return [event["data"]["text"] for event in history(server, session_id) if event["type"] == "user.message"]


def test_a_paused_process_whose_name_rejoined_writes_nothing_and_its_successor_holds_a_new_epoch(
    fleet: Callable[..., BrainServer], archive_dir: Path
) -> None:
    # given a session of brain-a's first process, uploaded under epoch 1
    old = fleet("brain-a")
    session = create_session(old)
    sid = session["id"]
    send_ok(old, sid, "before the pause")
    wait_for_status(old, sid, "idle")
    assert _flush(old, sid)["pending"] is False
    log = old.data_dir / "sessions" / sid / "events.jsonl"
    old_log = log.read_bytes()
    assert old.process is not None
    # when that process is paused past its lease and a new process joins under its name
    old.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(LEASE_SECONDS + 1)
        new = fleet("brain-a")
        send_ok(new, sid, "on the new process")
        wait_for_status(new, sid, "idle")
        # then the new process holds the session at a new epoch, and publishes under it
        lease = _query(new, "SELECT owner, incarnation, epoch FROM fleet_app_sessionlease WHERE session_id = %s", sid)
        assert lease == [("brain-a", _incarnation(new, "brain-a"), 2)]
        checkpoint = _flush(new, sid)["checkpoint"]
        assert (_latest(archive_dir, sid)["epoch"], _latest(archive_dir, sid)["checkpoint"]) == (2, checkpoint)
    finally:
        old.process.send_signal(signal.SIGCONT)
    # when the old process runs again, and a client's send reaches it
    _until(lambda: "sessions taken by another instance" in old.logs(), "the old process sees its sessions taken")
    answer = send(old, sid, "through the old process")
    # then the send is the new process's (forwarded), the old one wrote nothing and serves nothing
    assert answer.status_code == 202, answer.text
    wait_for_status(new, sid, "idle")
    assert _texts(new, sid) == ["before the pause", "on the new process", "through the old process"]
    assert log.read_bytes() == old_log
    with httpx.Client(base_url=old.url, timeout=10) as client:
        assert client.get("/health/ready").status_code == 503
    checkpoint = _flush(new, sid)["checkpoint"]
    assert (_latest(archive_dir, sid)["epoch"], _latest(archive_dir, sid)["checkpoint"]) == (2, checkpoint)
    lease = _query(new, "SELECT owner, incarnation, epoch FROM fleet_app_sessionlease WHERE session_id = %s", sid)
    assert lease == [("brain-a", _incarnation(new, "brain-a"), 2)]


def test_a_process_restarted_after_a_crash_serves_its_own_unuploaded_copy(fleet: Callable[..., BrainServer]) -> None:
    # given a session of brain-a with a turn it never uploaded (its sync interval is an hour)
    a = fleet("brain-a", interval_seconds=3600)
    sid = create_session(a)["id"]
    send_ok(a, sid, "uploaded")
    wait_for_status(a, sid, "idle")
    assert _flush(a, sid)["pending"] is False
    send_ok(a, sid, "not uploaded")
    wait_for_status(a, sid, "idle")
    # when the process is killed and a new one starts under the name on the same data directory
    a.kill()
    a.start()
    # then the new process takes the lease at a new epoch, and its directory's copy serves: the
    # finished turn is there, nothing reported lost
    wait_for_status(a, sid, "idle")
    lease = _query(a, "SELECT owner, incarnation, epoch FROM fleet_app_sessionlease WHERE session_id = %s", sid)
    assert lease == [("brain-a", _incarnation(a, "brain-a"), 2)]
    events = history(a, sid)
    assert _texts(a, sid) == ["uploaded", "not uploaded"]
    assert [event["type"] for event in events].count("session.error") == 0


def test_a_signed_admin_login_is_refused_and_feeds_no_login_throttle(fleet: Callable[..., BrainServer]) -> None:
    # given an operator, and a request signed correctly with the fleet secret (it is served)
    a = fleet("brain-a")
    create_superuser(a)
    sid = create_session(a)["id"]
    authorization = {"authorization": f"Bearer {a.token()}"}
    with httpx.Client(timeout=10) as client:
        assert client.send(_signed(a, "brain-a", "GET", f"/sessions/{sid}", headers=authorization)).status_code == 200
        # when six signed admin logins with a wrong password arrive from a spoofed address
        token = secrets.token_hex(16)  # a CSRF cookie and form token of the attacker's choosing
        form = f"csrfmiddlewaretoken={token}&username={OPERATOR}&password=wrong".encode()
        statuses = [
            client.send(
                _signed(
                    a,
                    "brain-a",
                    "POST",
                    "/admin/login/",
                    body=form,
                    headers={"content-type": "application/x-www-form-urlencoded"},
                    unsigned=[("cookie", f"csrftoken={token}")],
                )
            ).status_code
            for _ in range(6)
        ]
    # then each is refused before the admin sees it, and the operator still logs in
    assert statuses == [401] * 6
    with AdminClient(a) as admin:
        admin.login()


def test_an_unsigned_header_on_a_signed_request_is_not_seen_by_the_owner(fleet: Callable[..., BrainServer]) -> None:
    # given a signed request for a page of events, with an unsigned Accept asking for a stream
    # ahead of the signed one (the signature checks the signed value)
    a = fleet("brain-a")
    sid = create_session(a)["id"]
    send_ok(a, sid, "hello")
    wait_for_status(a, sid, "idle")
    request = _signed(
        a,
        "brain-a",
        "GET",
        f"/sessions/{sid}/events",
        headers={"authorization": f"Bearer {a.token()}"},
        unsigned=[("accept", "text/event-stream"), ("x-unsigned", "1")],
    )
    # when
    with httpx.Client(timeout=10) as client:
        response = client.send(request, stream=True)
        try:
            content_type = response.headers.get("content-type", "")
            body = response.read() if content_type == "application/json" else b""
        finally:
            response.close()
    # then the owner answered the signed Accept: a JSON page, not a stream
    assert (response.status_code, content_type) == (200, "application/json")
    assert [event["type"] for event in orjson.loads(body)["events"]][:1] == ["user.message"]


def test_a_signed_request_captured_before_a_restart_is_refused_after_it(fleet: Callable[..., BrainServer]) -> None:
    # given a signed send, delivered once (and so captured by whoever watched the network)
    a = fleet("brain-a")
    sid = create_session(a)["id"]
    body = orjson.dumps({"type": "user.message", "text": "captured"})
    headers = {"authorization": f"Bearer {a.token()}", "content-type": "application/json"}
    captured = _signed(a, "brain-a", "POST", f"/sessions/{sid}/events", body=body, headers=headers)
    with httpx.Client(timeout=10) as client:
        assert client.send(captured).status_code == 202
    wait_for_status(a, sid, "idle")
    # when brain-a restarts (its replay memory gone) and the capture is sent again in its window
    a.restart()
    with httpx.Client(timeout=10) as client:
        replayed = client.send(httpx.Request("POST", captured.url, headers=captured.headers, content=body))
    # then it is refused, and the message is in the session once
    assert replayed.status_code == 401, replayed.text
    assert _texts(a, sid) == ["captured"]


def _refused_start(server: BrainServer) -> str:
    with pytest.raises(RuntimeError) as refused:
        server.start()
    return str(refused.value)


@pytest.fixture
def unstarted(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, archive_dir: Path
) -> Callable[..., BrainServer]:
    """A fleet instance configured, not started: its cluster block and secret as given."""
    database = postgres_server.create_database(f"brain_trust_{secrets.token_hex(4)}")

    def instance(*, url: str | None = None, secret: str = SECRET) -> BrainServer:
        server = brain_factory(start=False, persistence={"provider": "filesystem", "directory": str(archive_dir)})
        server.config["cluster"] = {"instance": "brain-a", "url": url or server.url, "shared_directory": True}
        server.env |= {"BRAIN_DATABASE_URL": database, "BRAIN_FLEET_SECRET": secret}
        return server

    return instance


def test_an_https_cluster_url_is_refused_at_startup_with_one_line(unstarted: Callable[..., BrainServer]) -> None:
    # given
    server = unstarted(url="https://brain-a.fleet.internal:8443")
    # when
    refused = _refused_start(server)
    # then
    assert "cluster.url: must be an http:// URL: instances forward requests to each other over plain HTTP" in refused


def test_the_example_fleet_secret_is_refused_at_startup_with_one_line(unstarted: Callable[..., BrainServer]) -> None:
    # given the placeholder of the Kubernetes example, left as it is
    example = next(yaml.safe_load_all(EXAMPLE_SECRETS.read_text()))["stringData"]["BRAIN_FLEET_SECRET"]
    server = unstarted(secret=example)
    # when
    refused = _refused_start(server)
    # then
    assert "cluster: BRAIN_FLEET_SECRET is a placeholder (it contains 'replace'): set it to random bytes" in refused
    assert example not in refused
