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

Before any owner lookup the request's bearer token is checked as the owner would check it
(fleet_app.gate): a bad one gets the owner's 401 here, at no database cost. A forwarded stream
(fleet_app.streams) travels on a pool of its own and counts in its tenant's share; past the
share it is 429 before it takes a connection.

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
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

import httpx

from foundation.errors import BrainError, PayloadTooLarge, Unauthorized

from .executor_routes import EXECUTOR_PATH, ExecutorLocator, executors_of
from .forwarding import RECHECK_SECONDS, OwnerUnreachable, fleet_client, forward_request
from .gate import authenticate_caller, bearer_check_of
from .handoff import Successors
from .messages import (
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    content_length,
    read_body,
    replaying,
    respond,
    write_piece,
)
from .owners import LeaseOwnerView, LeaseView, OwnerCache, OwnerUnavailable
from .signing import SIGNATURE_HEADER, FleetAuthError, ReplayGuard, honoured_headers, receiver_identity, verify_request
from .streams import StreamShares, opens_stream, stream_share_of

__all__ = ["FleetRouter", "OwnerUnavailable", "fleet_secret_of", "leases_of"]

logger = logging.getLogger("brain.fleet")

# `/sessions/{id}` and everything under it; `/sessions` itself (create, list) is served locally.
SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/|$)")
CLIENT_HEADER = b"brain-fleet-client"
SIGNATURE = SIGNATURE_HEADER.encode()
# A forwarded answer with a Content-Length up to this size is read whole and passed on in one
# message; larger or unframed ones (streams) are passed on piece by piece as they arrive.
WHOLE_ANSWER_BYTES = 256 * 1024
# How long a forwarded request waits for its answer before a task watches for the client leaving.
WATCH_AFTER_SECONDS = 0.05


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


def _target(scope: Scope) -> bytes:
    raw = scope.get("raw_path") or scope.get("path", "").encode()
    query = scope.get("query_string", b"")
    return bytes(raw) + (b"?" + bytes(query) if query else b"")


class FleetRouter:
    """One per process: the replay guard of signed requests this instance admitted and the
    HTTP client to the other instances."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.replay = ReplayGuard()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.forwarded = 0  # requests this instance sent to an owner
        self.owners = OwnerCache()
        self.successors = Successors()  # while draining: who takes a session released here
        self.streams = StreamShares()  # forwarded streams open, per tenant

    @property
    def lookups(self) -> int:
        """Owner lookups this instance ran in the database."""
        return self.owners.lookups

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
        caller = ("", "")
        if not signed and match is not None:  # the owner's own 401 here, before any lookup
            try:
                caller = await authenticate_caller(
                    bearer_check_of(brain), scope, match.group(1), key=fleet_secret_of(brain)
                )
            except BrainError as error:
                await respond(send, scope, error)
                return None
        try:
            body = await read_body(receive, limit)
        except BodyTooLarge:
            await respond(send, scope, PayloadTooLarge("request body exceeds the size limit"))
            return None
        if body is None:
            return None  # the client went away
        if signed and not self._admit(brain, leases, scope, body):
            await respond(send, scope, Unauthorized("fleet request signature refused"))
            return None
        if remote is not None:
            return await self._route_executor(brain, leases, *remote, scope, receive, send, body)
        if match is None:
            return replaying(body, receive)
        session_id = match.group(1)
        if signed and leases.held_epoch(session_id) is not None:
            return replaying(body, receive)  # forwarded to us and ours: no lookup
        try:
            owner = await self.owners.owner(leases, session_id)
        except OwnerUnavailable as error:
            await respond(send, scope, error)
            return None
        except Exception:  # the database: without it nobody can tell who owns the session
            logger.warning("fleet owner lookup failed", exc_info=True, extra={"session_id": session_id})
            await respond(send, scope, OwnerUnavailable("the fleet's database is unavailable"))
            return None
        if owner is None or (owner.instance, owner.incarnation) == (leases.instance, leases.incarnation):
            if not leases.draining:
                return replaying(body, receive)
            # draining: a session given up here is never taken again here; a free one goes to an
            # instance that stays, one still lapsing here waits (retry) until it expires
            successor = await self.successors.pick(leases, session_id) if owner is None and not signed else None
            if successor is None or not await self._forward(
                brain,
                leases,
                successor,
                scope,
                receive,
                send,
                body,
                still_owner=lambda: self.successors.still_free_or_taken_by(leases, session_id, successor),
                stream=opens_stream(scope),
            ):
                await respond(send, scope, OwnerUnavailable("the session is moving to another instance"))
            return None
        if signed:  # a second hop could loop between two instances that disagree: the first retries
            await respond(send, scope, OwnerUnavailable("the session is moving to another instance"))
            return None
        stream = opens_stream(scope)
        try:  # a stream's share is taken before it takes a connection
            release = self.streams.take(caller, share=stream_share_of(brain)) if stream else _nothing
        except BrainError as error:
            await respond(send, scope, error)
            return None
        try:
            reached = await self._forward(
                brain,
                leases,
                owner,
                scope,
                receive,
                send,
                body,
                still_owner=lambda: self.owners.still_owner(leases, session_id, owner),
                forget=lambda: self.owners.forget(session_id),
                stream=stream,
            )
        finally:
            release()
        if not reached:
            await respond(send, scope, OwnerUnavailable("the session's instance is not answering"))
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
            await respond(send, scope, OwnerUnavailable("the runtime executors' routes are out of reach"))
            return None
        if holder is None:
            return replaying(body, receive)

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

        def admit(tenant: str) -> Callable[[], None]:
            """The holder named the executor's tenant (it checked the credential): its share;
            a holder that named none, the executor's own."""
            key = ("tenant", unquote(tenant)) if tenant else ("executor", executor_id)
            return self.streams.take(key, share=stream_share_of(brain))

        stream = opens_stream(scope)
        forwarded = await self._forward(
            brain, leases, holder, scope, receive, send, body, still_owner=still_alive, stream=stream,
            admit=admit if stream else None,
        )  # fmt: skip
        if forwarded:
            return None
        if await alive() is False:  # its instance is gone, and the executor with it
            return replaying(body, receive)
        await respond(send, scope, OwnerUnavailable("the runtime executor's instance is not answering"))
        return None

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
        stream: bool = False,
        admit: Callable[[str], Callable[[], None]] | None = None,
    ) -> bool:
        """Send the request to `owner` (a `stream` on the stream pool) and stream its answer
        back. With `admit`, a 200 answer is passed on only when admit(the tenant the owner
        named) does not raise; its release is called when the answer ends. False when the owner
        could not be reached before its answer started (nothing was sent to the client then):
        the caller answers."""
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope.get("headers", ())}
        client = scope.get("client") or ("", 0)
        self.forwarded += 1
        telemetry = getattr(brain, "telemetry", None)
        if telemetry is not None:
            telemetry.record_fleet_forward()
        started = False
        release = _nothing
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
                stream=stream,
            ) as answer:
                if answer.status == 503:  # the owner is draining, moving, or not the owner
                    forget()
                if admit is not None and answer.status == 200:
                    try:
                        release = admit(answer.tenant)
                    except BrainError as error:  # leaving the block closes the owner's stream
                        started = True
                        await respond(send, scope, error)
                        return True
                length = content_length(answer.headers)
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
                    await write_piece(scope, send, chunk)
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
            release()
            timer.cancel()
            for task in watcher:
                task.cancel()
        return True


def _nothing() -> None:
    """The release of a request that took no share."""
