"""HTTP/1.1 between a fleet's instances: kept-alive connections per owner on asyncio streams.

httpcore's general pool (anyio streams, cancel scopes, h11 events) cost about 0.6 ms of CPU per
forwarded request on a 2-core machine, most of what forwarding a request added; this speaks
the little HTTP/1.1 the hop needs: a request written in one piece, an answer's head read with
bounds, its body streamed as it arrives (Content-Length, chunked, or until the connection
closes). It is the fleet's only HTTP client: no httpx client or transport is in the path.
Failures are httpx's TransportError family (the exception classes only), as httpcore raises
them. No Django.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

__all__ = [
    "Abandoned",
    "Patience",
    "CONNECT_SECONDS",
    "MAX_CONNECTIONS",
    "MAX_STREAM_CONNECTIONS",
    "POOL_SECONDS",
    "READ_SECONDS",
    "WRITE_SECONDS",
    "Answer",
    "FleetTransport",
    "Origin",
    "origin_of",
]

# Owners are in the same network: a connection that takes longer means the owner is gone.
CONNECT_SECONDS = 2.0
# Between two reads of an answer: longer than the SSE keepalive (15 s, spec) several times
# over, and than a flush's upload of an ordinary session; a partitioned owner ends the stream
# here, and the client reconnects with Last-Event-ID through any instance.
READ_SECONDS = 120.0
WRITE_SECONDS = 10.0
POOL_SECONDS = 2.0
# Per instance, to all owners together, for ordinary requests: answers that end. Streams (an
# SSE event stream, an executor's command stream) hold a connection for their whole life and
# have a pool of their own, so no number of them leaves an ordinary request without one.
MAX_CONNECTIONS = 256
# Forwarded streams per instance: four tenants at the default share (limits.
# tenant_forwarded_streams); each holds two sockets here (the client's and the owner's).
MAX_STREAM_CONNECTIONS = 1024
# An owner's answer is read with the bounds a server puts on requests: its whole head (status
# line and headers) at most MAX_HEAD_BYTES, each line at most MAX_HEADER_LINE_BYTES, this many
# header lines; body pieces are passed on as they come, at most READ_BYTES each.
MAX_HEADER_LINE_BYTES = 16 * 1024
MAX_HEADER_LINES = 100
MAX_HEAD_BYTES = 64 * 1024
READ_BYTES = 64 * 1024
MAX_CHUNK_SIZE_DIGITS = 16  # a chunk-size line: hex digits of a 64-bit size, then extensions


class Abandoned(httpx.ReadTimeout):
    """The caller's patience ran out while the answer's head had not arrived (the request may
    have reached the owner)."""


@dataclass(frozen=True, slots=True)
class Patience:
    """While an answer's head has not arrived, `keep_waiting` is asked every `seconds`;
    when it says no, the exchange ends with Abandoned."""

    seconds: float
    keep_waiting: Callable[[], Awaitable[bool]]


class _Connection:
    """One HTTP/1.1 connection to an owner, used by one request at a time."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def reusable(self) -> bool:
        # an idle connection the owner closed (restart, keep-alive timeout) has seen EOF by now
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


async def _read(operation: Awaitable[bytes]) -> bytes:
    try:
        async with asyncio.timeout(READ_SECONDS):
            return await operation
    except TimeoutError as exc:
        raise httpx.ReadTimeout("the owner sent nothing for too long") from exc
    except BaseException as exc:
        raise _read_error(exc) from exc


def _read_error(exc: BaseException) -> BaseException:
    """A stream reader's failure as httpx's TransportError family; anything else as it is."""
    if isinstance(exc, asyncio.IncompleteReadError):
        return httpx.RemoteProtocolError("the owner closed the connection mid-response")
    if isinstance(exc, asyncio.LimitOverrunError | ValueError):
        return httpx.RemoteProtocolError("the owner sent an over-long line")
    if isinstance(exc, OSError):
        return httpx.ReadError(f"reading the owner's answer failed: {exc.strerror or exc}")
    return exc


async def _head(reader: asyncio.StreamReader, patience: Patience | None) -> bytes:
    """An answer's head, through its blank line. With `patience`, waited for in rounds of its
    seconds (a round that times out leaves what arrived in the reader's buffer), asking between
    rounds whether to go on: no task beside the read, which a forwarded request would pay for."""
    if patience is None:
        return await _read(reader.readuntil(b"\r\n\r\n"))
    waited = 0.0
    while True:
        try:
            async with asyncio.timeout(patience.seconds):
                return await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            waited += patience.seconds
        except BaseException as exc:
            error = _read_error(exc)
            if error is exc:
                raise
            raise error from exc
        if waited >= READ_SECONDS:
            raise httpx.ReadTimeout("the owner sent nothing for too long")
        if not await patience.keep_waiting():
            raise Abandoned("given up on the owner's answer")


