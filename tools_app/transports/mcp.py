"""MCP tools over Streamable HTTP (mcp SDK 2.x): a fresh MCP session per call on pooled connections.

Identity goes in `_meta["brain.dev/scope"]`, the call id is the progress token. Results become
Brain results; anything else is a TransportError saying whether the tool may have run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
import httpx2
import orjson
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .base import OutboundCall, Transport, TransportError

__all__ = ["McpTransport", "convert_result", "make_client"]

SCOPE_META_KEY = "brain.dev/scope"
# Connections per (url, token) pool; an MCP call uses one or two at a time.
MAX_CONNECTIONS = 256


def make_client(token: str, transport: httpx2.AsyncBaseTransport | None = None) -> httpx2.AsyncClient:
    """One pooled client per server credential. Deadlines come from the registry."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(None),
        follow_redirects=False,
        trust_env=True,
        limits=httpx2.Limits(max_connections=MAX_CONNECTIONS),
        transport=transport,
    )


class _CallSession(ClientSession):
    """Forwards progress for this call's token in wire order, before the result is returned."""

    def __init__(self, *args: Any, call: OutboundCall, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._call = call

    def _intercept_notification(self, method: str, params: Mapping[str, Any] | None) -> bool:
        if (
            method == "notifications/progress"
            and params is not None
            and params.get("progressToken") == self._call.call_id
        ):
            data = {key: params[key] for key in ("progress", "total", "message") if key in params}
            self._call.progress(data)
            return True
        return super()._intercept_notification(method, params)


def convert_result(result: types.CallToolResult) -> dict[str, Any]:
    """MCP result -> Brain result. Unsupported content types fail the call (the tool did run)."""
    content: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, types.ImageContent):
            content.append({"type": "image", "data": block.data, "mime_type": block.mime_type})
        else:
            raise TransportError(f"MCP tool returned unsupported {block.type!r} content", reached=True)
    converted: dict[str, Any] = {}
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

    def _client(self, call: OutboundCall) -> httpx2.AsyncClient:
        key = (call.url, call.token)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = make_client(call.token, self._http_transport)
        return client

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def call(self, call: OutboundCall) -> Any:
        stage = {"sent": False, "elicited": False}
        scope = anyio.CancelScope()

        async def elicit(context: Any, params: Any) -> types.ErrorData:
            stage["elicited"] = True
            scope.cancel()
            return types.ErrorData(code=types.INVALID_REQUEST, message="Brain tools cannot ask for user input")

        result: Any = None
        try:
            client = self._client(call)
            with scope:
                async with (
                    streamable_http_client(call.url, http_client=client, terminate_on_close=True) as (read, write),
                    _CallSession(read, write, elicitation_callback=elicit, call=call) as session,
                ):
                    try:
                        async with asyncio.timeout(call.header_timeout):
                            await session.initialize()
                    except TimeoutError:
                        raise TransportError(
                            f"MCP server did not answer initialize within {call.header_timeout:g} s", reached=False
                        ) from None
                    meta: dict[str, Any] = {
                        "progressToken": call.call_id,
                        SCOPE_META_KEY: {
                            "tenant_id": call.tenant,
                            "session_id": call.session_id,
                            "call_id": call.call_id,
                        },
                    }
                    stage["sent"] = True
                    # RequestParamsMeta is a TypedDict; the scope key is an extension it does not list.
                    result = await session.call_tool(  # type: ignore[call-overload]
                        call.remote_name, call.arguments, meta=meta, allow_input_required=True
                    )
        except TransportError:
            raise
        except Exception as exc:  # the SDK's failures arrive as many types and exception groups
            if stage["elicited"]:
                raise _elicited() from exc
            reason = _describe(exc)
            if stage["sent"]:
                raise TransportError(f"MCP call failed: {reason}", reached=True) from exc
            raise TransportError(f"could not reach the MCP server: {reason}", reached=False) from exc
        if stage["elicited"] or isinstance(result, types.InputRequiredResult):
            raise _elicited()
        if not isinstance(result, types.CallToolResult):
            raise TransportError("MCP call was cancelled", reached=stage["sent"])
        converted = convert_result(result)
        if len(orjson.dumps(converted)) > call.max_output_bytes:
            raise TransportError(f"tool output exceeds max_output_bytes ({call.max_output_bytes})", reached=True)
        return converted


def _elicited() -> TransportError:
    return TransportError("the MCP server asked for user input; handle approval inside the tool", reached=True)


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    message = str(exc)
    return f"{type(exc).__name__}: {message}"[:300] if message else type(exc).__name__
