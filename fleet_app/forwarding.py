"""Forwarding a request to the session's owner: signed with the fleet secret, the response's body
streamed back byte for byte as it arrives (SSE cursors and Last-Event-ID work unchanged).

The egress module for instance-to-instance HTTP: one httpx client per instance from
`fleet_client`, explicit timeouts, no redirects, no proxies from the environment. No Django.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from .signing import FORWARDED_HEADERS, sign_request

__all__ = ["CLIENT_HEADER", "Forwarded", "OwnerUnreachable", "fleet_client", "forward_request"]

CLIENT_HEADER = "brain-fleet-client"
# Owners are in the same network: a connection that takes longer means the owner is gone.
CONNECT_SECONDS = 2.0
# Between two reads of a response: longer than the SSE keepalive (15 s, spec) several times
# over, and than a flush's upload of an ordinary session; a partitioned owner ends the stream
# here, and the client reconnects with Last-Event-ID through any instance.
READ_SECONDS = 120.0
# Until the owner's answer starts (its status line), the forwarding instance checks this often
# that the owner still holds the lease: a paused owner (SIGSTOP, a long GC) accepts connections
# and never answers, and its lease lapses; then the client gets a retryable 503 at once instead
# of waiting READ_SECONDS. A started answer (a stream) keeps READ_SECONDS between reads.
RECHECK_SECONDS = 2.0
WRITE_SECONDS = 10.0
POOL_SECONDS = 2.0
MAX_CONNECTIONS = 256  # per instance, to all owners together
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


def fleet_client(*, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=CONNECT_SECONDS, read=READ_SECONDS, write=WRITE_SECONDS, pool=POOL_SECONDS),
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        follow_redirects=False,
        trust_env=False,
        transport=transport,
    )


def _response_headers(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    named = {
        token.strip().lower().encode()
        for value in response.headers.get_list("connection")
        for token in value.split(",")
        if token.strip()
    }
    return [(name.lower(), value) for name, value in response.headers.raw if name.lower() not in HOP_BY_HOP | named]


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
    now: Callable[[], float] = time.time,
) -> AsyncIterator[Forwarded]:
    """Send the request to `owner` at `owner_url` + `target` (raw path and query, as received)
    with only FORWARDED_HEADERS, signed; yield its status, headers and body stream. The
    response is closed when the block exits, so a client that goes away closes the owner's
    stream too. OwnerUnreachable before a response (also when `still_owner`, asked every
    `recheck_seconds` while the answer has not started, says the owner lost the session);
    httpx.TransportError mid-body."""
    lowered = {name.lower(): value for name, value in headers.items()}
    forwarded = {name: lowered[name] for name in FORWARDED_HEADERS if lowered.get(name)}
    forwarded[CLIENT_HEADER] = client_address
    request = client.build_request(method, owner_url + target.decode("latin-1"), headers=forwarded, content=body)
    # Signed as sent: httpx adds headers of its own (an Accept of */* when none was given).
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
            now=now(),
            nonce=secrets.token_hex(16),
        )
    )
    try:
        response = await _answer(client, request, owner, still_owner, recheck_seconds)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise OwnerUnreachable(f"owner {owner} unreachable: {type(exc).__name__}", reached=False) from exc
    except httpx.TransportError as exc:
        raise OwnerUnreachable(f"owner {owner} did not answer: {type(exc).__name__}", reached=True) from exc
    try:
        yield Forwarded(response.status_code, _response_headers(response), response.aiter_raw())
    finally:
        await response.aclose()


async def _answer(
    client: httpx.AsyncClient,
    request: httpx.Request,
    owner: str,
    still_owner: Callable[[], Awaitable[bool]] | None,
    recheck_seconds: float,
) -> httpx.Response:
    """The owner's response once its status line and headers arrived; while they have not, ask
    `still_owner` every `recheck_seconds` and give up when it says no."""
    if still_owner is None:
        return await client.send(request, stream=True)
    sending = asyncio.ensure_future(client.send(request, stream=True))
    try:
        while True:
            done, _ = await asyncio.wait((sending,), timeout=recheck_seconds)
            if done:
                return sending.result()
            if not await still_owner():
                raise OwnerUnreachable(f"owner {owner} lost the session while not answering", reached=True)
    finally:
        if not sending.done():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
