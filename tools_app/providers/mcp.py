"""`mcp` and `mcp_stdio`: tools of an MCP server, over Streamable HTTP or as an owned stdio
process, selected by an explicit allow-list (`tools`).

Descriptors come from `descriptors` in the options when the operator writes them, else from
discovery: the first bind lists the server's tools once (30 s deadline, on a connection of its
own) and the result is kept for the life of the process; a failed discovery is retried by the
next bind. A saved session whose descriptors differ from the current ones is refused before any
call is sent (SessionBindings compares them). Every call opens its own MCP session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from mcp import types
from pydantic import Field, field_validator, model_validator

from runners.protocol import ToolDescriptor

from ..transports.base import OutboundCall, TransportError
from ..transports.mcp import McpTransport
from ..transports.mcp_stdio import McpStdioTransport, stdio_environment
from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .http import send_provider_call
from .options import (
    MAX_OPERATIONS,
    OPERATION_NAME,
    CommonOptions,
    Operation,
    ParameterCheck,
    check_url,
    parse_options,
    select_operations,
)

__all__ = ["DISCOVERY_SECONDS", "McpOptions", "McpProvider", "McpStdioOptions", "McpStdioProvider"]

DISCOVERY_SECONDS = 30.0  # spec (tools-mcp): discovery fails after 30 s
MAX_DISCOVERY_BYTES = 4 << 20  # a tools/list answer larger than this is refused
ENV_NAME_LENGTH = 128


class _McpOptions(CommonOptions):
    tools: list[str] = Field(min_length=1, max_length=MAX_OPERATIONS)  # spec: select MCP names explicitly
    descriptors: list[Operation] | None = None  # configured descriptors: no discovery

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[str]) -> list[str]:
        for name in value:
            if not OPERATION_NAME.fullmatch(name):
                raise ValueError(f"tool name {name[:64]!r} must be 1-64 of A-Z a-z 0-9 _ -")
        if len(set(value)) != len(value):
            raise ValueError("a tool is listed twice")
        return value

    @model_validator(mode="after")
    def _described(self) -> _McpOptions:
        if self.descriptors is not None and sorted(d.name for d in self.descriptors) != sorted(self.tools):
            raise ValueError("descriptors: must describe exactly the tools listed in tools")
        return self


class McpOptions(_McpOptions):
    url: str
    token_env: str = ""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value)


class McpStdioOptions(_McpOptions):
    command: list[str] = Field(min_length=1)
    env: list[str] = Field(default_factory=list)  # names of Brain's variables the server also gets

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0] or any("\x00" in part for part in value):
            raise ValueError("command[0] must be a program, and no argument may hold a NUL byte")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or len(name) > ENV_NAME_LENGTH or "=" in name or "\x00" in name:
                raise ValueError(f"{name[:64]!r} is not an environment variable name")
        return value


class McpProvider(ToolProvider):
    """Tools of a remote MCP server over Streamable HTTP."""

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings: _McpOptions = self._parse(options)
        self._parameters = ParameterCheck(self.settings.parameters_schema)
        self._served: dict[str, ToolDescriptor] | None = None
        if self.settings.descriptors is not None:
            described = {operation.name: operation.descriptor() for operation in self.settings.descriptors}
            self._served = {name: described[name] for name in self.settings.tools}
        self._discovery = asyncio.Lock()
        self._transport = self._make_transport()

    def _parse(self, options: Mapping[str, object]) -> _McpOptions:
        settings = parse_options(McpOptions, options)
        self._url = settings.url
        self._token = self.environment.secret(settings.token_env) if settings.token_env else ""
        return settings

    def _make_transport(self) -> McpTransport:
        return McpTransport()

    def _outbound(self, **fields: Any) -> OutboundCall:
        return OutboundCall(url=self._url, token=self._token, **fields)

    async def _operations(self) -> dict[str, ToolDescriptor]:
        if self._served is not None:
            return self._served
        async with self._discovery:
            if self._served is None:
                self._served = await self._discover()
            return self._served

    async def _discover(self) -> dict[str, ToolDescriptor]:
        probe = self._outbound(
            remote_name="",
            tenant="",
            session_id="",
            call_id="",
            arguments={},
            progress=lambda data: None,
            max_output_bytes=MAX_DISCOVERY_BYTES,
            header_timeout=DISCOVERY_SECONDS,
        )
        try:
            async with asyncio.timeout(DISCOVERY_SECONDS):
                listed = await self._transport.list_tools(probe)
        except TimeoutError:
            raise ProviderError(f"discovery took longer than {DISCOVERY_SECONDS:g} s", reached=False) from None
        except TransportError as exc:
            raise ProviderError(str(exc), reached=False) from exc
        remote = {tool.name: tool for tool in listed}
        missing = [name for name in self.settings.tools if name not in remote]
        if missing:
            raise ProviderError(f"the MCP server has no tool named {', '.join(missing)}", reached=False)
        return {name: _descriptor(remote[name]) for name in self.settings.tools}

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        self._parameters.check(parameters)
        return select_operations(await self._operations(), operations)

    async def handle(self, call: ProviderCall) -> object:
        return await send_provider_call(
            self._transport,
            call,
            url=self._url,
            token=self._token,
            max_output_bytes=self.settings.max_output_bytes,
            timeout_seconds=self.timeout_seconds,
        )

    async def aclose(self) -> None:
        await self._transport.aclose()


class McpStdioProvider(McpProvider):
    """Tools of an MCP server the provider runs itself, one owned process per operation, in a
    private directory under `<data_dir>/providers/<name>/`."""

    def _parse(self, options: Mapping[str, object]) -> _McpOptions:
        settings = parse_options(McpStdioOptions, options)
        missing = [name for name in settings.env if not self.environment.environ.get(name)]
        if missing:
            raise ValueError(f"env: environment variable {missing[0]} is not set")
        self._url = "stdio:"  # the transport ignores it: each operation starts the command
        self._token = ""
        self._stdio = McpStdioTransport(
            settings.command,
            stdio_environment(self.environment.environ, settings.env),
            self.environment.data_dir / "providers" / self.name,
        )
        return settings

    def _make_transport(self) -> McpTransport:
        return self._stdio


def _descriptor(tool: types.Tool) -> ToolDescriptor:
    descriptor: ToolDescriptor = {
        "name": tool.name,
        "description": tool.description or tool.title or tool.name,
        "input_schema": tool.input_schema,
    }
    if tool.output_schema:
        descriptor["output_schema"] = tool.output_schema
    return descriptor
