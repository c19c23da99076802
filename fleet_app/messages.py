"""The ASGI side of fleet routing: reading a request's body once and replaying it, and answering
with the spec's error envelope. No Django."""

from __future__ import annotations

from foundation.asgi import Message, Receive, Scope, Send
from foundation.errors import BrainError, PayloadTooLarge, error_envelope

__all__ = ["content_length", "read_body", "replaying", "respond"]


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


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None when the client went away; PayloadTooLarge past `limit`."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge("request body exceeds the size limit")
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
