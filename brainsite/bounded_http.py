"""Daphne's HTTP/1.1 connections with request bodies bounded as their bytes arrive: a size cap
(Content-Length refused at once, every chunk counted) and a total deadline from a request's first
byte to the end of its body, both enforced before Twisted buffers the body in memory or on disk.
The factory also knows its open connections for a graceful stop (brainsite.drain): while
draining every answer says `Connection: close`; once the listener closed, idle connections are
closed and event streams end at their next event boundary. Used by runbrain after daphne.server
has installed Twisted's reactor; knows nothing of sessions.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Protocol, cast

from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from daphne.utils import INVALID_HEADER_VALUE_BYTES
from twisted.internet import defer
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IAddress
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure
from twisted.web import http

from brainsite.upload_limits import request_body_limit
from foundation.errors import BrainError, InvalidRequest, Overloaded, PayloadTooLarge, Unauthorized, error_envelope
from foundation.logs import logger

__all__ = [
    "BODY_DEADLINE_ENV",
    "BODY_DEADLINE_SECONDS",
    "RECEIVING_PER_ADDRESS",
    "BoundedBodyServer",
    "body_deadline_from_environment",
]

# spec: a slow-drip client is cut off by a total deadline, not only by Twisted's idle timer (which
# any byte resets); 30 s carries the largest body (input_bytes + 16 KiB) over a ~40 KB/s link
BODY_DEADLINE_SECONDS = 30.0
BODY_DEADLINE_ENV = "BRAIN_BODY_DEADLINE_SECONDS"
# After a refusal the connection reads nothing more: the client's further bytes wait in the
# kernel's bounded socket buffer. It gets this long to read the answer before the reset.
REFUSAL_LINGER_SECONDS = 2.0
TOO_LARGE_MESSAGE = "request body exceeds the size limit"  # the ASGI layer's words for the same 413
# Requests from one client address still arriving (headers or body) at once: each holds a socket
# and up to a body in memory for as long as the deadline, so one address dripping bytes on many
# connections is refused (429) past this many; limits.receiving_per_address sets it per server.
RECEIVING_PER_ADDRESS = 32
# A stream's bytes end on an event boundary after a blank line (SSE); the last few bytes tell.
EVENT_ENDS = (b"\n\n", b"\r\n\r\n")
TAIL_BYTES = 4


class _TCPTransport(Protocol):
    """What a channel uses of its TCP transport, which is also the push producer of its reads."""

    def writeSequence(self, data: list[bytes]) -> None: ...

    def unregisterProducer(self) -> None: ...

    def pauseProducing(self) -> None: ...

    def loseWriteConnection(self) -> None: ...

    def loseConnection(self) -> None: ...

    def abortConnection(self) -> None: ...

    def getPeer(self) -> IAddress: ...


def body_deadline_from_environment(environ: Mapping[str, str]) -> float:
    """BRAIN_BODY_DEADLINE_SECONDS (a positive number of seconds), or the default; ValueError else."""
    raw = environ.get(BODY_DEADLINE_ENV, "")
    if not raw:
        return BODY_DEADLINE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{BODY_DEADLINE_ENV} must be a positive number of seconds, not {raw!r}")
    return seconds


class BoundedWebRequest(WebRequest):  # type: ignore[misc]  # daphne ships no type hints
    """Daphne's request, counting its body as Twisted's decoders deliver it (identity or chunked)."""

    def __init__(self, channel: BoundedHTTPChannel, *args: object, **kwargs: object) -> None:
        super().__init__(channel, *args, **kwargs)
        self.body_limit: int = channel.body_limit  # this request's (upload_limits), once its headers are in
        self.body_room: int = channel.body_limit  # bytes the body may still bring; < 0: refused
        self.tail = b""  # the answer's last bytes written: whether a stream stands on an event boundary

    def handle_reply(self, message: dict[str, object]) -> None:
        """Daphne's, plus the drain: a head written while the server drains says `Connection:
        close` (the client reconnects, through its balancer, to an instance that stays); once the
        listener closed, an event stream ends cleanly at its next event boundary."""
        channel = self.channel
        if channel is None or self.finished or message.get("type") != "http.response.body":
            super().handle_reply(message)
            return
        drain = channel.factory
        if drain.draining and not self.startedWriting:
            self.responseHeaders.setRawHeaders(b"connection", [b"close"])
            channel.persistent = False
        body = message.get("body", b"")
        if isinstance(body, bytes) and body:
            self.tail = (self.tail + body)[-TAIL_BYTES:]
        super().handle_reply(message)
        if drain.closing:
            self.end_stream_at_boundary()

    def end_stream_at_boundary(self) -> None:
        """End an event stream now if its last event is complete (the application is told the
        client left); one in the middle of an event ends after it."""
        channel = self.channel
        if channel is None or self.finished or not self.startedWriting:
            return
        kind = self.responseHeaders.getRawHeaders(b"content-type") or [b""]
        if not kind[0].startswith(b"text/event-stream") or not (self.tail == b"" or self.tail.endswith(EVENT_ENDS)):
            return
        channel.persistent = False  # the connection closes once the stream's last chunk is out
        self.finish()

    def basic_error(self, status: int, status_text: bytes, body: str) -> None:
        """Daphne's own refusals (an invalid header name or value, a processing error) in the
        spec's error envelope with a request id, instead of its HTML page. A bearer token
        holding a byte Daphne refuses in any header value is simply an invalid token (401)."""
        error: BrainError
        if status == 400 and _authorization_refused(self):
            error = Unauthorized("missing or invalid bearer token")
        elif status < 500:
            error = InvalidRequest(body)
        else:
            error = BrainError(body)
        request_id = secrets.token_hex(16)
        headers = [
            (b"content-type", b"application/json"),
            (b"x-request-id", request_id.encode()),
            (b"x-content-type-options", b"nosniff"),
            *((name.lower().encode(), value.encode()) for name, value in error.headers().items()),
        ]
        answer = error.status if isinstance(error, Unauthorized) else status
        self.handle_reply({"type": "http.response.start", "status": answer, "headers": headers})
        self.handle_reply({"type": "http.response.body", "body": error_envelope(error, request_id)})

    def gotLength(self, length: int | None) -> None:
        # every header is in: a signed-in admin's knowledge upload may bring one document
        self.body_limit = self.body_room = self.channel.body_limit_for(self)
        if length is not None and length > self.body_room:
            # no temporary file, and no "100 Continue" inviting the body after the answer
            self.requestHeaders.removeHeader(b"Expect")
            self.body_room = -1
            self.channel.refuse_oversized(declared=length)
            return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:
        # the hot path: one subtraction and one comparison per chunk
        self.body_room -= len(data)
        if self.body_room >= 0:
            self.content.write(data)
        elif not self.channel.refusing:
            self.content.close()  # frees the temporary file now, not when the connection ends
            self.channel.refuse_oversized(received=self.body_limit - self.body_room)

    def received_bytes(self) -> int:
        return int(self.body_limit - self.body_room)


class BoundedHTTPChannel(http.HTTPChannel):
    """One HTTP/1.1 connection. Each request must arrive whole, from its first byte to the end of
    its body, within the deadline; a refused request gets its answer and then the connection reads
    nothing more (half-closed at once, reset after REFUSAL_LINGER_SECONDS)."""

    factory: BoundedHTTPFactory
    body_limit: int
    body_deadline_seconds: float
    receiving: dict[str, int]  # the factory's: requests still arriving, per client address
    receiving_per_address: int
    _receiving_from: str | None = None  # the address this connection's arriving request counts for
    refusing = False  # an answer went out early: the rest of the connection's bytes are dropped
    _responding = False  # a whole request is with the application (no deadline runs)
    _deadline: DelayedCall | None = None
    _linger: DelayedCall | None = None
    _request_started = 0.0

    def dataReceived(self, data: bytes) -> None:
        if self.refusing:
            return
        if self._deadline is None and not self._responding:
            self._request_started = time.monotonic()
            if not self._start_receiving():
                return
            self._deadline = self._call_later(self.body_deadline_seconds, self._refuse_overdue)
        super().dataReceived(data)  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated

    def allContentReceived(self) -> None:
        if self.refusing:
            return  # the body's end was already in the buffer when the answer went out
        self._cancel_deadline()
        self._responding = True
        super().allContentReceived()  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated

    def requestDone(self, request: http.Request) -> None:
        # before Twisted replays bytes that came during the response: they start the next deadline
        self._responding = False
        super().requestDone(request)  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_deadline()
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self.factory.channels.discard(self)
        super().connectionLost(reason)  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated

    @property
    def in_flight(self) -> bool:
        """A request is arriving or being answered on this connection (a refused one lingering
        for its reset is not)."""
        return not self.refusing and (bool(self.requests) or self._deadline is not None)

    def close_for_drain(self) -> None:
        """The listener closed: an idle keep-alive connection closes now; a stream in progress
        ends at its next event boundary; any other answer finishes (with `Connection: close`)."""
        if not self.in_flight:
            if not self.refusing:
                cast(_TCPTransport, self.transport).loseConnection()
            return
        for request in list(self.requests):
            if isinstance(request, BoundedWebRequest):
                request.end_stream_at_boundary()

    def body_limit_for(self, request: BoundedWebRequest) -> int:
        """The body limit of the request whose headers just arrived (Twisted parsed its request
        line into this channel)."""
        cookies = request.requestHeaders.getRawHeaders(b"cookie") or []
        method: bytes = self._command
        target = cast(bytes, self._path)  # bytes: Twisted's annotation names another attribute's type
        return request_body_limit(method, target, cookies, default=self.body_limit)

    def _start_receiving(self) -> bool:
        """Count the request now arriving against its address; at the cap refuse it (429)."""
        address = self._peer().rpartition(":")[0]
        arriving = self.receiving.get(address, 0)
        if arriving >= self.receiving_per_address:
            logger.warning(
                "too many requests arriving from one address",
                extra={"client": self._peer(), "limit": self.receiving_per_address},
            )
            message = f"too many requests from this address are still arriving (at most {self.receiving_per_address})"
            self._refuse(Overloaded(message), status=429, reason=b"Too Many Requests")
            return False
        self.receiving[address] = arriving + 1
        self._receiving_from = address
        return True

    def _stop_receiving(self) -> None:
        address, self._receiving_from = self._receiving_from, None
        if address is None:
            return
        arriving = self.receiving.get(address, 0) - 1
        if arriving > 0:
            self.receiving[address] = arriving
        else:
            self.receiving.pop(address, None)

    def refuse_oversized(self, **sizes: int) -> None:
        logger.warning(
            "request body over the size limit",
            extra={"client": self._peer(), "limit": self.body_limit, **sizes, "seconds": self._elapsed()},
        )
        self._refuse(PayloadTooLarge(TOO_LARGE_MESSAGE), status=413, reason=b"Payload Too Large")

    def _refuse_overdue(self) -> None:
        self._deadline = None
        request = self.requests[-1] if self.requests else None
        logger.warning(
            "request not received within the body deadline",
            extra={
                "client": self._peer(),
                "deadline_seconds": self.body_deadline_seconds,
                "body_bytes": request.received_bytes() if isinstance(request, BoundedWebRequest) else 0,
            },
        )
        message = f"request not received within {self.body_deadline_seconds:g} s"
        self._refuse(InvalidRequest(message), status=408, reason=b"Request Timeout")

    def _refuse(self, error: BrainError, *, status: int, reason: bytes) -> None:
        """Answer with the spec's error envelope, then read nothing more and close."""
        self.refusing = True
        self._cancel_deadline()
        self.setTimeout(None)  # type: ignore[no-untyped-call]  # Twisted leaves it unannotated
        request_id = secrets.token_hex(16)
        body = error_envelope(error, request_id)
        head = (
            b"HTTP/1.1 %d %s\r\n" % (status, reason),
            b"Content-Type: application/json\r\n",
            b"Content-Length: %d\r\n" % len(body),
            b"Connection: close\r\n",
            b"X-Request-Id: %s\r\n" % request_id.encode(),
            b"X-Content-Type-Options: nosniff\r\n",
            *(b"%s: %s\r\n" % (name.encode(), value.encode()) for name, value in error.headers().items()),
            b"Server: %s\r\n" % self.factory.server.server_name.encode(),
            b"\r\n",
        )
        transport = cast(_TCPTransport, self.transport)
        transport.writeSequence([*head, body])
        transport.unregisterProducer()  # a drained write buffer must not resume our reads
        transport.pauseProducing()
        transport.loseWriteConnection()  # FIN once the answer is flushed
        self._linger = self._call_later(REFUSAL_LINGER_SECONDS, transport.abortConnection)

    def _cancel_deadline(self) -> None:
        self._stop_receiving()  # the deadline runs exactly while a request is arriving
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None

    def _call_later(self, seconds: float, action: Callable[[], object]) -> DelayedCall:
        # the factory's reactor (HTTPFactory sets callLater on each channel)
        delayed: DelayedCall = self.callLater(seconds, action)  # type: ignore[no-untyped-call]  # unannotated
        return delayed

    def _elapsed(self) -> float:
        return round(time.monotonic() - self._request_started, 3)

    def _peer(self) -> str:
        transport = cast(_TCPTransport | None, self.transport)
        peer = transport.getPeer() if transport is not None else None
        host, port = getattr(peer, "host", "?"), getattr(peer, "port", "?")
        return f"{host}:{port}"


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]  # daphne ships no type hints
    """Daphne's HTTPFactory building bounded channels and requests. HTTP/1.1 only: the channel is
    served without Twisted's generic wrapper, whose one job is switching to HTTP/2 after ALPN."""

    protocol = BoundedHTTPChannel

    def __init__(
        self,
        server: Server,
        *,
        body_limit: int,
        body_deadline_seconds: float,
        receiving_per_address: int = RECEIVING_PER_ADDRESS,
    ) -> None:
        super().__init__(server)
        self.body_limit = body_limit
        self.body_deadline_seconds = body_deadline_seconds
        self.receiving_per_address = receiving_per_address
        self.receiving: dict[str, int] = {}
        self.channels: set[BoundedHTTPChannel] = set()  # open connections, for the drain
        self.draining = False  # a graceful stop began: every answer says `Connection: close`
        self.closing = False  # the listener closed: idle connections close, streams end

    def begin_draining(self) -> None:
        self.draining = True

    def close_connections(self) -> None:
        """After the listener closed: close idle connections, end streams at an event boundary."""
        self.draining = self.closing = True
        for channel in list(self.channels):
            channel.close_for_drain()

    def in_flight(self) -> int:
        """Connections with a request arriving or being answered."""
        return sum(1 for channel in self.channels if channel.in_flight)

    def buildProtocol(self, addr: IAddress) -> BoundedHTTPChannel:
        channel: BoundedHTTPChannel = super().buildProtocol(addr)
        self.channels.add(channel)
        channel.requestFactory = BoundedWebRequest  # type: ignore[assignment]  # a Request; daphne's is untyped
        channel.body_limit = self.body_limit
        channel.body_deadline_seconds = self.body_deadline_seconds
        channel.receiving = self.receiving
        channel.receiving_per_address = self.receiving_per_address
        return channel

    def acceptableProtocols(self) -> list[bytes]:
        return [b"http/1.1"]

    def log(self, request: http.Request) -> None:
        """Twisted's own access line goes to Twisted's log, which Daphne sends nowhere (or to
        its logger, held at WARNING): formatting one per request cost CPU for nothing. Requests
        are counted and timed by the ASGI layer's metrics instead."""


class BoundedBodyServer(Server):  # type: ignore[misc]  # daphne ships no type hints
    """Daphne's Server listening through BoundedHTTPFactory."""

    def __init__(
        self,
        *args: object,
        body_limit: int,
        body_deadline_seconds: float,
        receiving_per_address: int = RECEIVING_PER_ADDRESS,
        **kwargs: object,
    ) -> None:
        self.body_limit = body_limit
        self.body_deadline_seconds = body_deadline_seconds
        self.receiving_per_address = receiving_per_address
        super().__init__(*args, **kwargs)

    @property
    def http_factory(self) -> BoundedHTTPFactory:
        return self._bounded_factory

    @http_factory.setter
    def http_factory(self, daphne_factory: object) -> None:
        # Server.run() builds daphne's HTTPFactory(self) and listens with it in the same breath:
        # this assignment is the one seam where the bounded factory takes its place
        self._bounded_factory = BoundedHTTPFactory(
            self,
            body_limit=self.body_limit,
            body_deadline_seconds=self.body_deadline_seconds,
            receiving_per_address=self.receiving_per_address,
        )

    def kill_all_applications(self) -> defer.Deferred[list[object] | None]:
        """Daphne's, minus its assumption that every connection has an application: one still
        receiving its request (a slow upload, a refused one lingering) has none yet."""
        pending = [
            details["application_instance"]
            for details in self.connections.values()
            if "application_instance" in details and not details["application_instance"].done()
        ]
        for instance in pending:
            instance.cancel()
        gathered: asyncio.Future[list[object]] = asyncio.gather(*pending)
        waited: defer.Deferred[list[object]] = defer.Deferred.fromFuture(gathered)
        return waited.addErrback(lambda _failure: None)


def _authorization_refused(request: BoundedWebRequest) -> bool:
    """Whether Daphne refused the request for a byte in its Authorization header."""
    values = request.requestHeaders.getRawHeaders(b"authorization") or []
    return any(INVALID_HEADER_VALUE_BYTES.intersection(value) for value in values)
