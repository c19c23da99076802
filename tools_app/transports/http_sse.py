"""HTTP JSON and SSE tools: POST the identity envelope, read one JSON result or an SSE stream.

Owns the egress policy for tool services: no redirects, proxies from the environment, the
header deadline and the output limit, counted on the decoded body (bodies.py). Imports nothing
from Django.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import orjson

from runners.protocol import FrameError, decode_json

from .base import OutboundCall, Transport, TransportError
from .bodies import ACCEPT_ENCODING, BodyDecodingError, BodyTooLarge, decoded_response

__all__ = ["HttpSseTransport", "PooledHttpTransport", "body_chunks", "make_client", "media_type_of", "too_large"]

# A pool big enough that 32 parallel calls per service never wait for a connection.
MAX_CONNECTIONS = 512
MAX_KEEPALIVE_CONNECTIONS = 128
ACCEPT = "application/json, text/event-stream"
EMIT_URL_HEADER = "Brain-Emit-URL"  # where a placed call's extension events are posted
EMIT_TOKEN_HEADER = "Brain-Emit-Token"  # the bearer token they are posted with


def make_client(transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """The one client for tool calls. Deadlines come from the registry (header deadline and
    timeout_seconds), so httpx's own per-operation timeouts are off; redirects are never
    followed and HTTP(S)_PROXY / NO_PROXY are honoured (trust_env). Bodies are read raw and
    decoded by body_chunks, so only the encodings it decodes are asked for."""
    return httpx.AsyncClient(
        headers={"Accept-Encoding": ACCEPT_ENCODING},
        timeout=httpx.Timeout(None),
        follow_redirects=False,
        trust_env=True,
        limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS),
        transport=transport,
    )


def _envelope(call: OutboundCall) -> bytes:
    """The call body. A provider binding's call also names the binding's alias, the operation
    and the binding's parameters (`{}` when it has none), trusted values beside the arguments."""
    body: dict[str, object] = {"tenant_id": call.tenant, "session_id": call.session_id, "call_id": call.call_id}
    if call.inspection_token:
        body["inspection_token"] = call.inspection_token
        body["brain_url"] = call.brain_url
    if call.binding is not None:
        body["binding"] = call.binding.alias
        body["operation"] = call.binding.operation
        body["parameters"] = {} if call.binding.parameters is None else call.binding.parameters
    body["arguments"] = call.arguments
    return orjson.dumps(body)


def media_type_of(response: httpx.Response) -> str:
    content_type: str = response.headers.get("content-type", "")
    return content_type.split(";", 1)[0].strip().lower()


def too_large(limit: int) -> TransportError:
    return TransportError(f"tool output exceeds max_output_bytes ({limit})", reached=True)


class _Budget:
    """Counts decoded response bytes against max_output_bytes."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit

    def take(self, chunk: bytes) -> None:
        self.left -= len(chunk)
        if self.left < 0:
            raise too_large(self.limit)


async def body_chunks(response: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """The response body decoded from its Content-Encoding in bounded pieces (bodies.py), for
    a reader that stops once `limit` decoded bytes are passed. Every failure is a TransportError
    with the request reached."""
    try:
        async with contextlib.aclosing(decoded_response(response, limit=limit)) as pieces:
            async for piece in pieces:
                yield piece
    except BodyTooLarge:
        raise too_large(limit) from None
    except BodyDecodingError as exc:
        raise TransportError(f"tool response cannot be decoded: {exc}", reached=True) from None


class PooledHttpTransport(Transport):
    """Owns one pooled client with the HTTP tools' egress policy, made on first use unless one
    is injected (a fault test passes a client built by make_client(httpx.MockTransport(...)))."""

    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client

    def _pooled_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = make_client()
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _send(self, request: httpx.Request, call: OutboundCall, *, answer: str) -> httpx.Response:
        """The streamed response to `request` once its headers are in, within the call's header
        deadline (TransportError, reached, naming `answer` when they are late); the caller reads
        and closes its body."""
        try:
            async with asyncio.timeout(call.header_timeout):
                return await self._pooled_client().send(request, stream=True)
        except TimeoutError:
            raise TransportError(
                f"{answer} headers did not arrive within {call.header_timeout:g} s", reached=True
            ) from None


class HttpSseTransport(PooledHttpTransport):
    """Brain's tool envelope over HTTP: a JSON answer, or progress and a result over SSE."""

    async def call(self, call: OutboundCall) -> object:
        client = self._pooled_client()
        headers = {"Content-Type": "application/json", "Accept": ACCEPT}
        if call.token:
            headers["Authorization"] = f"Bearer {call.token}"
        if call.traceparent:
            headers["traceparent"] = call.traceparent
        if call.emit_token:  # a placed call: the service may post its extension events
            headers[EMIT_URL_HEADER] = call.emit_url
            headers[EMIT_TOKEN_HEADER] = call.emit_token
        request = client.build_request("POST", call.url, content=_envelope(call), headers=headers)
        try:
            response = await self._send(request, call, answer="tool response")
            try:
                return await self._read(response, call)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise TransportError(f"tool transport failed: {type(exc).__name__}", reached=True) from exc

    async def _read(self, response: httpx.Response, call: OutboundCall) -> object:
        if not 200 <= response.status_code < 300:
            # The body of a non-2xx answer is ignored: handled failures come as 200 + is_error.
            raise TransportError(f"tool returned HTTP {response.status_code}", reached=True)
        budget = _Budget(call.max_output_bytes)
        media_type = media_type_of(response)
        if media_type == "application/json":
            body = bytearray()
            async for chunk in body_chunks(response, budget.limit):
                budget.take(chunk)
                body += chunk
            return _parse_json(bytes(body), "result")
        if media_type == "text/event-stream":
            return await _read_stream(response, call, budget)
        raise TransportError(f"tool returned unsupported content type {media_type or 'none'!r}", reached=True)


def _parse_json(raw: bytes | str, what: str) -> object:
    """The tool's JSON under the same rules as runner frames: an integer beyond 64 bits, a lone
    surrogate or a non-finite number is refused, never silently changed."""
    try:
        return decode_json(raw.encode() if isinstance(raw, str) else bytes(raw))
    except FrameError as exc:
        raise TransportError(f"tool {what} is not valid JSON: {exc}", reached=True) from None


async def _read_stream(response: httpx.Response, call: OutboundCall, budget: _Budget) -> object:
    """Zero or more `progress` events, then the `result` event's data (the call ends there)."""
    pending = b""
    event = ""
    data: list[str] = []
    async for chunk in body_chunks(response, budget.limit):
        budget.take(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw_line in lines:
            line = raw_line.removesuffix(b"\r").decode("utf-8", errors="replace")
            if not line:
                if not data and not event:
                    continue
                name, payload = event or "message", "\n".join(data)
                event, data = "", []
                if name == "progress":
                    call.progress(_parse_json(payload, "progress event"))
                elif name == "result":
                    return _parse_json(payload, "result event")
                else:
                    raise TransportError(f"tool stream sent an unexpected {name!r} event", reached=True)
            elif line.startswith(":"):
                continue  # SSE comment (keepalive)
            else:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)
    raise TransportError("tool stream ended without a result event", reached=True)
