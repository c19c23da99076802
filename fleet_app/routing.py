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

A request goes through in two steps. First a decision (fleet_app.decision): a pure function of
what the request is, what this instance holds and what the lookups here found returns
ServeHere, ForwardTo(an instance) or Refuse(an error). Then the act: served here, refused with
the error's envelope, or signed (fleet_app.signing) and handed to the forwarder
(fleet_app.forwarding), which sends it on the fleet's transport (fleet_app.transport); each
module is passed once, in that order.

Nothing here runs without a `cluster` block: the solo stand-in of fleet_app.fleet serves every
request where it lands. No Django; the lease manager comes from the fleet, the token cache, the
executor relay, the limits, the telemetry and the secret from the app object through its typed
view (fleet_app.app_object).
"""

from __future__ import annotations

import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from foundation.asgi import Receive, Scope, Send
from foundation.errors import BrainError, Unavailable

from .app_object import RoutedAppObject, fleet_key
from .decision import (
    CONSOLE_PATH,
    NOTHING_FOUND,
    SESSION_PATH,
    ForwardTo,
    Found,
    Here,
    Refuse,
    Request,
    ServeHere,
    decide,
    needs_lookup,
    needs_successor,
    read_request,
)
from .executor_routes import EXECUTOR_PATH, ExecutorLocator, holder_alive, still_held
from .forwarding import RECHECK_SECONDS, Forwarder
from .gate import authenticate_caller
from .handoff import Successors
from .messages import read_body, replaying, respond
from .owners import LeaseView, OwnerCache
from .signing import (
    CLIENT_HEADER,
    FleetAuthError,
    ReplayGuard,
    honoured_headers,
    receiver_identity,
    sign_forwarded,
    verify_request,
)
from .streams import ShareKey, StreamShares
from .transport import FleetTransport

__all__ = ["FleetRouter"]

logger = logging.getLogger("brain.fleet")


@dataclass(frozen=True, slots=True)
class Forward:
    """How the forwarder treats one ForwardTo: what it asks while the answer has not started,
    what it forgets on a 503, and what takes a stream's share once the answer names a tenant."""

    still_owner: Callable[[], Awaitable[bool]]
    forget: Callable[[], None]
    admit: Callable[[str], Callable[[], None]] | None


# The forwarded streams of the admin's live transcripts count as one caller's share.
CONSOLE_CALLER: ShareKey = ("console", "")


def _target(scope: Scope) -> bytes:
    raw = scope.get("raw_path") or scope.get("path", "").encode()
    query = scope.get("query_string", b"")
    return bytes(raw) + (b"?" + bytes(query) if query else b"")


def _nothing() -> None:
    """The release of a request that took no share, the forgetting of a peer not remembered."""


