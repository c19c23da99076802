"""The routing layer against real leases in PostgreSQL and a real owner on loopback HTTP (the
small server of test_forwarding, which verifies every signature): a session request reaching a
non-owner is forwarded and streamed back byte for byte; a signed request is verified before
its client address is believed and never forwarded a second time; an owner that does not answer
while its lease is live is a retryable 503; a session nobody owns is served where it lands."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from fleet_app.executor_routes import ExecutorLocator
from fleet_app.leases import LeaseManager
from fleet_app.routing import FleetRouter
from fleet_app.signing import receiver_identity, sign_request
from fleet_app.streams import DEFAULT_TENANT_STREAMS
from foundation.errors import Unauthorized
from foundation.hostconfig import FleetSecret, Secrets
from foundation.telemetry import Telemetry
from tests.fixtures.server import free_port
from tests.fleet.test_forwarding import PIECES, SECRET, WAIT_SECONDS, Owner

LIMIT = 64 * 1024
TOKEN = b"tok-routing-0123456789abcdef"  # what the test token cache grants


@dataclass(frozen=True)
class Grant:
    tenant: str


class Tokens:
    """The app object's token cache as routing reads it: TOKEN is tenant acme's, nothing else."""

    async def authenticate(self, header: str | None) -> Grant:
        if header != f"Bearer {TOKEN.decode()}":
            raise Unauthorized("missing or invalid bearer token")
        return Grant("acme")


@dataclass(frozen=True)
class Limits:
    tenant_forwarded_streams: int = DEFAULT_TENANT_STREAMS


@dataclass(frozen=True)
class Config:
    limits: Limits = field(default_factory=Limits)


def fleet_secrets() -> Secrets:
    return Secrets(tokens=(), provider_keys={}, fleet_secret=FleetSecret(SECRET))


@dataclass
class Brain:
    """The app object as routing reads it (fleet_app.app_object.RoutedAppObject): no executor
    relay, the default limits, telemetry switched off unless a test brings its own."""

    telemetry: Telemetry = field(default_factory=Telemetry)
    secrets: Secrets = field(default_factory=fleet_secrets)
    tokens: Tokens = field(default_factory=Tokens)
    relay: ExecutorLocator | None = None
    config: Config = field(default_factory=Config)


@dataclass
class Client:
    """The ASGI side of one request: its body, then a disconnect only when the test says so."""

    body: bytes = b""
    sent: list[dict[str, Any]] = field(default_factory=list)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    delivered: bool = False

    async def receive(self) -> dict[str, Any]:
        if not self.delivered:
            self.delivered = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def content(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.sent[1:])


def scope(
    path: str,
    *,
    method: str = "GET",
    query: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    authorized: bool = True,
) -> dict[str, Any]:
    """A client's request scope, with TOKEN as its bearer token unless `authorized` is False."""
    headers = [*([(b"authorization", b"Bearer " + TOKEN)] if authorized else []), *(headers or [])]
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "headers": headers or [],
        "client": ("203.0.113.7", 50000),
        "brain_request_id": "r" * 32,
    }


def instance(database: str, name: str, url: str) -> LeaseManager:
    leases = LeaseManager(instance=name, url=url, lease_seconds=30.0, database=database)
    leases.incarnation = f"{name}-process"  # the receiver a signature names: the fake owner's
    return leases


@pytest.fixture
async def owner() -> AsyncIterator[tuple[Owner, str]]:
    origin = Owner(name=receiver_identity("brain-a", "brain-a-process"))
    server = await asyncio.start_server(origin.handle, "127.0.0.1", 0)
    async with server:
        yield origin, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        server.close()


async def owned_by_a(fleet_db: str, url: str) -> tuple[str, LeaseManager, LeaseManager]:
    a, b = instance(fleet_db, "brain-a", url), instance(fleet_db, "brain-b", "http://127.0.0.1:1")
    assert await a.join() and await b.join()
    session_id = secrets.token_hex(16)
    assert await a.acquire(session_id) == 1
    return session_id, a, b


