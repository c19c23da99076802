"""Hostile request bodies against a real runbrain: endless chunked uploads, oversized declared
lengths and slow drips are cut off in Daphne as bytes arrive, and the server keeps serving turns.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    make_server,
    open_stream,
    send_ok,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

DEADLINE_SECONDS = 2  # BRAIN_BODY_DEADLINE_SECONDS for this module's server
INPUT_BYTES = 65536  # the default limits.input_bytes
BODY_LIMIT = INPUT_BYTES + 16 * 1024
FLOOD_CAP = 64 << 20  # an endless body must be cut off long before this much was sent
FLOOD_CHUNK = 64 * 1024
READ_SIZE = 64 * 1024  # Twisted reads at most this much at once: the overshoot past the limit
DRIP_INTERVAL_SECONDS = 0.5
WAIT_SECONDS = 20.0


@pytest.fixture(scope="module")
def brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"))
    server.env["BRAIN_BODY_DEADLINE_SECONDS"] = str(DEADLINE_SECONDS)
    server.start()
    yield server
    server.kill()


# -- helpers ---------------------------------------------------------------------------------


def _connect(server: BrainServer) -> socket.socket:
    host, port = server.config["listen"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=WAIT_SECONDS)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _head(server: BrainServer, path: str, *headers: str, method: str = "POST") -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {server.config['listen']}",
        f"Authorization: Bearer {server.token()}",
        "Content-Type: application/json",
        *headers,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _parse_answer(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ")[1]), headers, body


def _read_until_closed(sock: socket.socket, *, timeout: float = WAIT_SECONDS) -> tuple[bytes, str]:
    """Everything the server sends, and how the connection ended: "eof", "reset" or "open"."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, "eof"
            data += chunk
    except ConnectionResetError:
        return data, "reset"
    except TimeoutError:
        return data, "open"


def _temporary_file_sizes(pid: int) -> list[int]:
    """Sizes of the anonymous temporary files the process holds open: Twisted's request bodies
    (tempfile.TemporaryFile, "/tmp/#123 (deleted)" with O_TMPFILE, else an unlinked "tmpXXXX")."""
    sizes = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
            name = Path(target.removesuffix(" (deleted)")).name
            if target.endswith(" (deleted)") and name.startswith(("#", "tmp")):
                sizes.append(fd.stat().st_size)
        except OSError:
            continue  # closed while we looked
    return sizes


def _log_records(server: BrainServer, message: str, *, since: int = 0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in server.log_lines[since:] if f'"msg": "{message}"' in line]
        if records:
            return records
        time.sleep(0.05)
    raise AssertionError(f"no log line {message!r}")


