"""Slow uploads per client address on a real `runbrain`: past `limits.receiving_per_address`
requests from one address whose bytes are still arriving, the next one from that address is
answered 429 with Retry-After and the error envelope at its first byte, while another address
(127.0.0.2 on the loopback) and the same address once its drips end are served as usual."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import httpx

from tests.fixtures.server import BrainServer, create_session, send_ok, wait_for_turn_end

PARTIAL_BODY = 10  # bytes of a 1,000-byte body a dripping client sends before it stalls


def connect(brain: BrainServer, source: str) -> socket.socket:
    host, port = brain.config["listen"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=20, source_address=(source, 0))
    return sock


def request_head(brain: BrainServer, *, length: int) -> bytes:
    return (
        f"POST /sessions HTTP/1.1\r\nHost: brain\r\nAuthorization: Bearer {brain.token('alice')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@contextlib.contextmanager
def dripping(brain: BrainServer, count: int, source: str = "127.0.0.1") -> Iterator[list[socket.socket]]:
    """`count` connections each with a request whose body stalls after PARTIAL_BODY bytes."""
    sockets = [connect(brain, source) for _ in range(count)]
    try:
        for sock in sockets:
            sock.sendall(request_head(brain, length=1000) + b"{" * PARTIAL_BODY)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def exchange(brain: BrainServer, source: str) -> httpx.Response:
    """One whole `GET /sessions` from `source`."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=20) as client:
        return client.get(f"{brain.url}/sessions", headers={"Authorization": f"Bearer {brain.token('alice')}"})


def test_an_address_past_its_arriving_requests_gets_429_while_other_addresses_are_served(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: two requests from 127.0.0.1 stalled mid-body
    brain = brain_factory(limits={"receiving_per_address": 2})
    session = create_session(brain)["id"]
    with dripping(brain, 2):
        # when
        refused = exchange(brain, "127.0.0.1")
        other = exchange(brain, "127.0.0.2")
        # then
        assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"] == {
            "code": "overloaded",
            "message": "too many requests from this address are still arriving (at most 2)",
        }
        assert other.status_code == 200
        assert [item["id"] for item in other.json()["sessions"]] == [session]
    # and once the drips have ended the address is served again
    deadline = time.monotonic() + 10
    while (status := exchange(brain, "127.0.0.1").status_code) != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200
    turn = send_ok(brain, session, "hello")
    assert wait_for_turn_end(brain, session, turn["id"])[-1]["data"]["status"] == "idle"
