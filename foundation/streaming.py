"""The set-up every SSE consumer shares (Channels): stream from a task the consumer owns, cancel
it on `http.disconnect` (Daphne reports a disconnect only to a consumer that is not looping
inside `handle()`), read request headers, answer a refusal with the spec's error envelope.
Imports no app; a subclass writes `stream()`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping

from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer

from .errors import BrainError, error_envelope

__all__ = ["SSE_HEADERS", "StreamingConsumer", "request_header"]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # proxies must not buffer a stream
]


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