def _envelope_of(body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    envelope: dict[str, Any] = json.loads(body)
    assert envelope["request_id"] == headers["x-request-id"]
    return envelope["error"]  # type: ignore[no-any-return]


class Flood:
    """An endless chunked upload over a raw socket: keeps sending 64 KiB chunks until the server
    answers, then until it drops the connection, watching the server's temporary files meanwhile."""

    def __init__(self, server: BrainServer, path: str) -> None:
        self.server = server
        self.path = path
        self.sent = 0  # body and framing bytes the kernel took from us
        self.sent_at_answer = 0
        self.answer = b""
        self.answered_after = 0.0  # seconds from the first body byte
        self.closed_after = 0.0  # seconds until the server's end of the connection was closed (eof)
        self.dropped_after = 0.0  # seconds until a send failed: the server reset the connection
        self.largest_temporary_file = 0

    def run(self, *, timeout: float = WAIT_SECONDS) -> Flood:
        assert self.server.process is not None
        pid = self.server.process.pid
        sock = _connect(self.server)
        sock.sendall(_head(self.server, self.path, "Transfer-Encoding: chunked"))
        sock.setblocking(False)
        chunk = b"%x\r\n" % FLOOD_CHUNK + b"x" * FLOOD_CHUNK + b"\r\n"
        pending = memoryview(chunk)
        started = time.monotonic()
        rounds = 0
        try:
            while time.monotonic() - started < timeout and self.sent < FLOOD_CAP:
                readable, writable, _ = select.select([] if self.closed_after else [sock], [sock], [], 0.2)
                if readable:
                    self._receive(sock.recv(65536), started)
                if writable:
                    written = sock.send(pending)
                    self.sent += written
                    pending = pending[written:] or memoryview(chunk)
                rounds += 1
                if rounds % 8 == 0:
                    self.largest_temporary_file = max([self.largest_temporary_file, *_temporary_file_sizes(pid)])
        except (ConnectionResetError, BrokenPipeError):
            self.dropped_after = time.monotonic() - started
        finally:
            sock.close()
        return self

    def _receive(self, data: bytes, started: float) -> None:
        if not data:
            self.closed_after = time.monotonic() - started
            return
        if not self.answer:
            self.sent_at_answer = self.sent
            self.answered_after = time.monotonic() - started
        self.answer += data


def _drip(server: BrainServer, *, head: bytes = b"", drip: bytes) -> tuple[bytes, int, float]:
    """Send `head` at once, then `drip` one byte per interval until the server answers;
    (the answer, bytes dripped, seconds from the first byte to the server's close)."""
    sock = _connect(server)
    started = time.monotonic()
    sent = 0
    try:
        sock.sendall(head)
        for byte in drip:
            readable, _, _ = select.select([sock], [], [], DRIP_INTERVAL_SECONDS)
            if readable:
                break
            sock.sendall(bytes([byte]))
            sent += 1
        answer, _ = _read_until_closed(sock)
    finally:
        sock.close()
    return answer, sent, time.monotonic() - started


# -- size ------------------------------------------------------------------------------------


def test_an_endless_chunked_body_is_answered_413_near_the_limit_and_the_connection_is_dropped(
    brain: BrainServer,
) -> None:
    # given
    session = create_session(brain)
    since = len(brain.log_lines)
    # when
    flood = Flood(brain, f"/sessions/{session['id']}/events").run()
    # then: the answer came once about the limit had been read, and nothing near the flood was kept
    status, headers, body = _parse_answer(flood.answer)
    assert status == 413
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert headers["x-content-type-options"] == "nosniff"
    assert _envelope_of(body, headers) == {"code": "invalid_request", "message": "request body exceeds the size limit"}
    assert 0 < flood.answered_after < flood.dropped_after < WAIT_SECONDS
    assert flood.closed_after <= flood.dropped_after  # the answer, a close, then a reset
    assert flood.sent_at_answer < FLOOD_CAP // 4  # the limit, plus what the socket buffers held
    assert flood.sent < FLOOD_CAP
    assert flood.largest_temporary_file <= BODY_LIMIT
    [record] = _log_records(brain, "request body over the size limit", since=since)
    assert BODY_LIMIT < record["received"] <= BODY_LIMIT + READ_SIZE
    assert record["limit"] == BODY_LIMIT
    assert brain.sdk().history(session["id"])["events"] == []
    assert max(_temporary_file_sizes(brain.process.pid), default=0) == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "expect",
    [pytest.param((), id="plain_case"), pytest.param(("Expect: 100-continue",), id="expect_continue_case")],
)
def test_a_content_length_over_the_limit_is_answered_413_before_the_body_is_sent(
    brain: BrainServer, expect: tuple[str, ...]
) -> None:
    # given
    session = create_session(brain)
    since = len(brain.log_lines)
    declared = 64 << 20
    sock = _connect(brain)
    # when: only the head goes out
    started = time.monotonic()
    sock.sendall(_head(brain, f"/sessions/{session['id']}/events", f"Content-Length: {declared}", *expect))
    answer, ending = _read_until_closed(sock)
    seconds = time.monotonic() - started
    sock.close()
    # then
    assert answer.startswith(b"HTTP/1.1 413 ")  # and no "100 Continue" before it
    status, headers, body = _parse_answer(answer)
    assert (status, headers["connection"]) == (413, "close")
    assert _envelope_of(body, headers)["code"] == "invalid_request"
    assert ending in ("eof", "reset")
    assert seconds < WAIT_SECONDS / 2
    [record] = _log_records(brain, "request body over the size limit", since=since)
    assert record["declared"] == declared
    assert brain.sdk().history(session["id"])["events"] == []


def test_a_chunked_body_within_the_limit_and_the_deadline_is_still_accepted(brain: BrainServer) -> None:
    # given: a body in pieces, well within the limit and the deadline
    session = create_session(brain)

    def pieces() -> Iterator[bytes]:
        yield b'{"type":"user.message",'
        time.sleep(0.2)
        yield b'"text":"' + b"y" * INPUT_BYTES + b'"'
        time.sleep(0.2)
        yield b"}"

    # when
    with brain.client() as client:
        response = client.post(f"/sessions/{session['id']}/events", content=pieces())
    # then
    assert response.status_code == 202, response.text
    assert response.json()["data"]["text"] == "y" * INPUT_BYTES


# -- time ------------------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["body_case", "head_case"])
def test_a_slow_drip_is_cut_off_by_the_total_deadline(brain: BrainServer, part: str) -> None:
    # given: one byte every half second, each of which would reset an idle timer
    session = create_session(brain)
    since = len(brain.log_lines)
    head = _head(brain, f"/sessions/{session['id']}/events", "Content-Length: 4096")
    # when
    if part == "body_case":
        answer, dripped, seconds = _drip(brain, head=head, drip=b"x" * 4096)
    else:
        answer, dripped, seconds = _drip(brain, drip=head)
    # then
    status, headers, body = _parse_answer(answer)
    assert (status, headers["connection"]) == (408, "close")
    assert _envelope_of(body, headers) == {
        "code": "invalid_request",
        "message": f"request not received within {DEADLINE_SECONDS} s",
    }
    assert DEADLINE_SECONDS - 0.5 < seconds < DEADLINE_SECONDS + 8
    assert 0 < dripped < 4096
    [record] = _log_records(brain, "request not received within the body deadline", since=since)
    assert record["deadline_seconds"] == DEADLINE_SECONDS
    if part == "body_case":
        assert 0 < record["body_bytes"] <= dripped  # the last byte may cross the answer
    else:
        assert record["body_bytes"] == 0
    assert brain.sdk().history(session["id"])["events"] == []