async def _line(reader: asyncio.StreamReader) -> bytes:
    line = await _read(reader.readuntil(b"\n"))
    if len(line) > MAX_HEADER_LINE_BYTES:
        raise httpx.RemoteProtocolError("the owner sent an over-long line")
    return line.rstrip(b"\r\n")


class _Body:
    """The owner's body, framed by Content-Length, chunked coding, or the connection's end; each
    piece yielded as it arrives. Read to its end, the connection goes back to the pool."""

    def __init__(self, transport: FleetTransport, origin: str, link: _Connection, framing: int | None) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = link
        self._framing = framing  # remaining bytes, CHUNKED, or None: until the connection closes
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        link = self._connection
        if link is None:
            return
        reader = link.reader
        if self._framing == CHUNKED:
            while True:
                size_line = await _line(reader)
                digits = size_line.split(b";", 1)[0].strip()
                if not digits or len(digits) > MAX_CHUNK_SIZE_DIGITS:
                    raise httpx.RemoteProtocolError("the owner sent a malformed chunk size")
                try:
                    remaining = int(digits, 16)
                except ValueError as exc:
                    raise httpx.RemoteProtocolError("the owner sent a malformed chunk size") from exc
                if remaining == 0:
                    while await _line(reader):  # trailers, if any, then the empty line
                        pass
                    break
                while remaining:
                    piece = await _read(reader.read(min(remaining, READ_BYTES)))
                    if not piece:
                        raise httpx.RemoteProtocolError("the owner closed the connection mid-chunk")
                    remaining -= len(piece)
                    yield piece
                if await _read(reader.readexactly(2)) != b"\r\n":
                    raise httpx.RemoteProtocolError("the owner sent a malformed chunk")
        elif self._framing is None:
            while piece := await _read(reader.read(READ_BYTES)):
                yield piece
        else:
            remaining = self._framing
            while remaining:
                piece = await _read(reader.read(min(remaining, READ_BYTES)))
                if not piece:
                    raise httpx.RemoteProtocolError("the owner closed the connection mid-body")
                remaining -= len(piece)
                yield piece
        self._complete = self._framing is not None

    async def aclose(self) -> None:
        link, self._connection = self._connection, None
        if link is not None:
            self._transport.release(self._origin, link, reuse=self._complete)


CHUNKED = -1


@dataclass(frozen=True, slots=True)
class Answer:
    """An owner's answer as FleetTransport reads it: the head, and the body still to stream."""

    status: int
    version: bytes
    reason: bytes
    headers: list[tuple[bytes, bytes]]  # as received
    body: _Body


@dataclass(frozen=True, slots=True)
class Origin:
    host: str
    port: int
    netloc: bytes  # the Host header


