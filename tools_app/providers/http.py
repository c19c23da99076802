"""`http`: an HTTP endpoint speaking Brain's tool envelope (JSON or SSE), with the operations the
operator lists. Calls go through the pooled HTTP/SSE transport; the envelope also carries the
binding's alias, the operation and the binding's parameters beside the model's arguments."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field, field_validator, model_validator

from runners.protocol import ToolDescriptor

from ..transports.base import (
    HEADER_TIMEOUT_ENV,
    HEADER_TIMEOUT_SECONDS,
    BindingScope,
    OutboundCall,
    Transport,
    TransportError,
)
from ..transports.http_sse import HttpSseTransport
from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import (
    MAX_OPERATIONS,
    CommonOptions,
    Operation,
    ParameterCheck,
    check_url,
    parse_options,
    select_operations,
)

__all__ = ["HttpOperation", "HttpOptions", "HttpProvider", "header_timeout"]


def header_timeout(timeout_seconds: float) -> float:
    """Response headers are due within 30 s (or $BRAIN_TOOL_HEADER_TIMEOUT), never after the call's deadline."""
    configured = float(os.environ.get(HEADER_TIMEOUT_ENV) or HEADER_TIMEOUT_SECONDS)
    return min(configured, timeout_seconds)


class HttpOperation(Operation):
    url: str = ""  # this operation's endpoint; the provider's `url` when empty

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value) if value else value


class HttpOptions(CommonOptions):
    url: str = ""
    token_env: str = ""
    operations: list[HttpOperation] = Field(min_length=1, max_length=MAX_OPERATIONS)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value) if value else value

    @model_validator(mode="after")
    def _endpoints(self) -> HttpOptions:
        names = [operation.name for operation in self.operations]
        if len(set(names)) != len(names):
            raise ValueError("operations: an operation name is listed twice")
        if not self.url and any(not operation.url for operation in self.operations):
            raise ValueError("url: is required unless every operation has its own url")
        return self


async def send_provider_call(
    transport: Transport, call: ProviderCall, *, url: str, token: str, max_output_bytes: int, timeout_seconds: float
) -> Any:
    """One provider call through a tool transport: the trusted identity and the binding's scope
    beside the arguments; a transport failure is a ProviderError that says whether it was sent."""
    outbound = OutboundCall(
        url=url,
        remote_name=call.operation,
        token=token,
        tenant=call.tenant,
        session_id=call.session_id,
        call_id=call.call_id,
        arguments=call.arguments,
        progress=call.progress,
        max_output_bytes=max_output_bytes,
        header_timeout=header_timeout(timeout_seconds),
        binding=BindingScope(alias=call.alias, operation=call.operation, parameters=call.parameters),
    )
    try:
        return await transport.call(outbound)
    except TransportError as exc:
        raise ProviderError(str(exc), reached=exc.reached) from exc


class HttpProvider(ToolProvider):
    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_options(HttpOptions, options)
        self._token = self.environment.secret(self.settings.token_env) if self.settings.token_env else ""
        self._parameters = ParameterCheck(self.settings.parameters_schema)
        self._operations = {operation.name: operation for operation in self.settings.operations}
        self._descriptors = {operation.name: operation.descriptor() for operation in self.settings.operations}
        self._transport = HttpSseTransport()

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        self._parameters.check(parameters)
        return select_operations(self._descriptors, operations)

    async def handle(self, call: ProviderCall) -> object:
        operation = self._operations[call.operation]
        return await send_provider_call(
            self._transport,
            call,
            url=operation.url or self.settings.url,
            token=self._token,
            max_output_bytes=self.settings.max_output_bytes,
            timeout_seconds=self.timeout_seconds,
        )

    async def aclose(self) -> None:
        await self._transport.aclose()
