"""The resources service's HTTP side: the external tools protocol (tools.md) as
examples/tools serves it. `POST /tools/{name}` with `Authorization: Bearer TOOL_API_KEY` and
Brain's envelope `{tenant_id, session_id, call_id, arguments}` answers 200 with one result;
`GET /health` answers `{"status": "ok"}`. A plain ASGI app: no framework.

At most MAX_OPERATIONS calls run at once (another is answered at once with an error result,
nothing done); each has REQUEST_SECONDS. A call that fails after its handler started is an
error result, an unknown outcome when its tool `mutates`.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

from .registry import Call, ServiceTool

__all__ = ["MAX_BODY_BYTES", "MAX_OPERATIONS", "REQUEST_SECONDS", "ResourceService"]

MAX_OPERATIONS = 32  # spec (tools/resources): at most 32 concurrent operations
REQUEST_SECONDS = 25.0  # spec: each request expires after 25 seconds
MAX_BODY_BYTES = 1 << 20  # an envelope is a few KiB; storage writes are at most 128 KiB of text
MAX_ID_CHARS = 256  # tenant, session and call ids Brain sends are far shorter

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _BadRequest(Exception):
    pass


def _result(text: str, *, error: bool = False, unknown: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if error:
        result["is_error"] = True
    if unknown:
        result["unknown_outcome"] = True
    return result


class ResourceService:
    def __init__(self, tools: Sequence[ServiceTool], *, key: str, max_operations: int = MAX_OPERATIONS) -> None:
        names = [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools share a name: {sorted(names)}")
        self.tools = {tool.name: tool for tool in tools}
        self._validators = {tool.name: Draft202012Validator(tool.input_schema) for tool in tools}
        self._key = key
        self._max_operations = max_operations
        self.active = 0  # calls running now

    def __repr__(self) -> str:  # never the key
        return f"ResourceService(tools={sorted(self.tools)})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        try:
            if path == "/health" and method == "GET":
                await _json(send, 200, {"status": "ok"})
            elif not path.startswith("/tools/"):
                await _json(send, 404, {"error": "not found"})
            elif not hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {self._key}".encode()):
                await _json(send, 401, {"error": "unauthorized"})
            elif method != "POST":
                await _json(send, 405, {"error": "method not allowed"})
            elif path.removeprefix("/tools/") not in self.tools:
                await _json(send, 404, {"error": "unknown tool"})
            else:
                tool = self.tools[path.removeprefix("/tools/")]
                await _json(send, 200, await self._call(tool, await _body(receive)))
        except _BadRequest as exc:
            await _json(send, 400, {"error": str(exc)})

    async def _call(self, tool: ServiceTool, envelope: dict[str, Any]) -> dict[str, Any]:
        for field in ("tenant_id", "session_id", "call_id"):
            value = envelope.get(field)
            if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
                raise _BadRequest(f"{field} must be a non-empty string")
        arguments = envelope.get("arguments")
        if not isinstance(arguments, dict):
            raise _BadRequest("arguments must be an object")
        problem = next(iter(self._validators[tool.name].iter_errors(arguments)), None)
        if problem is not None:
            return _result(f"invalid arguments for {tool.name}: {str(problem.message)[:300]}", error=True)
        if self.active >= self._max_operations:
            return _result(f"the service is busy (at most {self._max_operations} operations at once)", error=True)
        call = Call(envelope["tenant_id"], envelope["session_id"], envelope["call_id"], arguments)
        self.active += 1
        try:
            async with asyncio.timeout(REQUEST_SECONDS):
                return await tool.handler(call)
        except TimeoutError:
            return _result(f"{tool.name} took longer than {REQUEST_SECONDS:.0f} s", error=True, unknown=tool.mutates)
        finally:
            self.active -= 1


async def _body(receive: Receive) -> dict[str, Any]:
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if len(raw) > MAX_BODY_BYTES:
            raise _BadRequest("body too large")
        if not message.get("more_body"):
            break
    try:
        value = json.loads(raw)
    except ValueError:
        raise _BadRequest("body must be JSON") from None
    if not isinstance(value, dict):
        raise _BadRequest("body must be a JSON object")
    return value


async def _json(send: Send, status: int, value: Any) -> None:
    body = json.dumps(value).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
