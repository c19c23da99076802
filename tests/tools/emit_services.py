"""Tool services that emit extension events during a call, for the emit tests: an HTTP service
answering JSON (/json) or SSE (/sse) and an MCP server built with the mcp SDK (tool `emitter`).

During a call each one posts an event with the capability Brain gave it (the `Brain-Emit-URL` and
`Brain-Emit-Token` headers, `_meta["brain.dev/emit"]`), then reads the session's log with a
read-only API token to see whether the event was there when its emit returned, then tries the
refusals (a forged token, an API token, a bad kind, data over 16 KiB). It reports all of it as
the call's result and keeps the capability, so a test can use it once the call has ended.
`through` sends all of it to another address of Brain (in a fleet, an instance that does not own
the session)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp.server.mcpserver import Context, MCPServer

from tests.tools.servers import Receive, Scope, Send

KIND = "service_step"
TOO_BIG = 17 * 1024  # past the 16 KiB bound of one event's data


@dataclass
class EmitProbe:
    """What the services share: the read-only token they check the log with, and the
    capabilities they were given (url, token), in call order."""

    reader_token: str = ""
    given: list[tuple[str, str]] = field(default_factory=list)
    through: str = ""  # another address of Brain to post to (an instance that does not own the session)

    async def run(self, url: str, token: str, via: str) -> dict[str, Any]:
        self.given.append((url, token))
        base, _, rest = url.partition("/sessions/")
        if self.through:
            base = self.through
            url = f"{base}/sessions/{rest}"
        session_id = rest.split("/", 1)[0]
        forged = token[:-1] + ("0" if token[-1] != "0" else "1")
        async with httpx.AsyncClient(timeout=15) as client:

            async def post(body: Any, bearer: str) -> httpx.Response:
                return await client.post(url, json=body, headers={"Authorization": f"Bearer {bearer}"})

            emitted = await post({"kind": KIND, "data": {"via": via}}, token)
            page = await client.get(
                f"{base}/sessions/{session_id}/events", headers={"Authorization": f"Bearer {self.reader_token}"}
            )
            in_log = [e["data"] for e in page.json()["events"] if e["type"] == "tool.event"]
            return {
                "emit": emitted.status_code,
                "answer": emitted.json(),
                "in_log": in_log,
                "forged": (await post({"kind": KIND, "data": {}}, forged)).status_code,
                "api_token": (await post({"kind": KIND, "data": {}}, self.reader_token)).status_code,
                "bad_kind": (await post({"kind": "Not A Kind", "data": {}}, token)).status_code,
                "too_big": (await post({"kind": KIND, "data": {"pad": "x" * TOO_BIG}}, token)).status_code,
            }


class EmittingService:
    """POST /json answers JSON, POST /sse answers a progress event then the result over SSE."""

    def __init__(self, probe: EmitProbe) -> None:
        self.probe = probe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        headers = {key.decode().lower(): value.decode() for key, value in scope["headers"]}
        path = scope["path"]
        report = await self.probe.run(headers.get("brain-emit-url", ""), headers.get("brain-emit-token", ""), path)
        result = json.dumps({"content": [{"type": "text", "text": "emitted"}], "structured_content": report})
        if path == "/sse":
            body = f'event: progress\ndata: {{"step": 1}}\n\nevent: result\ndata: {result}\n\n'.encode()
            content_type = b"text/event-stream"
        else:
            body, content_type = result.encode(), b"application/json"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        await send({"type": "http.response.body", "body": body})


def build_mcp_app(probe: EmitProbe, *, token: str) -> Any:
    server = MCPServer("brain-emit-tools")

    @server.tool(description="Emit an event while running.")
    async def emitter(ctx: Context) -> str:
        meta = ctx.request_context.meta
        dumped: dict[str, Any] = (
            dict(meta) if isinstance(meta, dict) else (meta.model_dump(by_alias=True) if meta is not None else {})
        )
        capability: dict[str, str] = dumped.get("brain.dev/emit") or {}
        return json.dumps(await probe.run(capability.get("url", ""), capability.get("token", ""), "mcp"))

    app = server.streamable_http_app(json_response=True)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await app(scope, receive, send)

    return guarded
