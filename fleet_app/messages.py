"""The ASGI side of fleet routing: reading a request's body once and replaying it, answering
with the spec's error envelope, and passing a forwarded answer's pieces on to a slow client.
No Django."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from foundation.errors import BrainError, error_envelope

__all__ = [
    "BodyTooLarge",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "content_length",
    "read_body",
    "replaying",
    "respond",
    "write_piece",
]

Scope = MutableMapping[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# While the client's socket holds this much unsent, stop reading the owner (the owner's own
# write deadline then drops a stuck stream); past the deadline the client is dropped here too.
SOCKET_HIGH_WATER = 256 * 1024
WRITE_DEADLINE_SECONDS = 15.0
CONGESTION_POLL_SECONDS = 0.01


def content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def respond(send: Send, scope: Scope, error: BrainError) -> None:
    request_id = str(scope.get("brain_request_id", ""))
    headers = [
        (b"content-type", b"application/json"),
        (b"x-request-id", request_id.encode()),
        (b"x-content-type-options", b"nosniff"),
        *((name.lower().encode(), value.encode()) for name, value in error.headers().items()),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": error_envelope(error, request_id)})


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None when the client went away; BodyTooLarge past `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the already-read body once, then the client's own messages."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def write_piece(scope: Scope, send: Send, chunk: bytes) -> None:
    """One piece of a streamed answer, once the client's socket has room for it (TimeoutError
    when it has had none for WRITE_DEADLINE_SECONDS)."""
    pending = scope.get("brain_pending_bytes")
    if pending is not None and pending() > SOCKET_HIGH_WATER:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WRITE_DEADLINE_SECONDS
        while pending() > SOCKET_HIGH_WATER:
            if loop.time() > deadline:
                raise TimeoutError
            await asyncio.sleep(CONGESTION_POLL_SECONDS)
    await send({"type": "http.response.body", "body": chunk, "more_body": True})