def test_the_deadline_runs_per_request_not_per_connection_or_response(brain: BrainServer) -> None:
    # given: a kept-alive connection and an open stream, both idle for longer than the deadline
    session = create_session(brain)
    sock = _connect(brain)
    request = _head(brain, "/health/ready", method="GET")
    with open_stream(brain, session["id"]) as stream:
        # when
        sock.sendall(request)
        first = _read_response(sock)
        time.sleep(DEADLINE_SECONDS + 1)
        sock.sendall(request)
        second = _read_response(sock)
        message = send_ok(brain, session["id"], "after the deadline")
        events = stream.wait_for_event("session.status", input_id=message["id"], data={"status": "idle"})
    sock.close()
    # then
    assert (first, second) == (200, 200)
    assert stream.status == 200
    assert [event["type"] for event in events][-2:] == ["assistant.message", "session.status"]


def _read_response(sock: socket.socket) -> int:
    sock.settimeout(WAIT_SECONDS)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    status, headers, body = _parse_answer(data)
    while len(body) < int(headers.get("content-length", "0")):
        body += sock.recv(65536)
    return status


# -- the server keeps serving ----------------------------------------------------------------


def test_turns_run_while_bodies_are_flooded_oversized_and_dripped(brain: BrainServer) -> None:
    # given: faults repeated on their own connections in the background until the turns are done
    victim = create_session(brain)
    path = f"/sessions/{victim['id']}/events"
    done = threading.Event()
    floods: list[Flood] = []
    oversized: list[bytes] = []
    drips: list[bytes] = []

    def flood() -> None:
        while not (done.is_set() and floods):
            floods.append(Flood(brain, path).run())

    def declare_too_much() -> None:
        while not (done.is_set() and oversized):
            sock = _connect(brain)
            sock.sendall(_head(brain, path, f"Content-Length: {FLOOD_CAP}"))
            oversized.append(_read_until_closed(sock)[0])
            sock.close()

    def drip() -> None:
        while not (done.is_set() and drips):
            drips.append(_drip(brain, head=_head(brain, path, "Content-Length: 10"), drip=b"x" * 10)[0])

    faults = [threading.Thread(target=target) for target in (flood, declare_too_much, drip)]
    for fault in faults:
        fault.start()
    # when: sessions are created and run turns through the published client meanwhile, and after
    client = brain.sdk()
    during = [_run_turn(brain, client, f"during the faults {index}") for index in range(3)]
    done.set()
    for fault in faults:
        fault.join(timeout=WAIT_SECONDS * 2)
    after = _run_turn(brain, client, "after the faults")
    # then
    assert not any(fault.is_alive() for fault in faults)
    assert {(_parse_answer(flood.answer)[0], bool(flood.dropped_after)) for flood in floods} == {(413, True)}
    assert {_parse_answer(answer)[0] for answer in oversized} == {413}
    assert {_parse_answer(answer)[0] for answer in drips} == {408}
    assert during == ["idle"] * 3
    assert after == "idle"
    assert client.history(victim["id"])["events"] == []


def _run_turn(server: BrainServer, client: Any, text: str) -> str:
    session = client.create({"harness": "instant", "config": {"model": "openai/gpt-4.1-mini", "tools": []}})
    message = client.send(session["id"], {"type": "user.message", "text": text})
    events = wait_for_turn_end(server, session["id"], message["id"])
    assert events[-2]["data"]["text"] == f"echo: {text}"
    return str(events[-1]["data"]["status"])


def test_a_bad_body_deadline_setting_stops_runbrain_at_start(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory(start=False)
    server.env["BRAIN_BODY_DEADLINE_SECONDS"] = "soon"
    # when
    with pytest.raises(RuntimeError) as refused:
        server.start()
    # then
    assert "BRAIN_BODY_DEADLINE_SECONDS must be a positive number of seconds, not 'soon'" in str(refused.value)


def test_httpx_reads_the_413_of_an_oversized_upload(brain: BrainServer) -> None:
    # given: an ordinary client sending a declared body well past the limit
    session = create_session(brain)
    text = "z" * (4 << 20)
    # when
    with brain.client() as client:
        response = client.post(f"/sessions/{session['id']}/events", json={"type": "user.message", "text": text})
    # then
    assert response.status_code == 413
    assert response.json()["error"] == {"code": "invalid_request", "message": "request body exceeds the size limit"}
    assert brain.sdk().history(session["id"])["events"] == []
