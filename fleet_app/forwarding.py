"""The forwarder: a request routing sent elsewhere and signing signed, sent to that instance and
its answer streamed back to the client byte for byte as it arrives (SSE cursors and
Last-Event-ID work unchanged).

The fleet's own transport (fleet_app.transport) carries it on kept-alive HTTP/1.1 connections,
ordinary requests and streams on pools of their own. Until the answer starts the forwarder asks
whether the instance still owns the session (a paused owner accepts connections and never
answers); a client that goes away closes the owner's stream too; a client too slow to read
holds the owner's stream back (foundation.streaming's wait). No Django.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from foundation.asgi import Receive, Scope, Send
from foundation.errors import BrainError, Unavailable
from foundation.streaming import wait_for_room

from .messages import content_length, respond
from .signing import SignedRequest
from .streams import TENANT_HEADER
from .transport import MAX_CONNECTIONS, MAX_STREAM_CONNECTIONS, Abandoned, FleetTransport, Patience

__all__ = ["RECHECK_SECONDS", "Forwarded", "Forwarder", "OwnerUnreachable", "exchange"]

logger = logging.getLogger("brain.fleet")

# Until the owner's answer starts (its status line), the forwarding instance checks this often
# that the owner still holds the lease: a paused owner (SIGSTOP, a long GC) accepts connections
# and never answers, and its lease lapses; then the client gets a retryable 503 at once instead
# of waiting READ_SECONDS. A started answer (a stream) keeps READ_SECONDS between reads.
RECHECK_SECONDS = 2.0
# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are not passed on; date and
# server are the forwarding instance's own.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"date",
        b"server",
    }
)
# A forwarded answer with a Content-Length up to this size is read whole and passed on in one
# message; larger or unframed ones (streams) are passed on piece by piece as they arrive.
WHOLE_ANSWER_BYTES = 256 * 1024
# How long a forwarded request waits for its answer before a task watches for the client leaving.
WATCH_AFTER_SECONDS = 0.05


class OwnerUnreachable(Unavailable):
    """The owner did not answer. `reached` says whether the request may have arrived (then a
    send may have been accepted: the client's idempotency key settles it on a retry)."""

    def __init__(self, message: str, *, reached: bool) -> None:
        super().__init__(message)
        self.reached = reached


@dataclass(frozen=True, slots=True)
class Forwarded:
    status: int
    headers: list[tuple[bytes, bytes]]  # the owner's, minus hop-by-hop ones, as ASGI wants them
    body: AsyncIterator[bytes]  # the owner's body bytes, each chunk as soon as it arrives
    tenant: str = ""  # an executor command stream's tenant, as its holder named it (TENANT_HEADER)


def _response_headers(raw: list[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], str]:
    """The headers to pass on, and the tenant the owner named in TENANT_HEADER (taken out)."""
    lowered = [(name.lower(), value) for name, value in raw]
    tenant = next((value.decode("latin-1") for name, value in lowered if name == TENANT_HEADER), "")
    named = {
        token.strip().lower()
        for name, value in lowered
        if name == b"connection"
        for token in value.split(b",")
        if token.strip()
    }
    passed = [
        (name, value)
        for name, value in lowered
        if name not in HOP_BY_HOP and name not in named and name != TENANT_HEADER
    ]
    return passed, tenant


@asynccontextmanager
async def exchange(
    transport: FleetTransport,
    request: SignedRequest,
    *,
    still_owner: Callable[[], Awaitable[bool]] | None = None,
    recheck_seconds: float = RECHECK_SECONDS,
) -> AsyncIterator[Forwarded]:
    """Send `request` on `transport`; yield the answer's status, headers and body stream. The
    answer is closed when the block exits, so a client that goes away closes the owner's
    stream too. OwnerUnreachable before an answer (also when `still_owner`, asked every
    `recheck_seconds` while the answer has not started, says the owner lost the session);
    httpx.TransportError mid-body."""
    patience = Patience(recheck_seconds, still_owner) if still_owner is not None else None
    owner = request.receiver
    try:
        answer = await transport.request(
            request.url, request.method, request.target, request.headers, request.body, patience=patience
        )
    except Abandoned as exc:
        raise OwnerUnreachable(f"owner {owner} lost the session while not answering", reached=True) from exc
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise OwnerUnreachable(f"owner {owner} unreachable: {type(exc).__name__}", reached=False) from exc
    except httpx.TransportError as exc:
        raise OwnerUnreachable(f"owner {owner} did not answer: {type(exc).__name__}", reached=True) from exc
    try:
        passed, tenant = _response_headers(answer.headers)
        yield Forwarded(answer.status, passed, aiter(answer.body), tenant)
    finally:
        await answer.body.aclose()


def _nothing() -> None:
    """Nothing to forget."""


class Forwarder:
    """One per process (the router's): the connections to the other instances, ordinary
    requests and streams on pools of their own, so no number of streams leaves an ordinary
    request without one."""

    def __init__(self, transport: FleetTransport | None = None) -> None:
        self.transport = transport or FleetTransport(max_connections=MAX_CONNECTIONS)
        self.stream_transport = FleetTransport(max_connections=MAX_STREAM_CONNECTIONS)

    async def aclose(self) -> None:
        await self.stream_transport.aclose()
        await self.transport.aclose()

    async def forward(
        self,
        request: SignedRequest,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        still_owner: Callable[[], Awaitable[bool]],
        recheck_seconds: float,
        forget: Callable[[], None] = _nothing,
        stream: bool = False,
        admit: Callable[[str], Callable[[], None]] | None = None,
    ) -> bool:
        """Send `request` (a `stream` on the stream pool) and stream its answer back. With
        `admit`, a 200 answer is passed on only when admit(the tenant the owner named) does not
        raise; its release is called when the answer ends. False when the owner could not be
        reached before its answer started (nothing was sent to the client then): the caller
        answers."""
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
        transport = self.stream_transport if stream else self.transport
        try:
            async with exchange(transport, request, still_owner=still_owner, recheck_seconds=recheck_seconds) as answer:
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
                    await wait_for_room(scope)  # a client with no room: the owner is not read on
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except OwnerUnreachable as exc:
            forget()
            logger.warning("fleet owner unreachable", extra={"owner": request.receiver, "error": str(exc)})
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