async def test_an_sse_stream_through_a_non_owner_comes_back_byte_for_byte_signed_with_the_clients_address(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given: the session is brain-a's; the request lands on brain-b
    origin, url = owner
    origin.pieces = list(PIECES)
    for _ in PIECES[1:]:
        origin.gate.put_nowait(None)
    session_id, _, b = await owned_by_a(fleet_db, url)
    router, client = FleetRouter(), Client()
    request = scope(
        f"/sessions/{session_id}/events",
        query=b"after=eyJvIjowLCJpIjoiYSJ9",
        headers=[
            (b"accept", b"text/event-stream"),
            (b"last-event-id", b"eyJvIjowLCJpIjoiYSJ9"),
            (b"cookie", b"sessionid=admin"),
        ],
    )
    # when
    async with asyncio.timeout(WAIT_SECONDS):
        served_locally = await router.route(Brain(), b, request, client.receive, client.send, limit=LIMIT)
    await router.aclose()
    # then
    assert served_locally is None
    assert (client.status, client.headers[b"content-type"]) == (200, b"text/event-stream")
    assert client.content == b"".join(PIECES)
    assert client.sent[-1] == {"type": "http.response.body", "body": b""}
    [received] = origin.received
    assert (received.method, received.target, received.sender) == (
        "GET",
        f"/sessions/{session_id}/events?after=eyJvIjowLCJpIjoiYSJ9".encode(),
        "brain-b",
    )
    assert (received.headers["brain-fleet-client"], received.headers["last-event-id"]) == (
        "203.0.113.7",
        "eyJvIjowLCJpIjoiYSJ9",
    )
    assert "cookie" not in received.headers
    assert (origin.refused, router.forwarded) == ([], 1)


async def test_a_send_through_a_non_owner_reaches_the_owner_with_its_exact_body(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given
    origin, url = owner
    origin.status, origin.content_type = b"202 Accepted", b"application/json"
    origin.pieces = [b'{"id":"abc"}']
    session_id, _, b = await owned_by_a(fleet_db, url)
    body = b'{"type":"user.message","data":{"text":"caf\xc3\xa9"},"key":"k-1"}'
    router, client = FleetRouter(), Client(body=body)
    request = scope(f"/sessions/{session_id}/events", method="POST", headers=[(b"content-type", b"application/json")])
    # when
    async with asyncio.timeout(WAIT_SECONDS):
        assert await router.route(Brain(), b, request, client.receive, client.send, limit=LIMIT) is None
    await router.aclose()
    # then
    assert (client.status, client.content) == (202, b'{"id":"abc"}')
    [received] = origin.received
    assert (received.method, received.body, received.headers["content-type"]) == ("POST", body, "application/json")


def signed_scope(path: str, *, sender: str, receiver: str, body: bytes = b"", method: str = "POST") -> dict[str, Any]:
    forwarded = {"content-type": "application/json", "brain-fleet-client": "198.51.100.4"}
    signature = sign_request(
        SECRET,
        sender=sender,
        target_instance=receiver,
        method=method,
        target=path.encode(),
        body=body,
        headers=forwarded,
        now=time.time(),
        nonce=secrets.token_hex(16),
    )
    headers = [(name.encode(), value.encode()) for name, value in {**forwarded, **signature}.items()]
    return scope(path, method=method, headers=headers, authorized=False)


async def test_a_signed_request_to_the_owner_is_served_there_with_the_forwarded_client_address(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given: brain-a owns the session and receives brain-b's forwarded send
    _, url = owner
    session_id, a, _ = await owned_by_a(fleet_db, url)
    body = b'{"type":"user.message","data":{"text":"hi"}}'
    path = f"/sessions/{session_id}/events"
    request = signed_scope(path, sender="brain-b", receiver=receiver_identity("brain-a", "brain-a-process"), body=body)
    router, client = FleetRouter(), Client(body=body)
    captured = dict(request, headers=list(request["headers"]))  # as sent, for a replay
    # when
    serve = await router.route(Brain(), a, request, client.receive, client.send, limit=LIMIT)
    # then: served locally, the body replayed once, the client's address believed
    assert serve is not None
    assert await serve() == {"type": "http.request", "body": body, "more_body": False}
    assert (request["client"], request["brain_fleet_sender"], client.sent) == (("198.51.100.4", 0), "brain-b", [])
    # and a replay of the same request is refused
    replayed, again = captured, Client(body=body)
    assert await router.route(Brain(), a, replayed, again.receive, again.send, limit=LIMIT) is None
    assert again.status == 401
    assert orjson.loads(again.content)["error"]["code"] == "forbidden"


async def test_a_request_with_a_bad_signature_is_401_and_reaches_nothing(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given: signed for another body than the one sent
    _, url = owner
    session_id, a, _ = await owned_by_a(fleet_db, url)
    path = f"/sessions/{session_id}/events"
    request = signed_scope(
        path, sender="brain-b", receiver=receiver_identity("brain-a", "brain-a-process"), body=b'{"text":"one"}'
    )
    router, client = FleetRouter(), Client(body=b'{"text":"two"}')
    # when
    served = await router.route(Brain(), a, request, client.receive, client.send, limit=LIMIT)
    # then
    assert served is None
    assert (client.status, client.headers[b"www-authenticate"]) == (401, b"Bearer")
    assert orjson.loads(client.content) == {
        "error": {"code": "forbidden", "message": "fleet request signature refused"},
        "request_id": "r" * 32,
    }
    assert request["client"] == ("203.0.113.7", 50000)  # the unverified address was not believed


async def test_a_signed_request_at_a_non_owner_is_never_forwarded_again(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given: brain-a owns the session; brain-b forwarded to brain-c, which is not the owner
    origin, url = owner
    session_id, _, _ = await owned_by_a(fleet_db, url)
    c = instance(fleet_db, "brain-c", "http://127.0.0.1:2")
    assert await c.join()
    request = signed_scope(
        f"/sessions/{session_id}/events",
        sender="brain-b",
        receiver=receiver_identity("brain-c", "brain-c-process"),
        body=b"{}",
    )
    router, client = FleetRouter(), Client(body=b"{}")
    # when
    served = await router.route(Brain(), c, request, client.receive, client.send, limit=LIMIT)
    await router.aclose()
    # then
    assert served is None
    assert (client.status, client.headers[b"retry-after"]) == (503, b"1")
    assert orjson.loads(client.content)["error"]["code"] == "unavailable"
    assert (origin.received, router.forwarded) == ([], 0)


async def test_an_unreachable_owner_with_a_live_lease_is_a_retryable_503(fleet_db: str) -> None:
    # given: brain-a holds the lease but nothing listens at its url
    session_id, _, b = await owned_by_a(fleet_db, f"http://127.0.0.1:{free_port()}")
    router, client = FleetRouter(), Client()
    # when
    async with asyncio.timeout(WAIT_SECONDS):
        served = await router.route(
            Brain(), b, scope(f"/sessions/{session_id}"), client.receive, client.send, limit=LIMIT
        )
    await router.aclose()
    # then
    assert served is None
    assert (client.status, client.headers[b"retry-after"]) == (503, b"1")
    assert orjson.loads(client.content) == {
        "error": {"code": "unavailable", "message": "the session's instance is not answering"},
        "request_id": "r" * 32,
    }


async def test_a_session_without_a_live_owner_and_creation_are_served_where_they_land(fleet_db: str) -> None:
    # given: nobody holds the session
    b = instance(fleet_db, "brain-b", "http://127.0.0.1:1")
    assert await b.join()
    router = FleetRouter()
    free, create = Client(body=b"{}"), Client(body=b"{}")
    # when
    serve_free = await router.route(
        Brain(),
        b,
        scope(f"/sessions/{secrets.token_hex(16)}/events", method="POST"),
        free.receive,
        free.send,
        limit=LIMIT,
    )
    serve_create = await router.route(
        Brain(), b, scope("/sessions", method="POST"), create.receive, create.send, limit=LIMIT
    )
    # then: both served here; creation's body untouched by this layer
    assert serve_free is not None
    assert await serve_free() == {"type": "http.request", "body": b"{}", "more_body": False}
    assert serve_create == create.receive
    assert (free.sent, create.sent, create.delivered, router.forwarded) == ([], [], False, 0)


async def test_the_owners_own_session_requests_pass_without_a_lookup(fleet_db: str, owner: tuple[Owner, str]) -> None:
    # given
    _, url = owner
    session_id, a, _ = await owned_by_a(fleet_db, url)

    class Counted(LeaseManager):
        lookups = 0

        async def owner_of(self, session_id: str) -> Any:
            Counted.lookups += 1
            return await super().owner_of(session_id)

    counted = Counted(instance="brain-a", url=url, lease_seconds=30.0, database=fleet_db)
    counted._held = a._held  # the same process's leases
    client = Client()
    # when
    serve = await FleetRouter().route(
        Brain(), counted, scope(f"/sessions/{session_id}"), client.receive, client.send, limit=LIMIT
    )
    # then
    assert serve == client.receive
    assert (Counted.lookups, client.delivered, client.sent) == (0, False, [])


class KeptAlive:
    """An owner that answers every request on a connection with `status` and a short body, or
    (`silent`) reads requests and never answers, as a paused process whose kernel still accepts."""

    def __init__(self, status: bytes = b"202 Accepted", *, silent: bool = False, cut: bool = False) -> None:
        """`cut`: the answer's head and part of its body, then the connection closes (a crash)."""
        self.status, self.silent, self.cut = status, silent, cut
        self.targets: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while request_line := (await reader.readline()).rstrip(b"\r\n"):
                length = 0
                while (line := (await reader.readline()).rstrip(b"\r\n")) != b"":
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.targets.append(request_line.split(b" ")[1])
                if self.silent:
                    await reader.read()  # never answers, until the other side closes
                    return
                writer.write(b"HTTP/1.1 " + self.status + b"\r\nContent-Type: application/json\r\n")
                writer.write(b"Content-Length: 12\r\n\r\n" + (b'{"id"' if self.cut else b'{"id":"abc"}'))
                await writer.drain()
                if self.cut:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def served(origin: KeptAlive) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(origin.handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def send_through(router: FleetRouter, leases: LeaseManager, session_id: str) -> Client:
    client = Client(body=b"{}")
    request = scope(f"/sessions/{session_id}/events", method="POST")
    async with asyncio.timeout(WAIT_SECONDS):
        assert await router.route(Brain(), leases, request, client.receive, client.send, limit=LIMIT) is None
    return client


async def test_a_remote_owner_is_looked_up_once_for_several_forwards(fleet_db: str) -> None:
    # given
    origin = KeptAlive()
    server, url = await served(origin)
    session_id, _, b = await owned_by_a(fleet_db, url)
    router = FleetRouter()
    # when: three sends through brain-b
    answers = [await send_through(router, b, session_id) for _ in range(3)]
    await router.aclose()
    server.close()
    # then: every one forwarded, the owner found in the database once
    assert [(answer.status, answer.content) for answer in answers] == [(202, b'{"id":"abc"}')] * 3
    assert (router.forwarded, router.lookups, len(origin.targets)) == (3, 1, 3)


async def test_an_owners_503_forgets_the_remembered_owner(fleet_db: str) -> None:
    # given: the owner answers 503 (draining, or the session moved on)
    origin = KeptAlive(b"503 Service Unavailable")
    server, url = await served(origin)
    session_id, _, b = await owned_by_a(fleet_db, url)
    router = FleetRouter()
    # when
    answers = [await send_through(router, b, session_id) for _ in range(2)]
    await router.aclose()
    server.close()
    # then: the 503 reached the client each time, and each send looked the owner up again
    assert [answer.status for answer in answers] == [503, 503]
    assert (router.forwarded, router.lookups) == (2, 2)


async def test_a_signed_request_for_a_session_the_owner_holds_needs_no_lookup(
    fleet_db: str, owner: tuple[Owner, str]
) -> None:
    # given
    _, url = owner
    session_id, a, _ = await owned_by_a(fleet_db, url)
    request = signed_scope(
        f"/sessions/{session_id}/events",
        sender="brain-b",
        receiver=receiver_identity("brain-a", "brain-a-process"),
        body=b"{}",
    )
    router, client = FleetRouter(), Client(body=b"{}")
    # when
    serve = await router.route(Brain(), a, request, client.receive, client.send, limit=LIMIT)
    # then
    assert serve is not None
    assert await serve() == {"type": "http.request", "body": b"{}", "more_body": False}
    assert (router.lookups, client.sent) == (0, [])


async def test_a_forward_to_a_paused_owner_is_a_retryable_503_once_its_lease_lapses(fleet_db: str) -> None:
    # given: brain-a accepts connections and never answers (SIGSTOP); its 3 s lease is not renewed
    origin = KeptAlive(silent=True)
    server, url = await served(origin)
    a = LeaseManager(instance="brain-a", url=url, lease_seconds=3.0, database=fleet_db)
    b = instance(fleet_db, "brain-b", "http://127.0.0.1:1")
    assert await a.join() and await b.join()
    session_id = secrets.token_hex(16)
    assert await a.acquire(session_id) == 1
    router = FleetRouter()
    # when: a send through brain-b, bounded far below the 120 s read timeout
    client = await send_through(router, b, session_id)
    await router.aclose()
    server.close()
    # then: the owner got the request, the client a retryable 503, the owner forgotten
    assert origin.targets == [f"/sessions/{session_id}/events".encode()]
    assert (client.status, client.headers[b"retry-after"]) == (503, b"1")
    assert orjson.loads(client.content) == {
        "error": {"code": "unavailable", "message": "the session's instance is not answering"},
        "request_id": "r" * 32,
    }
    assert (router.forwarded, router.owners.remembered) == (1, 0)


async def forwarded_once(fleet_db: str, origin: KeptAlive) -> tuple[Client, FleetRouter]:
    """One send through brain-b to `origin`, which owns the session as brain-a."""
    server, url = await served(origin)
    session_id, _, b = await owned_by_a(fleet_db, url)
    router = FleetRouter()
    client = await send_through(router, b, session_id)
    await router.aclose()
    server.close()
    return client, router


async def test_an_ordinary_answer_is_passed_on_in_one_piece_with_its_length(fleet_db: str) -> None:
    # when
    client, _ = await forwarded_once(fleet_db, KeptAlive())
    # then: the head, then the whole body in one last message: no flush, no chunked coding
    assert [message["type"] for message in client.sent] == ["http.response.start", "http.response.body"]
    assert client.sent[1] == {"type": "http.response.body", "body": b'{"id":"abc"}'}
    assert client.headers[b"content-length"] == b"12"


async def test_an_owner_that_dies_mid_answer_is_a_retryable_503_not_a_short_body(fleet_db: str) -> None:
    # when: the owner crashes after its answer's head and part of its body
    client, router = await forwarded_once(fleet_db, KeptAlive(cut=True))
    # then: nothing of the broken answer reached the client, which gets a retryable 503 (a
    # send's idempotency key settles whether it was taken), and the owner is forgotten
    assert (client.status, client.headers[b"retry-after"]) == (503, b"1")
    assert orjson.loads(client.content)["error"]["code"] == "unavailable"
    assert (router.forwarded, router.owners.remembered) == (1, 0)


async def test_a_client_that_leaves_while_the_owner_is_silent_ends_the_forward(fleet_db: str) -> None:
    # given: an owner that never answers, its lease live (the re-check keeps finding it)
    origin = KeptAlive(silent=True)
    server, url = await served(origin)
    session_id, _, b = await owned_by_a(fleet_db, url)
    router = FleetRouter()
    client = Client(body=b"{}")
    request = scope(f"/sessions/{session_id}/events", method="POST")
    forward = asyncio.ensure_future(router.route(Brain(), b, request, client.receive, client.send, limit=LIMIT))
    await asyncio.sleep(0.3)  # the answer is late: the watcher for the client's leaving runs by now
    # when
    client.gone.set()
    async with asyncio.timeout(WAIT_SECONDS):
        routed = await forward
    await router.aclose()
    server.close()
    # then: the forward ended with the client, and nothing was sent to it
    assert (routed, client.sent) == (None, [])
    assert origin.targets == [f"/sessions/{session_id}/events".encode()]
