"""Forwarding a request to the session's owner: signed with the fleet secret, the response's body
streamed back byte for byte as it arrives (SSE cursors and Last-Event-ID work unchanged).

The egress module for instance-to-instance HTTP: one httpx client per instance from
`fleet_client`, explicit timeouts, no redirects, no proxies from the environment; its own
transport (fleet_app.transport) keeps HTTP/1.1 connections to each owner alive. No Django.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from .signing import FORWARDED_HEADERS, sign_request
from .streams import TENANT_HEADER
from .transport import (
    CONNECT_SECONDS,
    MAX_CONNECTIONS,
    MAX_STREAM_CONNECTIONS,
    POOL_SECONDS,
    READ_SECONDS,
    WRITE_SECONDS,
    Abandoned,
    FleetTransport,
    Patience,
)

__all__ = [
    "CLIENT_HEADER",
    "FleetClient",
    "Forwarded",
    "OwnerUnreachable",
    "fleet_client",
    "forward_request",
]

CLIENT_HEADER = "brain-fleet-client"
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


class OwnerUnreachable(Exception):
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


class FleetClient(httpx.AsyncClient):
    """fleet_client's client. On its own FleetTransport, forward_request writes each request
    straight to the transport: httpx's request and response models, cookie jar and event hooks
    cost more CPU than the hop itself and do nothing for a signed request between instances.
    Streams go on a transport of their own (`stream_transport`). An injected transport (faults
    in tests) gets requests through httpx as usual."""

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None, **options: Any) -> None:
        self.fleet_transport = FleetTransport(max_connections=MAX_CONNECTIONS) if transport is None else None
        self.stream_transport = FleetTransport(max_connections=MAX_STREAM_CONNECTIONS) if transport is None else None
        super().__init__(transport=self.fleet_transport or transport, **options)

    async def aclose(self) -> None:
        if self.stream_transport is not None:
            await self.stream_transport.aclose()
        await super().aclose()


def fleet_client(*, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    return FleetClient(
        timeout=httpx.Timeout(connect=CONNECT_SECONDS, read=READ_SECONDS, write=WRITE_SECONDS, pool=POOL_SECONDS),
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        follow_redirects=False,
        trust_env=False,
        transport=transport,
    )


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


@functools.lru_cache(maxsize=1024)
def _origin(owner_url: str) -> tuple[str, int, bytes, bytes]:
    """host, port, Host header and path prefix of an instance's URL (instances' URLs are few)."""
    parts = urlsplit(owner_url)
    if parts.scheme != "http" or not parts.hostname:
        raise httpx.UnsupportedProtocol(f"fleet URLs are plain http://host:port, not {owner_url!r}")
    return parts.hostname, parts.port or 80, parts.netloc.encode("latin-1"), parts.path.rstrip("/").encode("latin-1")


def _clean(value: str) -> bool:
    return "\r" not in value and "\n" not in value and "\0" not in value


# Methods whose requests carry a body (and so a Content-Length, 0 included), as httpx sends them.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})

_T = TypeVar("_T")


@asynccontextmanager
async def forward_request(
    client: httpx.AsyncClient,
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
    stream: bool = False,
    now: Callable[[], float] = time.time,
) -> AsyncIterator[Forwarded]:
    """Send the request to `owner` at `owner_url` + `target` (raw path and query, as received)
    with only FORWARDED_HEADERS, signed; yield its status, headers and body stream. The
    response is closed when the block exits, so a client that goes away closes the owner's
    stream too. A `stream` (an answer that lasts) goes on the client's stream pool.
    OwnerUnreachable before a response (also when `still_owner`, asked every `recheck_seconds`
    while the answer has not started, says the owner lost the session); httpx.TransportError
    mid-body."""
    lowered = {name.lower(): value for name, value in headers.items()}
    forwarded = {name: lowered[name] for name in FORWARDED_HEADERS if lowered.get(name) and _clean(lowered[name])}
    forwarded[CLIENT_HEADER] = client_address if _clean(client_address) else ""
    transport = None
    if isinstance(client, FleetClient):
        transport = client.stream_transport if stream else client.fleet_transport
    try:
        if transport is not None:
            host, port, netloc, prefix = _origin(owner_url)
            path = prefix + target
            signature = sign_request(
                secret,
                sender=sender,
                target_instance=owner,
                method=method,
                target=path,
                body=body,
                headers=forwarded,
                now=now(),
                nonce=secrets.token_hex(16),
            )
            head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode("latin-1"), path, netloc)]
            if body or method in BODY_METHODS:
                head.append(b"content-length: %d\r\n" % len(body))
            for fields in (forwarded, signature):
                head.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in fields.items())
            head.append(b"\r\n")
            data = b"".join(head) + body
            patience = Patience(recheck_seconds, still_owner) if still_owner is not None else None
            try:
                answer = await transport.exchange(host, port, method, data, patience=patience)
            except Abandoned as exc:
                raise OwnerUnreachable(f"owner {owner} lost the session while not answering", reached=True) from exc
        else:
            response = await _answer(
                lambda: _send(client, secret, sender, owner, owner_url, method, target, body, forwarded, now()),
                owner,
                still_owner,
                recheck_seconds,
                discard=lambda response: response.aclose(),
            )
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise OwnerUnreachable(f"owner {owner} unreachable: {type(exc).__name__}", reached=False) from exc
    except httpx.TransportError as exc:
        raise OwnerUnreachable(f"owner {owner} did not answer: {type(exc).__name__}", reached=True) from exc
    if transport is not None:
        try:
            passed, tenant = _response_headers(answer.headers)
            yield Forwarded(answer.status, passed, aiter(answer.body), tenant)
        finally:
            await answer.body.aclose()
        return
    try:
        passed, tenant = _response_headers(response.headers.raw)
        yield Forwarded(response.status_code, passed, response.aiter_raw(), tenant)
    finally:
        await response.aclose()


async def _send(
    client: httpx.AsyncClient,
    secret: bytes,
    sender: str,
    owner: str,
    owner_url: str,
    method: str,
    target: bytes,
    body: bytes,
    forwarded: Mapping[str, str],
    now: float,
) -> httpx.Response:
    """The request through httpx (an injected transport), signed as sent: httpx adds headers of
    its own (an Accept of */* when none was given)."""
    request = client.build_request(method, owner_url + target.decode("latin-1"), headers=forwarded, content=body)
    sent = {name: request.headers[name] for name in FORWARDED_HEADERS if name in request.headers}
    request.headers.update(
        sign_request(
            secret,
            sender=sender,
            target_instance=owner,
            method=method,
            target=request.url.raw_path,
            body=body,
            headers=sent,
            now=now,
            nonce=secrets.token_hex(16),
        )
    )
    return await client.send(request, stream=True)


async def _answer(
    send: Callable[[], Awaitable[_T]],
    owner: str,
    still_owner: Callable[[], Awaitable[bool]] | None,
    recheck_seconds: float,
    *,
    discard: Callable[[_T], Awaitable[None]],
) -> _T:
    """The owner's answer once its status line and headers arrived; while they have not, ask
    `still_owner` every `recheck_seconds` and give up when it says no. An answer that arrives
    as the caller gives up (cancelled) is discarded, so its connection is not held forever."""
    if still_owner is None:
        return await send()
    sending = asyncio.ensure_future(send())
    try:
        while True:
            done, _ = await asyncio.wait((sending,), timeout=recheck_seconds)
            if done:
                return sending.result()
            if not await still_owner():
                raise OwnerUnreachable(f"owner {owner} lost the session while not answering", reached=True)
    except BaseException:
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
        elif not sending.cancelled() and sending.exception() is None:
            await discard(sending.result())
        raise
