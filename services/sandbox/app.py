"""The sandbox tool service's ASGI app: `POST /tools/sandbox_{create,exec,inspect,terminate}`
with Brain's envelope (`tenant_id`, `session_id`, `call_id`, `arguments`) and its bearer token,
`GET /health`. Handled failures are 200 with `is_error` (and `unknown_outcome` when a provider
may have acted), as the tools protocol asks; a non-2xx means the request itself was refused.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from toolkits.sandbox.tools import OPERATIONS, BackendConfig, SandboxTools, Scope, descriptors

__all__ = ["MAX_BODY_BYTES", "SandboxService", "catalog"]

MAX_BODY_BYTES = 64 << 10  # a call carries a handle and a command of at most 16 KiB
MAX_IDENTITY_CHARS = 256  # tenant and session ids are short names
TOOL_PREFIX = "sandbox_"

AsgiScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def catalog(
    base_url: str, tenant: str, providers: list[str], *, token_env: str = "SANDBOX_TOOL_TOKEN"
) -> list[dict[str, Any]]:
    """Host-config descriptors for the four tools at `base_url`, create offering `providers`."""
    served = descriptors(providers=providers)
    return [
        {
            "name": f"{TOOL_PREFIX}{operation}",
            **served[operation],
            "url": f"{base_url.rstrip('/')}/tools/{TOOL_PREFIX}{operation}",
            "token_env": token_env,
            "tenants": [tenant],
            "timeout_seconds": 60,  # a command's 30 s deadline and a provider's slowest create
        }
        for operation in OPERATIONS
    ]


class _BadRequest(Exception):
    pass


class SandboxService:
    def __init__(self, tools: SandboxTools, configs: Mapping[str, BackendConfig], *, api_key: str) -> None:
        self.tools = tools
        self.configs = dict(configs)
        self._api_key = api_key

    def __repr__(self) -> str:  # never the key or a credential
        return f"SandboxService(providers={sorted(self.configs)})"

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        if path == "/health" and method == "GET":
            await _json(send, 200, {"status": "ok", "providers": sorted(self.configs)})
            return
        operation = path.removeprefix(f"/tools/{TOOL_PREFIX}")
        if not path.startswith("/tools/") or operation not in OPERATIONS:
            await _json(send, 404, {"error": "not found"})
        elif method != "POST":
            await _json(send, 405, {"error": "method not allowed"})
        elif not hmac.compare_digest(headers.get("authorization", "").encode(), f"Bearer {self._api_key}".encode()):
            await _json(send, 401, {"error": "unauthorized"})
        else:
            try:
                caller, arguments = _envelope(await _body(receive))
            except _BadRequest as exc:
                await _json(send, 400, {"error": str(exc)})
                return
            answer = await self.tools.run(operation, caller, arguments, self.configs)
            await _json(send, 200, answer.as_wire())

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.tools.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _envelope(body: object) -> tuple[Scope, dict[str, object]]:
    if not isinstance(body, dict):
        raise _BadRequest("body must be a JSON object")
    for key in ("tenant_id", "session_id", "call_id"):
        value = body.get(key)
        if not isinstance(value, str) or not 0 < len(value) <= MAX_IDENTITY_CHARS:
            raise _BadRequest(f"{key} must be a string of 1-{MAX_IDENTITY_CHARS} characters")
    arguments = body.get("arguments")
    if not isinstance(arguments, dict):
        raise _BadRequest("arguments must be an object")
    return Scope(body["tenant_id"], body["session_id"]), arguments


async def _body(receive: Receive) -> object:
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if len(raw) > MAX_BODY_BYTES:
            raise _BadRequest("body too large")
        if not message.get("more_body"):
            break
    try:
        return json.loads(raw)
    except ValueError:
        raise _BadRequest("body must be JSON") from None


async def _json(send: Send, status: int, value: object) -> None:
    body = json.dumps(value).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
