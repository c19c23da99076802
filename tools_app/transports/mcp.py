"""MCP tools over Streamable HTTP (mcp SDK 2.x): a fresh MCP session per call on pooled connections.

Identity goes in `_meta["brain.dev/scope"]` (a placed call's emit capability in
`_meta["brain.dev/emit"]`), the call id is the progress token. Every response
byte of a call, progress included, counts against max_output_bytes as it arrives, after its
Content-Encoding is decoded in bounded pieces (bodies.py). Results become
Brain results; anything else is a TransportError saying whether the tool may have run. However
an operation ends (result, error, timeout, interrupt), its MCP session is ended with a DELETE.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager

import anyio
import httpx2
import orjson
from mcp import types
from mcp.client._transport import TransportStreams  # the SDK's (read, write) pair of every transport
from mcp.client.session import ClientRequestContext, ClientSession, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from runners.protocol import FrameError, encode_json

from .base import OutboundCall, Transport, TransportError
from .bodies import ACCEPT_ENCODING, BodyTooLarge, decoded_response

__all__ = [
    "DISCOVERY_PAGES",
    "McpStreams",
    "McpTransport",
    "OutputMeter",
    "OutputTooLarge",
    "convert_result",
    "make_client",
]

SCOPE_META_KEY = "brain.dev/scope"
BINDING_META_KEY = "brain.dev/binding"  # a provider binding's alias and parameters
EMIT_META_KEY = "brain.dev/emit"  # a placed call's emit capability: {"url", "token"}
DISCOVERY_PAGES = 100  # tools/list pages read at most (a server that never stops paginating)

# What an MCP client transport yields: the session's read and write streams.
McpStreams = AbstractAsyncContextManager[TransportStreams]
# Connections per (url, token) pool; an MCP call uses one or two at a time.
MAX_CONNECTIONS = 256
# The DELETE that ends an operation's MCP session runs beside the call's result (never delaying
# it, nor an interrupt), for this long at most.
END_SESSION_SECONDS = 5.0
SESSION_HEADER = "mcp-session-id"
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"


def make_client(token: str, transport: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncClient:
    """One pooled client per server credential. Deadlines come from the registry. Bodies are
    read raw and decoded by _MeteredStream, so only the encodings it decodes are asked for."""
    headers = {"Accept-Encoding": ACCEPT_ENCODING}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(None),
        follow_redirects=False,
        trust_env=True,
        limits=httpx2.Limits(max_connections=MAX_CONNECTIONS),
        transport=transport,
    )


class OutputTooLarge(Exception):
    """Raised into the SDK's read of a response once the call's meter is over its limit."""


class OutputMeter:
    """Counts the response bytes of one call against max_output_bytes. Past the limit it cancels
    the call's scope and fails the read, so the SDK never buffers the rest of the response."""

    def __init__(self, limit: int, scope: anyio.CancelScope) -> None:
        self.limit = limit
        self.received = 0
        self.exceeded = False
        self._scope = scope
        # the MCP session the server opened for this operation, and the protocol version the
        # SDK negotiated, as seen on the wire: what the DELETE that ends the session needs
        self.remote_session: str | None = None
        self.protocol_version: str | None = None

    def restart(self) -> None:
        """The call is sent: what the session's setup received does not count as its output."""
        self.received = 0

    def take(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.limit or self.exceeded:
            self.overflow()

    def overflow(self) -> None:
        self.exceeded = True
        self._scope.cancel()
        raise OutputTooLarge(f"received more than {self.limit} bytes")


class _MeteredStream(httpx2.AsyncByteStream):
    """The body of a pooled response, read raw and decoded in bounded pieces by the decoder the
    HTTP transports use (httpx2 also decodes in bounded pieces, but would pass a stream of wire
    bytes that decode to nothing), each piece taken by the meter before the SDK sees it."""

    def __init__(self, response: httpx2.Response, meter: OutputMeter) -> None:
        self._response = response
        self._meter = meter

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces = decoded_response(self._response, limit=self._meter.limit)
        try:
            async for piece in pieces:
                self._meter.take(piece)
                yield piece
        except BodyTooLarge:
            self._meter.overflow()
        finally:
            await pieces.aclose()

    async def aclose(self) -> None:
        await self._response.aclose()


class _MeteredTransport(httpx2.AsyncBaseTransport):
    """Sends one call's requests through the pooled client (its connections, proxies and
    credential) and hands the SDK responses whose bodies pass through the call's meter."""

    def __init__(self, client: httpx2.AsyncClient, meter: OutputMeter) -> None:
        self._client = client
        self._meter = meter

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self._meter.protocol_version = request.headers.get(PROTOCOL_VERSION_HEADER, self._meter.protocol_version)
        response = await self._client.send(request, stream=True, follow_redirects=False)
        self._meter.remote_session = response.headers.get(SESSION_HEADER, self._meter.remote_session)
        # The SDK gets the decoded body: the meter counts what the SDK would buffer.
        headers = [(name, value) for name, value in response.headers.multi_items() if name != "content-encoding"]
        stream = _MeteredStream(response, self._meter)
        return httpx2.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    async def aclose(self) -> None:
        pass  # the pooled client outlives the call


def _metered_client(pooled: httpx2.AsyncClient, meter: OutputMeter) -> httpx2.AsyncClient:
    """A per-call client over the pooled one: same headers (the credential), no connections of
    its own, so nothing to close."""
    return httpx2.AsyncClient(
        headers=pooled.headers,
        timeout=httpx2.Timeout(None),
        follow_redirects=False,
        transport=_MeteredTransport(pooled, meter),
    )


class _CallSession(ClientSession):
    """Forwards progress for this call's token in wire order, before the result is returned."""

    def __init__(self, streams: TransportStreams, *, elicitation_callback: ElicitationFnT, call: OutboundCall) -> None:
        super().__init__(*streams, elicitation_callback=elicitation_callback)
        self._call = call

    def _intercept_notification(self, method: str, params: Mapping[str, object] | None) -> bool:
        if (
            method == "notifications/progress"
            and params is not None
            and params.get("progressToken") == self._call.call_id
        ):
            data = {key: params[key] for key in ("progress", "total", "message") if key in params}
            self._call.progress(data)
            return True
        return super()._intercept_notification(method, params)


def convert_result(result: types.CallToolResult) -> dict[str, object]:
    """MCP result -> Brain result. Unsupported content types fail the call (the tool did run)."""
    content: list[dict[str, object]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, types.ImageContent):
            content.append({"type": "image", "data": block.data, "mime_type": block.mime_type})
        else:
            raise TransportError(f"MCP tool returned unsupported {block.type!r} content", reached=True)
    converted: dict[str, object] = {}
    if result.structured_content is not None:
        converted["structured_content"] = result.structured_content
        if not any(block["type"] == "text" for block in content):
            content.append({"type": "text", "text": orjson.dumps(result.structured_content).decode()})
    if content:
        converted["content"] = content
    if result.is_error:
        converted["is_error"] = True
    return converted


class McpTransport(Transport):
    """One pooled client per (server, credential); `http_transport` is injected by fault tests
    (httpx2's MockTransport)."""

    def __init__(self, http_transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self._clients: dict[tuple[str, str], httpx2.AsyncClient] = {}
        self._http_transport = http_transport
        self._endings: set[asyncio.Task[None]] = set()  # DELETEs under way

    def _client(self, call: OutboundCall) -> httpx2.AsyncClient:
        key = (call.url, call.token)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = make_client(call.token, self._http_transport)
        return client

    async def aclose(self) -> None:
        endings, self._endings = list(self._endings), set()
        for task in endings:
            task.cancel()
        await asyncio.gather(*endings, return_exceptions=True)
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    def open_streams(self, call: OutboundCall, meter: OutputMeter) -> McpStreams:
        """A fresh MCP connection for one operation, every response byte taken by `meter`
        (a stdio subclass runs an owned process instead)."""
        return streamable_http_client(
            call.url,
            http_client=_metered_client(self._client(call), meter),
            terminate_on_close=False,  # end_session() does it, also when the call is cancelled
            max_sse_event_size=call.max_output_bytes,  # the meter cuts first; this is a backstop
        )

    def end_session(self, call: OutboundCall, meter: OutputMeter) -> None:
        """DELETE the operation's MCP session (Streamable HTTP) however the operation ended
        (result, error, deadline, interrupt), so the server can stop what it still runs for it.
        Sent from a task of this transport, so neither the result nor a cancellation waits for
        it; best effort, bounded by END_SESSION_SECONDS, its answer never read."""
        if meter.remote_session is None:
            return
        headers = {SESSION_HEADER: meter.remote_session}
        if meter.protocol_version:
            headers[PROTOCOL_VERSION_HEADER] = meter.protocol_version
        task = asyncio.get_running_loop().create_task(self._delete_session(self._client(call), call.url, headers))
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)

    @staticmethod
    async def _delete_session(client: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> None:
        with contextlib.suppress(httpx2.HTTPError, TimeoutError):
            async with asyncio.timeout(END_SESSION_SECONDS):
                response = await client.send(client.build_request("DELETE", url, headers=headers), stream=True)
                await response.aclose()

    async def list_tools(self, call: OutboundCall) -> list[types.Tool]:
        """Discovery: every tool the server lists, on a connection of its own. Only `url`,
        `token`, `max_output_bytes` (for the whole listing) and `header_timeout` of `call` are
        used; the caller bounds the whole operation."""
        scope = anyio.CancelScope()
        meter = OutputMeter(call.max_output_bytes, scope)
        try:
            return await self._list_tools(call, scope, meter)
        finally:
            self.end_session(call, meter)

    async def _list_tools(self, call: OutboundCall, scope: anyio.CancelScope, meter: OutputMeter) -> list[types.Tool]:
        tools: list[types.Tool] = []
        try:
            with scope:
                async with (
                    self.open_streams(call, meter) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    async with asyncio.timeout(call.header_timeout):
                        await session.initialize()
                    cursor: str | None = None
                    for _ in range(DISCOVERY_PAGES):
                        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                        page = await session.list_tools(params=params)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except Exception as exc:  # the SDK's failures arrive as many types and exception groups
            _propagate_cancellation(exc)
            if meter.exceeded:
                raise TransportError(f"the MCP tool list exceeds {call.max_output_bytes} bytes", reached=False) from exc
            raise TransportError(f"could not list the MCP server's tools: {_describe(exc)}", reached=False) from exc
        if meter.exceeded:
            raise TransportError(f"the MCP tool list exceeds {call.max_output_bytes} bytes", reached=False)
        return tools

    async def call(self, call: OutboundCall) -> object:
        scope = anyio.CancelScope()
        meter = OutputMeter(call.max_output_bytes, scope)
        try:
            return await self._call(call, scope, meter)
        finally:
            self.end_session(call, meter)

    async def _call(self, call: OutboundCall, scope: anyio.CancelScope, meter: OutputMeter) -> object:
        stage = {"sent": False, "elicited": False}

        async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ErrorData:
            stage["elicited"] = True
            scope.cancel()
            return types.ErrorData(code=types.INVALID_REQUEST, message="Brain tools cannot ask for user input")

        result: object = None
        try:
            with scope:
                async with (
                    self.open_streams(call, meter) as (read, write),
                    _CallSession((read, write), elicitation_callback=elicit, call=call) as session,
                ):
                    try:
                        async with asyncio.timeout(call.header_timeout):
                            await session.initialize()
                    except TimeoutError:
                        raise TransportError(
                            f"MCP server did not answer initialize within {call.header_timeout:g} s", reached=False
                        ) from None
                    meta: dict[str, object] = {
                        "progressToken": call.call_id,
                        SCOPE_META_KEY: {
                            "tenant_id": call.tenant,
                            "session_id": call.session_id,
                            "call_id": call.call_id,
                        },
                    }
                    if call.binding is not None:
                        meta[BINDING_META_KEY] = {"alias": call.binding.alias, "parameters": call.binding.parameters}
                    if call.emit_token:  # a placed call: the server may post its extension events
                        meta[EMIT_META_KEY] = {"url": call.emit_url, "token": call.emit_token}
                    stage["sent"] = True
                    meter.restart()
                    # RequestParamsMeta is a TypedDict; the scope key is an extension it does not list.
                    result = await session.call_tool(  # type: ignore[call-overload]
                        call.remote_name, call.arguments, meta=meta, allow_input_required=True
                    )
        except TransportError:
            raise
        except Exception as exc:  # the SDK's failures arrive as many types and exception groups
            _propagate_cancellation(exc)
            if meter.exceeded:
                raise _too_large(call, reached=stage["sent"]) from exc
            if stage["elicited"]:
                raise _elicited() from exc
            reason = _describe(exc)
            if stage["sent"]:
                raise TransportError(f"MCP call failed: {reason}", reached=True) from exc
            raise TransportError(f"could not reach the MCP server: {reason}", reached=False) from exc
        if meter.exceeded:
            raise _too_large(call, reached=stage["sent"])
        if stage["elicited"] or isinstance(result, types.InputRequiredResult):
            raise _elicited()
        if not isinstance(result, types.CallToolResult):
            _propagate_cancellation(None)
            raise TransportError("MCP call was cancelled", reached=stage["sent"])
        try:
            converted = convert_result(result)
            size = len(encode_json(converted))  # the frame rules: no integer beyond 64 bits, no lone surrogate
        except (FrameError, TypeError) as exc:  # orjson's TypeError: an integer beyond 64 bits
            raise TransportError(f"MCP result is not valid JSON: {exc}", reached=True) from None
        if size > call.max_output_bytes:
            raise _too_large(call, reached=True)
        return converted


def _propagate_cancellation(exc: BaseException | None) -> None:
    """While the caller cancels this task (its deadline or an interrupt), the SDK may unwind
    with some other error (BrokenResourceError from its closed streams, an exception group):
    that is the cancellation, not a tool failure, so it goes on as CancelledError (asyncio's
    timeout turns it into TimeoutError, the registry into a cancelled call)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError() from exc


def _too_large(call: OutboundCall, *, reached: bool) -> TransportError:
    """The words of the HTTP/SSE transport: the limit counts every byte received, progress included."""
    return TransportError(f"tool output exceeds max_output_bytes ({call.max_output_bytes})", reached=reached)


def _elicited() -> TransportError:
    return TransportError("the MCP server asked for user input; handle approval inside the tool", reached=True)


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = str(exc)
    return f"{type(exc).__name__}: {message}"[:300] if message else type(exc).__name__
