"""An MCP server built with the mcp SDK for the tool tests (Streamable HTTP, served by uvicorn)."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import AudioContent, CallToolResult, ImageContent, TextContent
from pydantic import BaseModel

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-an-image").decode()
MCP_TOKEN = "mcp-test-token-0123456789abcdef"
# `chatter` stops by itself after this: the server keeps running a tool whose client went away
CHATTER_SECONDS = 10.0
CHATTER_PAUSE = 0.001  # between progress messages, so a chatter nobody listens to stays cheap


class Answer(BaseModel):
    approved: bool


def build_server() -> MCPServer:
    server = MCPServer("brain-test-tools")

    @server.tool(description="Echo text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Report the scope metadata and the progress token Brain sent.")
    def whoami(ctx: Context) -> str:
        meta = ctx.request_context.meta
        dumped = meta if isinstance(meta, dict) else (meta.model_dump(by_alias=True) if meta is not None else {})
        token = dumped.get("progressToken", dumped.get("progress_token"))
        return json.dumps({"scope": dumped.get("brain.dev/scope"), "progress_token": token})

    @server.tool(description="Report progress three times, then finish.")
    async def work(steps: int, ctx: Context) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
        return f"done after {steps} steps"

    @server.tool(description="Return an image.")
    def picture() -> CallToolResult:
        return CallToolResult(content=[ImageContent(type="image", data=PNG, mime_type="image/png")])

    @server.tool(description="Return structured content.")
    def measure(text: str) -> dict[str, Any]:
        return {"length": len(text)}

    @server.tool(description="Fail as a tool error.")
    def broken() -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="it broke")], is_error=True)

    @server.tool(description="Return audio, which Brain does not support.")
    def sound() -> CallToolResult:
        return CallToolResult(content=[AudioContent(type="audio", data=PNG, mime_type="audio/wav")])

    @server.tool(description="Ask the user for input.")
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("Approve?", Answer)
        return f"answered {answer.action}"

    @server.tool(description="Fail with a JSON-RPC error instead of a result.")
    def protocol() -> str:
        raise MCPError(code=-32603, message="server exploded")

    @server.tool(description="Sleep, then answer.")
    async def nap(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "rested"

    @server.tool(description="Return a lot of text.")
    def big(n: int) -> str:
        return "y" * n

    @server.tool(description="Report big progress messages for a long time before answering.")
    async def chatter(size: int, ctx: Context) -> str:
        deadline = asyncio.get_running_loop().time() + CHATTER_SECONDS
        step = 0
        while asyncio.get_running_loop().time() < deadline:
            step += 1
            await ctx.report_progress(step, None, "p" * size)
            await asyncio.sleep(CHATTER_PAUSE)
        return "still here"

    return server


def build_app(*, token: str = MCP_TOKEN, json_response: bool = False) -> Any:
    """The Streamable HTTP app at /mcp, refusing requests without the bearer token; with
    json_response, results come as one JSON body instead of an SSE stream."""
    app = build_server().streamable_http_app(json_response=json_response)

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"authorization") != f"Bearer {token}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    return guarded
