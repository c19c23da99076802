"""An MCP server (the mcp SDK, Streamable HTTP) whose tool answers with structured content
holding an integer beyond 64 bits: valid JSON that the frame rules and orjson refuse."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

HUGE = 2**64


def build_app() -> Any:
    """The Streamable HTTP app at /mcp, without auth."""
    server = MCPServer("brain-hostile-tools")

    @server.tool(description="Answer with an identifier beyond 64 bits.")
    def huge() -> dict[str, Any]:
        return {"id": HUGE}

    return server.streamable_http_app()
