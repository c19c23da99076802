"""`manage.py mcp_tools --url URL --token-env NAME --tenant T --tools a,b`: print Brain tool
bindings for tools of a remote MCP server (Streamable HTTP) as a JSON array."""

from __future__ import annotations

import asyncio
import json
import os

import httpx2
from django.core.management.base import BaseCommand, CommandError, CommandParser
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from foundation.hostconfig import TOOL_NAME, ToolBindingConfig

DISCOVERY_SECONDS = 30.0  # spec: discovery fails after 30 s
MAX_TOOLS = 128  # spec: 1 to 128 remote tool names
MAX_PAGES = 100  # tools/list pages read at most (a server that never stops paginating)


async def _list_tools(url: str, token: str) -> dict[str, types.Tool]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(DISCOVERY_SECONDS), trust_env=True) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools: dict[str, types.Tool] = {}
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor else None
            page = await session.list_tools(params=params)  # type: ignore[arg-type]
            for tool in page.tools:
                tools[tool.name] = tool
            cursor = page.next_cursor
            if not cursor:
                break
        return tools


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", required=True, help="the server's Streamable HTTP endpoint")
        parser.add_argument("--token-env", default="", help="environment variable holding the server's API key")
        parser.add_argument("--tenant", required=True, help="the tenant allowed to use the tools")
        parser.add_argument("--tools", required=True, help="comma-separated remote tool names (1-128)")

    def handle(self, *args: str, **options: object) -> None:
        url, tenant = str(options["url"]), str(options["tenant"])
        names = [name.strip() for name in str(options["tools"]).split(",") if name.strip()]
        if not 1 <= len(names) <= MAX_TOOLS or len(set(names)) != len(names):
            raise CommandError(f"--tools must list 1 to {MAX_TOOLS} distinct names")
        token_env = str(options["token_env"])
        token = os.environ.get(token_env, "") if token_env else ""
        if token_env and not token:
            raise CommandError(f"environment variable {token_env} is not set")
        try:
            remote = asyncio.run(asyncio.wait_for(_list_tools(url, token), DISCOVERY_SECONDS))
        except TimeoutError:
            raise CommandError(f"discovery took longer than {DISCOVERY_SECONDS:g} s") from None
        except Exception as exc:  # the SDK's connection failures come as many types
            raise CommandError(f"could not list the server's tools: {type(exc).__name__}: {exc}") from exc
        missing = [name for name in names if name not in remote]
        if missing:
            raise CommandError(f"the server has no tool named {', '.join(missing)}")
        bindings = []
        for name in names:
            tool = remote[name]
            binding: dict[str, object] = {
                "name": name if TOOL_NAME.fullmatch(name) else _local_name(name),
                "description": tool.description or tool.title or name,
                "input_schema": tool.input_schema,
                "url": url,
                "mcp_tool": name,
            }
            if tool.output_schema:
                binding["output_schema"] = tool.output_schema
            if token_env:
                binding["token_env"] = token_env
            binding.update({"tenants": [tenant], "timeout_seconds": 300, "max_output_bytes": 1048576})
            try:
                ToolBindingConfig.model_validate(binding)
            except ValidationError as exc:
                raise CommandError(f"tool {name!r} cannot become a binding: {exc.errors()[0]['msg']}") from exc
            bindings.append(binding)
        self.stdout.write(json.dumps(bindings, indent=2))


def _local_name(name: str) -> str:
    """A valid Brain tool name for a remote name with other characters (rename it if you like)."""
    cleaned = "".join(char if char.isalnum() or char == "_" else "_" for char in name)
    return ("t_" + cleaned if not cleaned[:1].isalpha() else cleaned)[:64]