class FleetRouter:
    """One per process: the replay guard of signed requests this instance admitted, the owners
    it remembers, the forwarded streams' shares, and the forwarder with its connections."""

    def __init__(self, *, transport: FleetTransport | None = None) -> None:
        self.replay = ReplayGuard()
        self.forwarder = Forwarder(transport)
        self.forwarded = 0  # requests this instance sent to another
        self.owners = OwnerCache()
        self.successors = Successors()  # while draining: who takes a session released here
        self.streams = StreamShares()  # forwarded streams open, per tenant

    @property
    def lookups(self) -> int:
        """Owner lookups this instance ran in the database."""
        return self.owners.lookups

    async def aclose(self) -> None:
        await self.forwarder.aclose()

    async def route(
        self, brain: RoutedAppObject, leases: LeaseView, scope: Scope, receive: Receive, send: Send, *, limit: int
    ) -> Receive | None:
        """The receive to serve the request here with (its body replayed when routing read it),
        or None when routing answered it: forwarded, or refused."""
        locator = brain.relay
        request = read_request(scope, executors=locator is not None)
        if not request.signed and not needs_lookup(request, self._here(leases, locator, request)):
            return receive  # ours, or not the fleet's: the common case reads nothing, asks nothing
        caller: ShareKey = ("", "")
        try:
            if request.console:  # the admin's: the owner checks its session cookie; its streams share one bucket
                caller = CONSOLE_CALLER
            elif request.route == "session" and not request.signed:  # the owner's own 401 here, before any lookup
                caller = await authenticate_caller(brain.tokens, scope, request.key, key=fleet_key(brain))
            body = await read_body(receive, limit)
            if body is not None and request.signed:
                self._verify(leases, scope, body, key=fleet_key(brain))
        except BrainError as error:
            await respond(send, scope, error)
            return None
        if body is None:
            return None  # the client went away
        here = self._here(leases, locator, request)
        found = await self._look_up(leases, locator, request, here) if needs_lookup(request, here) else NOTHING_FOUND
        decision = decide(request, here, found)
        if isinstance(decision, ServeHere):
            return replaying(body, receive)
        if isinstance(decision, Refuse):
            await respond(send, scope, decision.error)
            return None
        return await self._forward(brain, leases, locator, request, decision, caller, scope, receive, send, body)

    @staticmethod
    def _here(leases: LeaseView, locator: ExecutorLocator | None, request: Request) -> Here:
        if request.route == "session":
            holds = leases.held_epoch(request.key) is not None
        else:
            holds = request.route == "executor" and locator is not None and locator.holds(request.key)
        return Here(leases.instance, leases.incarnation, leases.draining, holds)

    def _verify(self, leases: LeaseView, scope: Scope, body: bytes, *, key: bytes) -> None:
        """Verify a signed request (FleetAuthError, logged); only on the fleet's own paths, and
        only its signed headers stay."""
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}
        path = scope.get("path", "")
        try:
            if not SESSION_PATH.match(path) and not EXECUTOR_PATH.match(path) and not CONSOLE_PATH.match(path):
                raise FleetAuthError("a signed request outside the fleet's paths")
            sender = verify_request(
                key,
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
            raise
        scope["headers"] = honoured_headers(headers, host=headers.get("host", ""), body=body)
        client = headers.get(CLIENT_HEADER, "")
        scope["client"] = (client, 0) if client else scope.get("client")
        scope["brain_fleet_sender"] = sender

    async def _look_up(self, leases: LeaseView, locator: ExecutorLocator | None, request: Request, here: Here) -> Found:
        """Who owns the request's session (and, draining, who takes it) or holds its executor."""
        if request.route == "executor" and locator is not None:
            try:
                return Found(await locator.holder_of(request.key))
            except Exception:  # Redis: without it nobody can tell which instance holds the executor
                logger.warning("fleet executor lookup failed", exc_info=True, extra={"executor": request.key})
                return Found(error=Unavailable("the runtime executors' routes are out of reach"))
        try:
            owner = await self.owners.owner(leases, request.key)
        except BrainError as error:  # too many lookups in flight
            return Found(error=error)
        except Exception:  # the database: without it nobody can tell who owns the session
            logger.warning("fleet owner lookup failed", exc_info=True, extra={"session_id": request.key})
            return Found(error=Unavailable("the fleet's database is unavailable"))
        if needs_successor(request, here, owner):
            return Found(owner, await self.successors.pick(leases, request.key))
        return Found(owner)

    def _how(
        self,
        brain: RoutedAppObject,
        leases: LeaseView,
        locator: ExecutorLocator | None,
        request: Request,
        to: ForwardTo,
    ) -> Forward:
        peer, key = to.peer, request.key
        if to.role == "holder" and locator is not None:
            admit = (
                self.streams.admit_executor(key, share=brain.config.limits.tenant_forwarded_streams)
                if request.stream
                else None
            )
            return Forward(functools.partial(still_held, locator, peer), _nothing, admit)
        if to.role == "successor":
            return Forward(functools.partial(self.successors.still_free_or_taken_by, leases, key, peer), _nothing, None)
        return Forward(
            functools.partial(self.owners.still_owner, leases, key, peer),
            functools.partial(self.owners.forget, key),
            None,
        )

    async def _forward(
        self,
        brain: RoutedAppObject,
        leases: LeaseView,
        locator: ExecutorLocator | None,
        request: Request,
        to: ForwardTo,
        caller: ShareKey,
        scope: Scope,
        receive: Receive,
        send: Send,
        body: bytes,
    ) -> Receive | None:
        """Sign the request for `to.peer` and hand it to the forwarder; a session's stream takes
        its tenant's share first. An executor whose holder is gone is served here after all."""
        release = _nothing
        if to.role == "owner" and request.stream:
            try:  # a stream's share is taken before it takes a connection
                release = self.streams.take(caller, share=brain.config.limits.tenant_forwarded_streams)
            except BrainError as error:
                await respond(send, scope, error)
                return None
        how = self._how(brain, leases, locator, request, to)
        client = scope.get("client") or ("", 0)
        signed = sign_forwarded(
            fleet_key(brain),
            sender=leases.instance,
            receiver=receiver_identity(to.peer.instance, to.peer.incarnation),
            url=to.peer.url,
            method=str(scope.get("method", "GET")),
            target=_target(scope),
            headers={name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())},
            cookies=request.console,  # only the admin's console routes need the cookies
            body=body,
            client_address=str(client[0] or ""),
            now=time.time(),
            nonce=secrets.token_hex(16),
        )
        self.forwarded += 1
        brain.telemetry.record_fleet_forward()
        try:
            reached = await self.forwarder.forward(
                signed,
                scope,
                receive,
                send,
                still_owner=how.still_owner,
                recheck_seconds=min(RECHECK_SECONDS, leases.lease_seconds / 3),
                forget=how.forget,
                stream=request.stream,
                admit=how.admit,
            )
        finally:
            release()
        if reached:
            return None
        if to.role == "holder" and locator is not None and await holder_alive(locator, to.peer) is False:
            return replaying(body, receive)  # its instance is gone, and the executor with it
        await respond(send, scope, to.unreachable)
        return None
