"""Loopback tool services shared by the tool tests, and a registry installed per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest

from foundation.hostconfig import ToolBindingConfig
from tests.tools.mcp_server import MCP_TOKEN, build_app
from tests.tools.servers import LoopbackServer
from tools_app.invocation import CallContext
from tools_app.registry import ToolRegistry
from tools_app.tool_path import ToolPath, assemble_tool_path

TENANT = "acme"
OPEN_SCHEMA: dict[str, Any] = {"type": "object"}


@pytest.fixture(scope="session")
def mcp_url() -> Iterator[str]:
    server = LoopbackServer(build_app(), lifespan="on").start()
    yield server.url + "/mcp"
    server.stop()


def binding(name: str, url: str, **fields: Any) -> ToolBindingConfig:
    fields.setdefault("input_schema", OPEN_SCHEMA)
    return ToolBindingConfig.model_validate(
        {"name": name, "description": f"the {name} tool", "url": url, "tenants": [TENANT], **fields}
    )


Install = Callable[..., ToolPath]


@pytest.fixture
async def install() -> AsyncIterator[Install]:
    """A tool path over a catalog of these bindings (config-style, no admin store unless
    `admin_loader` is given); tokens default to MCP_TOKEN for token_env; the other options are
    assemble_tool_path's. Every path made is closed after the test."""
    made: list[ToolPath] = []

    def installer(*bindings: ToolBindingConfig, tokens: dict[str, str] | None = None, **options: Any) -> ToolPath:
        if tokens is None:
            tokens = {item.name: MCP_TOKEN for item in bindings if item.token_env}
        registry = ToolRegistry(bindings, tool_tokens=tokens, admin_loader=options.pop("admin_loader", None))
        made.append(assemble_tool_path(registry, **options))
        return made[-1]

    yield installer
    for tools in made:
        await tools.aclose()


class Progress(list[Any]):
    def __call__(self, data: Any) -> None:
        self.append(data)


def context(*tools: str, tenant: str = TENANT, progress: Progress | None = None, **fields: Any) -> CallContext:
    return CallContext(
        tenant=tenant,
        session_id=fields.pop("session_id", "5" * 32),
        call_id=fields.pop("call_id", "c" * 32),
        tools=tools,
        progress=progress if progress is not None else Progress(),
        **fields,
    )


def text_of(result: Mapping[str, Any]) -> str:
    return " ".join(item.get("text", "") for item in result["content"])
