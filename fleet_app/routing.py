"""Routing session requests to their owner: the ASGI layer in front of the session routes.

A request for `/sessions/{id}...` that lands on an instance other than the session's live owner
is forwarded to the owner, signed with the fleet secret, and the owner's status, headers and
body are streamed back byte for byte (SSE included, so cursors and Last-Event-ID work through
any instance). On the owner a signed request is verified before anything in it is trusted (the
client's address in `brain-fleet-client`); a signed request is never forwarded again: when the
receiving instance is not the owner either, it answers 503 and the first instance's client
retries. A session with no live owner is served where the request lands (the engine acquires
its lease). `POST /sessions` and every other route are served locally.

A runtime executor's own routes (`/executors/{id}/responses`, `/close` and the `/commands`
stream) go the same way to the instance holding the executor, found in the executor relay's
Redis records when this instance does not hold it: a reply through any instance reaches the
executor's pending calls. An executor no instance is known to hold is answered here (the
executor credential refused, as on a single instance), as is one whose holder is gone; while
Redis is out of reach nobody can tell where it is held: 503.

The owner of a session is looked up in PostgreSQL once and remembered for OWNER_CACHE_SECONDS
(well under a lease); an answer of 503 from it, an owner that cannot be reached, or one that
loses its lease while the request waits for its answer forgets it at once. A stale entry costs
no correctness: a signed request reaching a former owner is answered 503 (or served there when
nobody owns the session), never forwarded again. The owner serves a signed request for a
session it holds without a lookup.

Nothing here runs without a `cluster` block: the app object then has no `leases` and the
caller skips this layer after one attribute check. No Django; the lease manager and the secret
come from the app object through the narrow protocols below.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import httpx

from foundation.errors import BrainError, PayloadTooLarge, Unauthorized, error_envelope

from .executor_routes import EXECUTOR_PATH, ExecutorLocator, executors_of
from .forwarding import RECHECK_SECONDS, OwnerUnreachable, fleet_client, forward_request
from .signing import SIGNATURE_HEADER, FleetAuthError, ReplayGuard, honoured_headers, receiver_identity, verify_request

__all__ = ["FleetRouter", "OwnerUnavailable", "fleet_secret_of", "leases_of"]

logger = logging.getLogger("brain.fleet")

Scope = MutableMapping[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# `/sessions/{id}` and everything under it; `/sessions` itself (create, list) is served locally.
SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")
CLIENT_HEADER = b"brain-fleet-client"
SIGNATURE = SIGNATURE_HEADER.encode()
# While the client's socket holds this much unsent, stop reading the owner (the owner's own
# write deadline then drops a stuck stream); past the deadline the client is dropped here too.
SOCKET_HIGH_WATER = 256 * 1024
WRITE_DEADLINE_SECONDS = 15.0
CONGESTION_POLL_SECONDS = 0.01
# A forwarded answer with a Content-Length up to this size is read whole and passed on in one
# message; larger or unframed ones (streams) are passed on piece by piece as they arrive.
WHOLE_ANSWER_BYTES = 256 * 1024
# How long a forwarded request waits for its answer before a task watches for the client leaving.
WATCH_AFTER_SECONDS = 0.05
# How long a looked-up remote owner is reused, at most a tenth of the lease; bounded in size.
OWNER_CACHE_SECONDS = 1.0
OWNER_CACHE_ENTRIES = 10_000


class OwnerUnavailable(BrainError):
    """The session's owner cannot serve it now (unreachable while its lease is live, or the
    request reached an instance that is not the owner): retry in a moment, through any instance."""

    code = "unavailable"
    status = 503

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class LeaseOwnerView(Protocol):
    @property
    def instance(self) -> str: ...
    @property
    def incarnation(self) -> str: ...
    @property
    def url(self) -> str: ...


class LeaseView(Protocol):
    """What routing needs of fleet_app.leases.LeaseManager."""

    @property
    def instance(self) -> str: ...
    @property
    def incarnation(self) -> str: ...
    @property
    def lease_seconds(self) -> float: ...
    def held_epoch(self, session_id: str) -> int | None: ...
    async def owner_of(self, session_id: str) -> LeaseOwnerView | None: ...


def leases_of(brain: object) -> LeaseView | None:
    """The app object's lease manager; None without a `cluster` block (no routing at all)."""
    leases: LeaseView | None = getattr(brain, "leases", None)
    return leases


