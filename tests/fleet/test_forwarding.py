"""Forwarding to a session's owner over real loopback HTTP: the owner (a small HTTP/1.1 server
that checks the fleet signature) streams SSE in awkward pieces; the forwarding side must get
every byte, in order, each piece as soon as it is sent, and only signed headers must arrive."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from fleet_app.forwarding import RECHECK_SECONDS, Forwarded, OwnerUnreachable, exchange
from fleet_app.signing import FleetAuthError, ReplayGuard, sign_forwarded, verify_request
from fleet_app.transport import FleetTransport
from tests.fixtures.server import free_port

SECRET = b"f" * 32
SESSION_EVENTS = b"/sessions/0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f/events"
WAIT_SECONDS = 10.0
# SSE as the owner writes it, cut where a proxy must not care: inside a frame, inside a field
# name, and inside a multi-byte UTF-8 character (the first two bytes of "é" end a piece).
PIECES = [
    b": keepalive\n\n",
    b'id: eyJvIjowLCJpIjoiYSJ9\nevent: assistant.message\ndata: {"text":"caf\xc3',
    b'\xa9"}\n\n',
    b"id: eyJvIjo5OSwiaSI6ImIifQ\nev",
    b'ent: session.status\ndata: {"status":"idle"}\n\n',
]


@asynccontextmanager
async def forward_request(
    transport: FleetTransport,
    *,
    secret: bytes,
    sender: str,
    owner: str,
    owner_url: str,
    method: str,
    target: bytes,
    headers: Mapping[str, str],
    body: bytes,
    client_address: str,
    still_owner: Callable[[], Awaitable[bool]] | None = None,
    recheck_seconds: float = RECHECK_SECONDS,
) -> AsyncIterator[Forwarded]:
    """A client's request as routing hands it on: signed for `owner`, then sent on `transport`."""
    request = sign_forwarded(
        secret,
        sender=sender,
        receiver=owner,
        url=owner_url,
        method=method,
        target=target,
        headers=headers,
        body=body,
        client_address=client_address,
        now=time.time(),
        nonce=secrets.token_hex(16),
    )
    async with exchange(transport, request, still_owner=still_owner, recheck_seconds=recheck_seconds) as answer:
        yield answer


@dataclass
class Received:
    method: str
    target: bytes
    headers: dict[str, str]
    body: bytes
    sender: str


