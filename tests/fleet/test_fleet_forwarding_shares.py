"""Per-tenant shares of the forwarding path on real `runbrain` instances on one real PostgreSQL:
one tenant's streams through A cannot take the connections other tenants' forwarded requests
need, and a flood of bad tokens for sessions A does not own costs no owner lookups while
another tenant's sends through A keep answering."""

from __future__ import annotations

import secrets
import socket
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson
import pytest

from tests.fixtures.server import BrainServer, create_session, wait_for_status
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 10  # nobody dies here: a long lease keeps renewals out of the way
SHARE = 256  # limits.tenant_forwarded_streams, its default
STREAMS = SHARE + 4  # past the share, and past the 256 connections every forward once shared
OWNER_STREAMS = 128  # limits.subscribers, its default: SSE streams one instance serves at once
HEAD_TIMEOUT_SECONDS = 15.0  # the client's patience for an answer's head
FLOOD = 300  # requests with bad tokens, each for a session nobody owns
FLOOD_THREADS = 16
SENDS = 10


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    return fleet_factory(
        brain_factory,
        postgres_server,
        tmp_path,
        lease_seconds=LEASE_SECONDS,
        database_prefix="brain_shares",
        database_settings={"log_statement": "all"},  # the owner lookups are counted in its log
    )


def _open_stream(server: BrainServer, session_id: str, token: str) -> tuple[socket.socket, int, bytes]:
    """A raw SSE request: the socket (left open), the answer's status, and its head and any body
    that came with it."""
    host, port = server.config["listen"].split(":")
    sock = socket.create_connection((host, int(port)), timeout=HEAD_TIMEOUT_SECONDS)
    request = (
        f"GET /sessions/{session_id}/events HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n"
        f"authorization: Bearer {token}\r\n\r\n"
    )
    sock.sendall(request.encode())
    received = b""
    while b"\r\n\r\n" not in received:
        piece = sock.recv(65536)
        if not piece:
            break
        received += piece
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else 0
    head, _, body = received.partition(b"\r\n\r\n")
    chunked = b"transfer-encoding: chunked" in head.lower()
    length = next((int(line[16:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length: ")), 0)
    # an error's envelope follows its head, with a length or chunked
    while status != 200 and (not body.endswith(b"0\r\n\r\n") if chunked else len(body) < length):
        piece = sock.recv(65536)
        if not piece:
            break
        body += piece
    return sock, status, head + b"\r\n\r\n" + body


def _client(server: BrainServer) -> httpx.Client:
    """Alice's client with the patience of HEAD_TIMEOUT_SECONDS."""
    headers = {"Authorization": f"Bearer {server.token()}"}
    return httpx.Client(base_url=server.url, headers=headers, timeout=HEAD_TIMEOUT_SECONDS)


def _envelope(received: bytes) -> dict[str, object]:
    head, _, body = received.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    parsed: dict[str, object] = orjson.loads(body)
    return parsed


@pytest.mark.timeout(300)  # two instances started and 260 streams opened, on 2 busy cores
def test_one_tenants_streams_past_its_share_are_429_and_another_tenants_requests_through_the_same_instance_are_served(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a session of charlie's on B and one on C (each owner serves OWNER_STREAMS streams),
    # and one of alice's on B; requests land on A
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    charlie = [create_session(owner, "charlie")["id"] for owner in (b, c)]
    alice_session = create_session(b)["id"]
    sockets: list[socket.socket] = []
    try:
        # when: charlie opens more event streams through A than its share
        statuses: list[int] = []
        refusals: list[bytes] = []
        began = time.perf_counter()
        for index in range(STREAMS):
            sock, status, received = _open_stream(a, charlie[index % 2], a.token("charlie"))
            sockets.append(sock)
            statuses.append(status)
            if status != 200:
                refusals.append(received)
        opened_seconds = time.perf_counter() - began
        # and alice reads her session through A meanwhile
        with _client(a) as client:
            began = time.perf_counter()
            read = client.get(f"/sessions/{alice_session}")
            read_ms = (time.perf_counter() - began) * 1000
        print(f"\n{STREAMS} streams opened in {opened_seconds:.1f} s; alice's read through A: {read_ms:.1f} ms")
        # then: charlie's first SHARE streams are open (all the owners serve), the rest refused
        # on A with 429 naming the limit
        assert SHARE == 2 * OWNER_STREAMS
        assert statuses == [200] * SHARE + [429] * (STREAMS - SHARE)
        for received in refusals:
            head = received.partition(b"\r\n\r\n")[0].lower()
            assert b"\r\nretry-after: 1" in head
            error = _envelope(received)["error"]
            assert isinstance(error, dict) and error["code"] == "overloaded"
            assert "limits.tenant_forwarded_streams" in str(error["message"])
        # and alice's plain GET through A is served
        assert (read.status_code, read.json()["id"]) == (200, alice_session)
    finally:
        for sock in sockets:
            sock.close()


def _owner_lookups(postgres_server: PostgresServer, session_ids: set[str]) -> int:
    """Statements the database ran that name one of `session_ids` (log_statement = all logs each
    statement's text, an owner lookup's session id on a line of its own)."""
    lines = postgres_server.log_path.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if any(sid in line for sid in session_ids))


@pytest.mark.timeout(300)  # two instances started, then a flood, on 2 busy cores
def test_a_flood_of_bad_tokens_on_a_non_owner_costs_no_owner_lookup_and_another_tenants_sends_answer(
    fleet: Callable[[str], BrainServer], postgres_server: PostgresServer
) -> None:
    # given: alice's session owned by B, her sends landing on A
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = create_session(b)["id"]
    with a.client() as client:
        assert (
            client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": "w"}).status_code == 202
        )
    wait_for_status(b, session_id, "idle")
    flooded = {secrets.token_hex(16) for _ in range(FLOOD)}
    statuses: list[int] = []
    codes: set[str] = set()
    lock = threading.Lock()

    def flood(index_and_id: tuple[int, str]) -> None:
        index, sid = index_and_id
        # no token, another scheme, or a bearer token nobody was given
        header = [
            {},
            {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
            {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"},
        ][index % 3]
        response = httpx.get(f"{a.url}/sessions/{sid}", headers=header, timeout=HEAD_TIMEOUT_SECONDS)
        with lock:
            statuses.append(response.status_code)
            codes.add(response.json()["error"]["code"])

    # when: the flood runs on A while alice sends through A
    latencies: list[float] = []
    sent: list[int] = []
    with ThreadPoolExecutor(FLOOD_THREADS) as pool:
        flooding = pool.map(flood, enumerate(sorted(flooded)))
        with _client(a) as client:
            for index in range(SENDS):
                began = time.perf_counter()
                response = client.post(
                    f"/sessions/{session_id}/events", json={"type": "user.message", "text": f"during {index}"}
                )
                latencies.append(time.perf_counter() - began)
                sent.append(response.status_code)
        list(flooding)
    print(
        f"\nalice's sends through A during the flood: median {statistics.median(latencies) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms"
    )
    # then: every bad token got the owner's 401, every send was accepted
    assert (statuses, codes) == ([401] * FLOOD, {"forbidden"})
    assert sent == [202] * SENDS
    # and not one statement in the database named a flooded session: no owner lookup, no load
    assert _owner_lookups(postgres_server, flooded) == 0