def fleet_secret_of(brain: object) -> bytes:
    """The fleet secret's key from the app object (a FleetSecret or bytes), else from its secrets."""
    secret = getattr(brain, "fleet_secret", None) or getattr(getattr(brain, "secrets", None), "fleet_secret", None)
    key = getattr(secret, "key", secret)
    if not isinstance(key, bytes) or not key:
        raise RuntimeError("the app object has leases but no fleet_secret")
    return key


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _target(scope: Scope) -> bytes:
    raw = scope.get("raw_path") or scope.get("path", "").encode()
    query = scope.get("query_string", b"")
    return bytes(raw) + (b"?" + bytes(query) if query else b"")


async def _respond(send: Send, scope: Scope, error: BrainError) -> None:
    request_id = str(scope.get("brain_request_id", ""))
    headers = [
        (b"content-type", b"application/json"),
        (b"x-request-id", request_id.encode()),
        (b"x-content-type-options", b"nosniff"),
        *((name.lower().encode(), value.encode()) for name, value in error.headers().items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": error_envelope(error, request_id)})


class _BodyTooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None when the client went away; _BodyTooLarge past `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the already-read body once, then the client's own messages."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class FleetRouter:
    """One per process: the replay guard of signed requests this instance admitted and the
    HTTP client to the other instances."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.replay = ReplayGuard()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.forwarded = 0  # requests this instance sent to an owner
        self.lookups = 0  # owner lookups in the database
        # session id -> (its remote owner, monotonic time the entry stops being used)
        self._owners: dict[str, tuple[LeaseOwnerView, float]] = {}

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = fleet_client(transport=self._transport)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def route(
        self, brain: object, leases: LeaseView, scope: Scope, receive: Receive, send: Send, *, limit: int
    ) -> Receive | None:
        """Forward or refuse the request (None: answered here), or the receive to serve it
        locally with (the body replayed when this layer had to read it)."""
        signed = _header(scope, SIGNATURE) is not None
        match = SESSION_PATH.match(scope.get("path", ""))
        remote: tuple[ExecutorLocator, str] | None = None  # an executor's route, not held here
        if not signed and match is None:
            executor = EXECUTOR_PATH.match(scope.get("path", ""))
            locator = executors_of(brain) if executor is not None else None
            if executor is None or locator is None or locator.holds(executor.group(1)):
                return receive
            remote = (locator, executor.group(1))
        if not signed and match is not None and leases.held_epoch(match.group(1)) is not None:
            return receive  # ours: the common case costs no query
        try:
            body = await _read_body(receive, limit)
        except _BodyTooLarge:
            await _respond(send, scope, PayloadTooLarge("request body exceeds the size limit"))
            return None
        if body is None:
            return None  # the client went away
        if signed and not self._admit(brain, leases, scope, body):
            await _respond(send, scope, Unauthorized("fleet request signature refused"))
            return None
        if remote is not None:
            return await self._route_executor(brain, leases, *remote, scope, receive, send, body)
        if match is None:
            return _replaying(body, receive)
        session_id = match.group(1)
        if signed and leases.held_epoch(session_id) is not None:
            return _replaying(body, receive)  # forwarded to us and ours: no lookup
        try:
            owner = await self._owner(leases, session_id)
        except Exception:  # the database: without it nobody can tell who owns the session
            logger.warning("fleet owner lookup failed", exc_info=True, extra={"session_id": session_id})
            await _respond(send, scope, OwnerUnavailable("the fleet's database is unavailable"))
            return None
        if owner is None or (owner.instance, owner.incarnation) == (leases.instance, leases.incarnation):
            return _replaying(body, receive)
        if signed:  # a second hop could loop between two instances that disagree: the first retries
            await _respond(send, scope, OwnerUnavailable("the session is moving to another instance"))
            return None
        reached = await self._forward(
            brain,
            leases,
            owner,
            scope,
            receive,
            send,
            body,
            still_owner=lambda: self._still_owner(leases, session_id, owner),
            forget=lambda: self.forget_owner(session_id),
        )
        if not reached:
            await _respond(send, scope, OwnerUnavailable("the session's instance is not answering"))
        return None

    async def _route_executor(
        self,
        brain: object,
        leases: LeaseView,
        locator: ExecutorLocator,
        executor_id: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
    ) -> Receive | None:
        """An executor's route, the executor not held here: forwarded to its holder, or served
        here when no live instance holds it (the credential is then refused here)."""
        try:
            holder = await locator.holder_of(executor_id)
        except Exception:  # Redis: without it nobody can tell which instance holds the executor
            logger.warning("fleet executor lookup failed", exc_info=True, extra={"executor": executor_id})
            await _respond(send, scope, OwnerUnavailable("the runtime executors' routes are out of reach"))
            return None
        if holder is None:
            return _replaying(body, receive)

        async def alive() -> bool | None:
            """Whether the holder is still a live member of the fleet; None when the database
            cannot tell."""
            try:
                return await locator.holder_alive(holder.instance, holder.incarnation)
            except Exception:
                logger.warning("fleet executor holder check failed", exc_info=True, extra={"executor": executor_id})
                return None

        async def still_alive() -> bool:
            return bool(await alive())

        if await self._forward(brain, leases, holder, scope, receive, send, body, still_owner=still_alive):
            return None
        if await alive() is False:  # its instance is gone, and the executor with it
            return _replaying(body, receive)
        await _respond(send, scope, OwnerUnavailable("the runtime executor's instance is not answering"))
        return None

    async def _owner(self, leases: LeaseView, session_id: str) -> LeaseOwnerView | None:
        """The session's live owner: a remote owner remembered briefly, else the database's answer."""
        now = time.monotonic()
        cached = self._owners.get(session_id)
        if cached is not None and now < cached[1]:
            return cached[0]
        self.lookups += 1
        owner = await leases.owner_of(session_id)
        if owner is None or (owner.instance, owner.incarnation) == (leases.instance, leases.incarnation):
            self._owners.pop(session_id, None)
            return owner
        if len(self._owners) >= OWNER_CACHE_ENTRIES:
            self._owners.pop(next(iter(self._owners)))
        self._owners[session_id] = (owner, now + min(OWNER_CACHE_SECONDS, leases.lease_seconds / 10))
        return owner

    def forget_owner(self, session_id: str) -> None:
        self._owners.pop(session_id, None)

    def _admit(self, brain: object, leases: LeaseView, scope: Scope, body: bytes) -> bool:
        """Verify a signed request; only on the fleet's own paths, and only its signed headers stay."""
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope.get("headers", ())}
        path = scope.get("path", "")
        try:
            if not SESSION_PATH.match(path) and not EXECUTOR_PATH.match(path):
                raise FleetAuthError("a signed request outside the fleet's paths")
            sender = verify_request(
                fleet_secret_of(brain),
                receiver=receiver_identity(leases.instance, leases.incarnation),
                method=str(scope.get("method", "")),
                target=_target(scope),
                body=body,
                headers=headers,
                now=time.time(),
                replay=self.replay,
            )
        except FleetAuthError as exc:
            logger.warning("fleet request refused", extra={"reason": exc.reason, "path": path[:200]})
            return False
        scope["headers"] = honoured_headers(headers, host=headers.get("host", ""), body=body)
        client = headers.get(CLIENT_HEADER.decode(), "")
        scope["client"] = (client, 0) if client else scope.get("client")
        scope["brain_fleet_sender"] = sender
        return True

    async def _forward(
        self,
        brain: object,
        leases: LeaseView,
        owner: LeaseOwnerView,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
        *,
        still_owner: Callable[[], Awaitable[bool]],
        forget: Callable[[], None] = lambda: None,
    ) -> bool:
        """Send the request to `owner` and stream its answer back. False when the owner could
        not be reached before its answer started (nothing was sent to the client then): the
        caller answers."""
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope.get("headers", ())}
        client = scope.get("client") or ("", 0)
        self.forwarded += 1
        telemetry = getattr(brain, "telemetry", None)
        if telemetry is not None:
            telemetry.record_fleet_forward()
        started = False
        relay = asyncio.current_task()
        disconnected = asyncio.Event()

        async def watch() -> None:  # the client going away ends the owner's response too
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()
            if relay is not None:
                relay.cancel()

        # Most answers come back within milliseconds: the watcher starts only for one that
        # takes longer (a stream, a slow owner), sparing a task per forwarded request. A client
        # that left meanwhile is seen then, its disconnect waiting in the receive queue.
        watcher: list[asyncio.Task[None]] = []
        timer = asyncio.get_running_loop().call_later(
            WATCH_AFTER_SECONDS, lambda: watcher.append(asyncio.ensure_future(watch()))
        )
        try:
            async with forward_request(
                self.client,
                secret=fleet_secret_of(brain),
                sender=leases.instance,
                owner=receiver_identity(owner.instance, owner.incarnation),
                owner_url=owner.url,
                method=str(scope.get("method", "GET")),
                target=_target(scope),
                headers=headers,
                body=body,
                client_address=str(client[0] or ""),
                still_owner=still_owner,
                recheck_seconds=min(RECHECK_SECONDS, leases.lease_seconds / 3),
            ) as answer:
                if answer.status == 503:  # the owner is draining, moving, or not the owner
                    forget()
                length = _content_length(answer.headers)
                if length is not None and length <= WHOLE_ANSWER_BYTES:
                    # an ordinary answer: read whole, passed on in one message (no stream to flush)
                    whole = b"".join([chunk async for chunk in answer.body])
                    await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
                    started = True
                    await send({"type": "http.response.body", "body": whole})
                    return True
                await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
                started = True
                # Daphne writes the head with the first body message. The owner flushes its
                # stream's head with an empty body, which no HTTP/1.1 chunk can carry here: flush
                # it now, or the client waits for the stream's first event or keep-alive.
                await send({"type": "http.response.body", "body": b"", "more_body": True})
                async for chunk in answer.body:
                    await self._write(scope, send, chunk)
                await send({"type": "http.response.body", "body": b""})
        except OwnerUnreachable as exc:
            forget()
            logger.warning("fleet owner unreachable", extra={"owner": owner.instance, "error": str(exc)})
            if not started:
                return False
        except (httpx.TransportError, TimeoutError):
            if not started:  # the answer broke before anything reached the client: the caller answers
                forget()
                return False
            # Mid-body: the response was already started, so the client must see a cut
            # connection, not a short body that looks complete; SSE clients reconnect.
            abort = scope.get("brain_abort_connection")
            if abort is not None:
                abort()
        except asyncio.CancelledError:
            if not disconnected.is_set():
                raise
        finally:
            timer.cancel()
            for task in watcher:
                task.cancel()
        return True

    async def _still_owner(self, leases: LeaseView, session_id: str, owner: LeaseOwnerView) -> bool:
        """Whether `owner` still holds the session's live lease at the epoch it was found with
        (the database asked afresh; a failed lookup cannot tell, so it says no)."""
        try:
            now = await leases.owner_of(session_id)
        except Exception:
            logger.warning("fleet owner re-check failed", exc_info=True, extra={"session_id": session_id})
            return False
        return (
            now is not None
            and now.instance == owner.instance
            and getattr(now, "epoch", None) == getattr(owner, "epoch", None)
        )

    @staticmethod
    async def _write(scope: Scope, send: Send, chunk: bytes) -> None:
        pending = scope.get("brain_pending_bytes")
        if pending is not None and pending() > SOCKET_HIGH_WATER:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WRITE_DEADLINE_SECONDS
            while pending() > SOCKET_HIGH_WATER:
                if loop.time() > deadline:
                    raise TimeoutError
                await asyncio.sleep(CONGESTION_POLL_SECONDS)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