@dataclass
class Owner:
    """The owning instance: verifies each request, then answers it from `pieces`, sending the
    next piece only when the test says the last one arrived (so buffering would hang, not pass)."""

    name: str = "brain-a"
    pieces: list[bytes] = field(default_factory=list)
    status: bytes = b"200 OK"
    content_type: bytes = b"text/event-stream"
    received: list[Received] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    gate: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    closed_by_peer: asyncio.Event = field(default_factory=asyncio.Event)
    guard: ReplayGuard = field(default_factory=ReplayGuard)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).rstrip(b"\r\n")
            method, target, _ = request_line.split(b" ", 2)
            headers: dict[str, str] = {}
            while (line := (await reader.readline()).rstrip(b"\r\n")) != b"":
                name, _, value = line.partition(b":")
                headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            try:
                sender = verify_request(
                    SECRET,
                    receiver=self.name,
                    method=method.decode(),
                    target=target,
                    body=body,
                    headers=headers,
                    now=time.time(),
                    replay=self.guard,
                )
            except FleetAuthError as exc:
                self.refused.append(exc.reason)
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                return
            self.received.append(Received(method.decode(), target, headers, body, sender))
            writer.write(
                b"HTTP/1.1 " + self.status + b"\r\n"
                b"Content-Type: " + self.content_type + b"\r\n"
                b"Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\nRetry-After: 1\r\n"
                b"Connection: keep-alive, x-hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for index, piece in enumerate(self.pieces):
                if index:
                    await self.gate.get()
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await reader.read()  # until the forwarding side closes its connection
            self.closed_by_peer.set()
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_peer.set()
        finally:
            writer.close()


@pytest.fixture
async def owner() -> AsyncIterator[tuple[Owner, str]]:
    server_owner = Owner()
    server = await asyncio.start_server(server_owner.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield server_owner, f"http://127.0.0.1:{port}"
        server.close()


async def test_sse_is_streamed_back_byte_for_byte_as_each_piece_arrives(owner: tuple[Owner, str]) -> None:
    # given
    origin, url = owner
    origin.pieces = list(PIECES)
    client_headers = {
        "Authorization": "Bearer tok-1234567890abcdefghijkl",
        "Accept": "text/event-stream",
        "Last-Event-ID": "eyJvIjowLCJpIjoiYSJ9",
        "Cookie": "sessionid=admin",  # not the owner's business: not forwarded
        "X-Forwarded-For": "198.51.100.9",  # unsigned: not forwarded
        "Host": "brain-b.fleet.test",
    }
    received: list[bytes] = []
    # when
    async with (
        FleetTransport() as client,
        forward_request(
            client,
            secret=SECRET,
            sender="brain-b",
            owner="brain-a",
            owner_url=url,
            method="GET",
            target=SESSION_EVENTS + b"?after=eyJvIjowLCJpIjoiYSJ9",
            headers=client_headers,
            body=b"",
            client_address="203.0.113.7",
        ) as forwarded,
    ):
        status, headers = forwarded.status, forwarded.headers
        boundaries = {sum(map(len, PIECES[: n + 1])) for n in range(len(PIECES) - 1)}
        async with asyncio.timeout(WAIT_SECONDS):  # a buffering proxy would wait here forever
            async for chunk in forwarded.body:
                received.append(chunk)
                if len(b"".join(received)) in boundaries:
                    origin.gate.put_nowait(None)  # this piece arrived whole before the next was sent
    # then
    assert b"".join(received) == b"".join(PIECES)
    assert status == 200
    assert headers == [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
        (b"retry-after", b"1"),
    ]
    [request] = origin.received
    assert (request.method, request.target, request.sender) == (
        "GET",
        SESSION_EVENTS + b"?after=eyJvIjowLCJpIjoiYSJ9",
        "brain-b",
    )
    assert sorted(request.headers) == [  # the signed ones and the Host: nothing unsigned reaches the owner
        "accept",
        "authorization",
        "brain-fleet-client",
        "brain-fleet-instance",
        "brain-fleet-nonce",
        "brain-fleet-signature",
        "brain-fleet-time",
        "host",
        "last-event-id",
    ]
    assert (request.headers["authorization"], request.headers["last-event-id"]) == (
        "Bearer tok-1234567890abcdefghijkl",
        "eyJvIjowLCJpIjoiYSJ9",
    )
    assert (request.headers["brain-fleet-client"], request.headers["host"]) == ("203.0.113.7", url[len("http://") :])
    assert origin.refused == []


async def test_a_send_is_forwarded_with_its_body_and_the_owners_answer_comes_back(owner: tuple[Owner, str]) -> None:
    # given
    origin, url = owner
    origin.status, origin.content_type = b"202 Accepted", b"application/json"
    origin.pieces = [b'{"id":"', b'abc","type":"user.message"}']
    body = b'{"type":"user.message","data":{"text":"caf\xc3\xa9"},"key":"k-1"}'
    # when
    async with (
        FleetTransport() as client,
        forward_request(
            client,
            secret=SECRET,
            sender="brain-c",
            owner="brain-a",
            owner_url=url,
            method="POST",
            target=SESSION_EVENTS,
            headers={"content-type": "application/json", "authorization": "Bearer t"},
            body=body,
            client_address="::1",
        ) as forwarded,
    ):
        pieces = []
        async for chunk in forwarded.body:
            pieces.append(chunk)
            origin.gate.put_nowait(None)
    # then
    assert forwarded.status == 202
    assert b"".join(pieces) == b'{"id":"abc","type":"user.message"}'
    [request] = origin.received
    assert (request.method, request.body, request.sender) == ("POST", body, "brain-c")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["brain-fleet-client"] == "::1"


async def test_a_request_signed_with_another_secret_is_refused_by_the_owner(owner: tuple[Owner, str]) -> None:
    # given
    origin, url = owner
    # when
    async with (
        FleetTransport() as client,
        forward_request(
            client,
            secret=b"x" * 32,
            sender="brain-b",
            owner="brain-a",
            owner_url=url,
            method="GET",
            target=SESSION_EVENTS,
            headers={},
            body=b"",
            client_address="127.0.0.1",
        ) as forwarded,
    ):
        body = b"".join([chunk async for chunk in forwarded.body])
    # then
    assert (forwarded.status, body) == (403, b"")
    assert origin.refused == ["bad fleet signature"]
    assert origin.received == []


async def test_leaving_the_block_closes_the_owners_stream(owner: tuple[Owner, str]) -> None:
    # given: an owner with more to send than the client will read
    origin, url = owner
    origin.pieces = list(PIECES)
    async with FleetTransport() as client:  # the client (its connection pool) stays open throughout
        # when: the client takes the first piece and goes away
        async with forward_request(
            client,
            secret=SECRET,
            sender="brain-b",
            owner="brain-a",
            owner_url=url,
            method="GET",
            target=SESSION_EVENTS,
            headers={"accept": "text/event-stream"},
            body=b"",
            client_address="127.0.0.1",
        ) as forwarded:
            first = await anext(aiter(forwarded.body))
        for _ in PIECES:
            origin.gate.put_nowait(None)  # let the owner write on, into a closed connection
        # then
        assert first == PIECES[0]
        await asyncio.wait_for(origin.closed_by_peer.wait(), WAIT_SECONDS)


async def test_an_owner_that_is_not_listening_is_unreachable_before_any_byte_is_sent() -> None:
    # given
    url = f"http://127.0.0.1:{free_port()}"
    # when
    async with FleetTransport() as client:
        with pytest.raises(OwnerUnreachable) as unreachable:
            async with forward_request(
                client,
                secret=SECRET,
                sender="brain-b",
                owner="brain-a",
                owner_url=url,
                method="POST",
                target=SESSION_EVENTS,
                headers={},
                body=b"{}",
                client_address="127.0.0.1",
            ):
                pass
    # then
    assert unreachable.value.reached is False
    assert str(unreachable.value) == "owner brain-a unreachable: ConnectError"


@dataclass
class KeptAlive:
    """An owner that keeps its connections alive: answers every request on a connection with a
    Content-Length body, counting the connections it accepted; `close_after` closes each one
    after that many answers, and `answer` replaces the whole answer (a hostile owner)."""

    connections: int = 0
    answered: int = 0
    close_after: int = 0
    answer: bytes = b""
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # the owner closed a connection

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while await reader.readline():
                length = 0
                while (line := (await reader.readline()).rstrip(b"\r\n")) != b"":
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.answered += 1
                served += 1
                payload = b'{"echo":%d}' % len(body)
                writer.write(
                    self.answer
                    or b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(payload), payload)
                )
                await writer.drain()
                if self.close_after and served >= self.close_after:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            await writer.wait_closed()
            self.closed.set()


async def _forward_whole(
    client: FleetTransport, url: str, body: bytes = b'{"text":"hi"}', **options: Any
) -> tuple[int, dict[bytes, bytes], bytes]:
    """A send forwarded from brain-b to brain-a at `url`: the answer's status, headers and whole body."""
    async with forward_request(
        client,
        secret=SECRET,
        sender="brain-b",
        owner="brain-a",
        owner_url=url,
        method="POST",
        target=SESSION_EVENTS,
        headers={"content-type": "application/json"},
        body=body,
        client_address="127.0.0.1",
        **options,
    ) as forwarded:
        return forwarded.status, dict(forwarded.headers), b"".join([chunk async for chunk in forwarded.body])


async def _send_through(client: FleetTransport, url: str, body: bytes = b'{"text":"hi"}') -> tuple[int, bytes]:
    status, _, content = await _forward_whole(client, url, body)
    return status, content


async def test_requests_to_an_owner_share_one_kept_alive_connection() -> None:
    # given
    owner = KeptAlive()
    server = await asyncio.start_server(owner.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, FleetTransport() as client:
        # when: ten sends, one after the other
        answers = [await _send_through(client, url) for _ in range(10)]
    # then: every one answered, all on the first connection
    assert answers == [(202, b'{"echo":13}')] * 10
    assert (owner.connections, owner.answered) == (1, 10)


async def test_a_connection_the_owner_closed_while_idle_is_not_reused() -> None:
    # given: an owner that closes each connection after one answer
    owner = KeptAlive(close_after=1)
    server = await asyncio.start_server(owner.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, FleetTransport() as client:
        first = await _send_through(client, url)
        await asyncio.wait_for(owner.closed.wait(), WAIT_SECONDS)
        await asyncio.sleep(0)  # the owner's FIN, already in the socket, is read while the connection is idle
        # when
        second = await _send_through(client, url)
    # then: the second went on a new connection, and nothing failed
    assert (first, second) == ((202, b'{"echo":13}'), (202, b'{"echo":13}'))
    assert (owner.connections, owner.answered) == (2, 2)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", id="over_long_header_case"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 20_000 + b"\r\n\r\n", id="over_long_line_case"),
        pytest.param(b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", id="header_without_colon_case"),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 200 + b"\r\n", id="too_many_headers_case"),
        pytest.param(b"SSH-2.0-OpenSSH_9.2\r\n\r\n", id="not_http_case"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", id="bad_chunk_case"),
    ],
)
async def test_a_malformed_answer_is_an_error_never_a_hang_or_a_crash(answer: bytes) -> None:
    # given
    owner = KeptAlive(answer=answer)
    server = await asyncio.start_server(owner.handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, FleetTransport() as client:
        # when
        with pytest.raises((OwnerUnreachable, httpx.RemoteProtocolError)) as failed:
            async with asyncio.timeout(WAIT_SECONDS):
                await _send_through(client, url)
        # then: reported as an answer that went wrong after the request arrived, and the
        # connection is not reused: the next send opens another
        if isinstance(failed.value, OwnerUnreachable):
            assert failed.value.reached is True
        owner.answer = b""
        assert await _send_through(client, url) == (202, b'{"echo":13}')
    assert owner.connections == 2


async def test_a_head_slower_than_the_recheck_is_read_whole_across_rounds_of_patience() -> None:
    # given: an owner that sends its status line, stalls past two re-check rounds, then the rest
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(b'{"text":"hi"}'))
        writer.write(b"HTTP/1.1 202 Accepted\r\nContent-")
        await writer.drain()
        await asyncio.sleep(0.35)
        writer.write(b"Length: 4\r\n\r\nsent")
        await writer.drain()
        writer.close()

    asked = 0

    async def still_owner() -> bool:
        nonlocal asked
        asked += 1
        return True

    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, FleetTransport() as client:
        # when
        answer = await _forward_whole(client, url, still_owner=still_owner, recheck_seconds=0.1)
    # then: the bytes that arrived before each round ended were kept, and the owner re-checked
    assert answer == (202, {b"content-length": b"4"}, b"sent")
    assert asked >= 2
