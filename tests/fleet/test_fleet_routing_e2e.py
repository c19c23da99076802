"""Any instance serves any session: three real `runbrain` instances (A, B, C) on one real
PostgreSQL and a shared filesystem archive. A session created on A is sent to through B, streamed
through C and then B (Last-Event-ID: no gap, no duplicate), read through B, and an idempotency
key sent through B and again through C replays the same event. No owner is paused here: a
forward to a paused owner waits for its read timeout."""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    send,
    send_ok,
    wait_for_history,
    wait_for_status,
)
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 10  # nobody dies here: a long lease keeps renewals out of the way
LATENCY_SAMPLES = 15


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    """A factory of fleet instances by name, sharing the database, the archive and the tokens."""
    return fleet_factory(
        brain_factory, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_route"
    )


def _ended(input_id: str) -> Callable[[list[dict[str, Any]]], bool]:
    def ended(events: list[dict[str, Any]]) -> bool:
        return any(
            event["type"] == "session.status"
            and event.get("input_id") == input_id
            and event["data"]["status"] == "idle"
            for event in events
        )

    return ended


def _send_seconds(server: BrainServer, session_id: str, text: str) -> float:
    with server.client() as client:
        began = time.perf_counter()
        response = client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": text})
        seconds = time.perf_counter() - began
    assert response.status_code == 202, response.text
    return seconds


def test_any_instance_serves_a_session_owned_by_another(fleet: Callable[[str], BrainServer]) -> None:
    # given a session created on A (A owns it) and two other instances
    a, b, c = fleet("brain-a"), fleet("brain-b"), fleet("brain-c")
    sid = create_session(a)["id"]
    # when a message is sent through B
    first = send_ok(b, sid, "through b")
    # then it lands in the owner's history, and B never loaded the session
    events = wait_for_history(a, sid, _ended(first["id"]))
    assert [(e["id"], e["data"]["text"]) for e in events if e["type"] == "user.message"] == [(first["id"], "through b")]
    assert not (b.data_dir / "sessions" / sid).exists()
    assert not (c.data_dir / "sessions" / sid).exists()
    # when the session is streamed through C from the start, then that stream is dropped
    with open_stream(c, sid, after="") as stream:
        assert stream.status == 200
        seen = stream.wait_for(_ended(first["id"]))
        assert stream.headers["content-type"].startswith("text/event-stream")
    before = [event for event in seen if "cursor" in event]
    # while no stream is open, another turn runs (sent through C)
    second = send_ok(c, sid, "while disconnected")
    wait_for_history(a, sid, _ended(second["id"]))
    # when the client reconnects through B with the last event it saw
    with open_stream(b, sid, last_event_id=before[-1]["cursor"]) as stream:
        assert stream.status == 200
        stream.wait_for(_ended(second["id"]))
        third = send_ok(a, sid, "live again")
        after = [event for event in stream.wait_for(_ended(third["id"])) if "cursor" in event]
    # then the two streams together are the history exactly: no gap, no duplicate
    owner_history = history(a, sid)
    streamed = [event["id"] for event in before + after]
    assert streamed == [event["id"] for event in owner_history]
    assert len(set(streamed)) == len(streamed)
    # and the history read through B is the owner's, byte for byte as JSON
    assert history(b, sid) == owner_history
    with b.client() as client:
        assert client.get(f"/sessions/{sid}").json()["status"] == "idle"
    # when an idempotency key is sent through B, then again through C
    keyed = send_ok(b, sid, "once", key="route-key-1")
    replayed = send(c, sid, "once", key="route-key-1")
    # then C's answer replays B's event, and only one input with that text exists
    assert replayed.status_code == 202, replayed.text
    assert replayed.json() == keyed
    wait_for_status(a, sid, "idle")
    texts = [event["data"]["text"] for event in history(a, sid) if event["type"] == "user.message"]
    assert texts == ["through b", "while disconnected", "live again", "once"]
    # a changed body under the same key is refused through any instance, and appends nothing
    changed = send(c, sid, "another text", key="route-key-1")
    assert changed.status_code == 409, changed.text
    assert len(history(b, sid)) == len(history(a, sid))
    assert [e["data"]["text"] for e in history(a, sid) if e["type"] == "user.message"][-1] == "once"
    # and neither B nor C ever loaded the session: everything went to its owner
    assert not (b.data_dir / "sessions" / sid).exists()
    assert not (c.data_dir / "sessions" / sid).exists()


def test_forwarded_and_direct_send_latency_are_printed(fleet: Callable[[str], BrainServer]) -> None:
    # given a session owned by A, and B which forwards to it
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    send_ok(b, sid, "warm up")  # the fleet client's connection to A is open
    wait_for_status(a, sid, "idle")
    # when the same sends go straight to A and through B, alternately
    direct: list[float] = []
    forwarded: list[float] = []
    for index in range(LATENCY_SAMPLES):
        direct.append(_send_seconds(a, sid, f"direct {index}"))
        forwarded.append(_send_seconds(b, sid, f"forwarded {index}"))
    # then every send landed on the owner, in order (the figures are printed, not asserted)
    wait_for_status(a, sid, "idle", timeout=60)
    texts = [event["data"]["text"] for event in history(a, sid) if event["type"] == "user.message"]
    expected = ["warm up"] + [
        text for index in range(LATENCY_SAMPLES) for text in (f"direct {index}", f"forwarded {index}")
    ]
    assert texts == expected
    direct_ms = statistics.median(direct) * 1000
    forwarded_ms = statistics.median(forwarded) * 1000
    print(
        f"send median over {LATENCY_SAMPLES}: direct to the owner {direct_ms:.2f} ms, "
        f"through a non-owner {forwarded_ms:.2f} ms (+{forwarded_ms - direct_ms:.2f} ms)"
    )


HEAD_BOUND_SECONDS = 8.0  # well inside the 15 s keep-alive: a head that waits for it is late


def test_a_stream_through_a_non_owner_answers_its_head_before_any_event(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given an idle session created on A, with nothing to stream after its last event
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    last = history(a, sid)[-1]["id"] if history(a, sid) else ""
    path = f"/sessions/{sid}/events" + (f"?after={last}" if last else "")
    # when a stream is opened through B, which forwards it to A
    host, port = str(b.config["listen"]).rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sock.settimeout(HEAD_BOUND_SECONDS)
        sock.sendall(
            f"GET {path} HTTP/1.1\r\nHost: brain\r\nAuthorization: Bearer {b.token()}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)  # socket.timeout when the head waits for an event
            assert chunk, f"B closed the stream before its head: {head!r}"
            head += chunk
    # then its head arrived at once, as on the owner, not with the first event or keep-alive
    status_line, _, rest = head.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 200 OK"
    assert b"content-type: text/event-stream" in rest.lower()
