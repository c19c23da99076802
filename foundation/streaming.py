"""The set-up every SSE consumer shares (Channels): stream from a task the consumer owns, cancel
it on `http.disconnect` (Daphne reports a disconnect only to a consumer that is not looping
inside `handle()`), read request headers, answer a refusal with the spec's error envelope, and
hold a streamed write back while the client's socket is full (`wait_for_room`, used by the SSE
consumer and by fleet forwarding alike). Imports no app; a subclass writes `stream()`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping

from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from .errors import BrainError, error_envelope

__all__ = [
    "CONGESTION_POLL_SECONDS",
    "SOCKET_HIGH_WATER",
    "SSE_HEADERS",
    "WRITE_DEADLINE_SECONDS",
    "StreamingConsumer",
    "request_header",
    "wait_for_room",
]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer a stream
]
# Unsent bytes in the client's transport before a stream stops writing (and, forwarding, stops
# reading the owner, whose own write deadline then drops a stuck stream).
SOCKET_HIGH_WATER = 256 * 1024
WRITE_DEADLINE_SECONDS = 15.0  # spec: 15-second write deadline per frame
CONGESTION_POLL_SECONDS = 0.01  # how often a held-back write looks at the socket again


async def wait_for_room(scope: Mapping[str, object], *, give_up: Callable[[], bool] = lambda: False) -> None:
    """Return once the client's socket holds at most SOCKET_HIGH_WATER unsent bytes (at once
    when the server cannot tell: no `brain_pending_bytes` probe in the scope). TimeoutError when
    it has had no room for WRITE_DEADLINE_SECONDS, or as soon as `give_up()` says so meanwhile:
    the caller drops the client (spec: slow clients are disconnected)."""
    pending = scope.get("brain_pending_bytes")
    if not callable(pending) or pending() <= SOCKET_HIGH_WATER:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WRITE_DEADLINE_SECONDS
    while pending() > SOCKET_HIGH_WATER:
        if loop.time() > deadline or give_up():
            raise TimeoutError
        await asyncio.sleep(CONGESTION_POLL_SECONDS)


def request_header(scope: Mapping[str, object], name: bytes) -> str | None:
    """The first request header called `name` (lower-case bytes, as ASGI spells it), or None."""
    headers = scope.get("headers", ())
    for key, value in headers if isinstance(headers, Iterable) else ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class StreamingConsumer(AsyncHttpConsumer):  # type: ignore[misc]  # channels ships no type hints
    """An HTTP consumer whose response is written by `stream()`, a task cancelled when the
    client goes away."""

    _stream_task: asyncio.Task[None] | None = None

    async def stream(self) -> None:
        raise NotImplementedError

    async def http_request(self, message: Mapping[str, object]) -> None:
        if message.get("more_body"):
            return
        self._stream_task = asyncio.get_running_loop().create_task(self.stream())

    async def http_disconnect(self, message: Mapping[str, object]) -> None:
        task = self._stream_task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        raise StopConsumer()

    def header(self, name: bytes) -> str | None:
        return request_header(self.scope, name)

    async def send_error(self, error: BrainError) -> None:
        """The error envelope with the error's status and headers (Retry-After, WWW-Authenticate)."""
        body = error_envelope(error, self.scope.get("brain_request_id", ""))
        headers = [(b"content-type", b"application/json")]
        headers += [(key.lower().encode(), value.encode()) for key, value in error.headers().items()]
        await self.send_headers(status=error.status, headers=headers)
        await self.send_body(body)