@functools.lru_cache(maxsize=1024)
def origin_of(url: str) -> Origin:
    """Where an instance's URL is served (instances' URLs are few); UnsupportedProtocol for
    anything but plain http://host:port."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 80
    except ValueError as exc:
        raise httpx.UnsupportedProtocol(f"fleet URLs are plain http://host:port, not {url!r}") from exc
    if parts.scheme != "http" or not host:
        raise httpx.UnsupportedProtocol(f"fleet URLs are plain http://host:port, not {url!r}")
    return Origin(host, port, parts.netloc.encode("latin-1"))


# Methods whose requests carry a body (and so a Content-Length, 0 included), as HTTP clients send them.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class FleetTransport:
    """HTTP/1.1 to the fleet's instances over kept-alive connections, per owner origin: a
    request is written in one piece, the answer's head read and its body streamed (no HTTP/2,
    no TLS: instances talk over the fleet's own network, each request signed). At most
    `max_connections` at once; a request waits POOL_SECONDS for one."""

    def __init__(self, *, max_connections: int = MAX_CONNECTIONS) -> None:
        self._idle: dict[str, deque[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    async def __aenter__(self) -> FleetTransport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def request(
        self,
        url: str,
        method: str,
        target: bytes,
        headers: Mapping[str, str],
        body: bytes,
        *,
        patience: Patience | None = None,
    ) -> Answer:
        """`method` `target` with `headers` and `body` to the instance at `url`, its Host header
        the URL's; the answer once its head arrived (as `exchange`)."""
        origin = origin_of(url)
        head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode("latin-1"), target, origin.netloc)]
        if body or method in BODY_METHODS:
            head.append(b"content-length: %d\r\n" % len(body))
        head.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items())
        head.append(b"\r\n")
        return await self.exchange(origin.host, origin.port, method, b"".join(head) + body, patience=patience)

    async def exchange(
        self, host: str, port: int, method: str, data: bytes, *, patience: Patience | None = None
    ) -> Answer:
        """Send `data` (a whole HTTP/1.1 request: head and body) on a kept-alive connection to
        host:port, or a new one; the answer once its head arrived. httpx's TransportError
        family on failure, as httpcore raises it (ConnectError: nothing was sent), Abandoned
        when `patience` gave up."""
        origin = f"{host}:{port}"
        if self._slots.locked():  # only then can the acquire wait: no timeout to arm otherwise
            try:
                async with asyncio.timeout(POOL_SECONDS):
                    await self._slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("every connection to the fleet is in use") from exc
        else:
            await self._slots.acquire()
        try:
            link = self._pooled(origin) or await self._connect(host, port)
            await self._write(link, data)
            return await self._response(method, origin, link, patience)
        except BaseException:
            self._slots.release()
            raise

    def _pooled(self, origin: str) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            link = idle.pop()
            if link.reusable:
                return link
            link.close()
        return None

    async def _connect(self, host: str, port: int) -> _Connection:
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                reader, writer = await asyncio.open_connection(host, port, limit=MAX_HEAD_BYTES)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(f"connecting to {host}:{port} failed: {exc.strerror or exc}") from exc
        return _Connection(reader, writer)

    @staticmethod
    async def _write(link: _Connection, data: bytes) -> None:
        try:
            link.writer.write(data)
            if link.writer.transport.get_write_buffer_size() == 0:
                return  # written whole to the socket: nothing to drain
            async with asyncio.timeout(WRITE_SECONDS):
                await link.writer.drain()
        except TimeoutError as exc:
            link.close()
            raise httpx.WriteTimeout("the owner does not take the request") from exc
        except OSError as exc:
            link.close()
            raise httpx.WriteError(f"sending to the owner failed: {exc.strerror or exc}") from exc

    async def _response(self, method: str, origin: str, link: _Connection, patience: Patience | None) -> Answer:
        # the whole head in one read (one wait, one timeout), then split: a line at a time cost
        # a wait and a timeout per header
        try:
            head = await _head(link.reader, patience)
            status_line, *lines = head[:-4].split(b"\r\n")
            version, _, rest = status_line.partition(b" ")
            code, _, reason = rest.partition(b" ")
            if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
                raise httpx.RemoteProtocolError("the owner's answer is not HTTP/1.x")
            if len(lines) > MAX_HEADER_LINES:
                raise httpx.RemoteProtocolError("the owner sent a malformed header")
            headers: list[tuple[bytes, bytes]] = []
            for line in lines:
                name, colon, value = line.partition(b":")
                if not colon or not name or name != name.strip() or len(line) > MAX_HEADER_LINE_BYTES:
                    raise httpx.RemoteProtocolError("the owner sent a malformed header")
                headers.append((name, value.strip()))
        except BaseException:
            link.close()
            raise
        status = int(code)
        fields = {name.lower(): value.lower() for name, value in headers}
        keep_alive = b"close" not in fields.get(b"connection", b"") and (
            version == b"HTTP/1.1" or b"keep-alive" in fields.get(b"connection", b"")
        )
        framing: int | None
        if method == "HEAD" or status in (204, 304) or status < 200:
            framing = 0
        elif b"chunked" in fields.get(b"transfer-encoding", b""):
            framing = CHUNKED
        elif fields.get(b"content-length", b"").isdigit():
            framing = int(fields[b"content-length"])
        else:
            framing, keep_alive = None, False
        return Answer(status, version, reason, headers, _Body(self, origin if keep_alive else "", link, framing))

    def release(self, origin: str, link: _Connection, *, reuse: bool) -> None:
        """A response closed: its connection back to the pool when its answer was read whole."""
        self._slots.release()
        if reuse and origin and not self._closed and link.reusable:
            self._idle.setdefault(origin, deque()).append(link)
        else:
            link.close()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()
