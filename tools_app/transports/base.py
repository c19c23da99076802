"""What every tool transport shares: the outbound call, the error it raises, the registry of names.

Transports know nothing about tenants, sessions or schemas; the registry authorizes and validates.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from foundation.rest_templates import RestTemplate

__all__ = [
    "HEADER_TIMEOUT_ENV",
    "HEADER_TIMEOUT_SECONDS",
    "TRANSPORTS",
    "BindingScope",
    "OutboundCall",
    "Transport",
    "TransportError",
    "Transports",
]

HEADER_TIMEOUT_SECONDS = 30.0  # spec: response headers within 30 s, even for long SSE tools
HEADER_TIMEOUT_ENV = "BRAIN_TOOL_HEADER_TIMEOUT"  # tests shorten the header deadline with it

# Dotted paths, so a transport's dependencies load only when a binding uses it.
TRANSPORTS: dict[str, str] = {
    "http": "tools_app.transports.http_sse.HttpSseTransport",
    "mcp": "tools_app.transports.mcp.McpTransport",
    "rest": "tools_app.transports.rest.RestTransport",
}


class TransportError(Exception):
    """A call that produced no usable result.

    `reached` means the request may have reached the tool (the model sees `unknown_outcome`);
    `permanent` means repeating the same call cannot help (Brain never retries either way).
    """

    def __init__(self, message: str, *, reached: bool, permanent: bool = False) -> None:
        super().__init__(message)
        self.reached = reached
        self.permanent = permanent


@dataclass(frozen=True, slots=True)
class BindingScope:
    """The session binding a provider call belongs to: sent beside the arguments (HTTP envelope
    `binding`, `operation`, `parameters`; MCP `_meta["brain.dev/binding"]`)."""

    alias: str
    operation: str
    parameters: object  # as the binding was accepted; None when it has none

    def __repr__(self) -> str:
        return f"BindingScope(alias={self.alias!r}, operation={self.operation!r})"


@dataclass(frozen=True, slots=True)
class OutboundCall:
    """One dispatch: where to send it, with which credential, identity and limits."""

    url: str
    remote_name: str  # the tool's name at the service (mcp_tool for MCP bindings)
    token: str  # bearer token, empty for none; never logged
    tenant: str
    session_id: str
    call_id: str
    arguments: dict[str, object]
    progress: Callable[[object], None]
    max_output_bytes: int
    header_timeout: float  # seconds until response headers must have arrived
    traceparent: str = ""
    inspection_token: str = ""
    brain_url: str = ""
    binding: BindingScope | None = None  # set for calls of an installed provider's binding
    rest: RestTemplate | None = None  # set for transport rest: the request the arguments fill
    # a placed call's capability to post its extension events (tools_app.environments.emits)
    emit_url: str = ""
    emit_token: str = ""  # never logged

    def __repr__(self) -> str:
        return f"OutboundCall(url={self.url!r}, call_id={self.call_id!r})"


class Transport(ABC):
    """Sends one call and returns the tool's raw result object (validated by the registry)."""

    @abstractmethod
    async def call(self, call: OutboundCall) -> object: ...

    async def aclose(self) -> None:  # noqa: B027  # optional hook: transports without pools have nothing to close
        pass


class Transports:
    """The transport instances of one registry, built on first use from TRANSPORTS; `given`
    replaces some by name (a test injects one whose HTTP client has a MockTransport)."""

    def __init__(self, given: Mapping[str, Transport] | None = None) -> None:
        self._instances: dict[str, Transport] = dict(given or {})

    def get(self, name: str) -> Transport:
        instance = self._instances.get(name)
        if instance is None:
            module_name, _, class_name = TRANSPORTS[name].rpartition(".")
            factory: Callable[[], Transport] = getattr(importlib.import_module(module_name), class_name)
            instance = self._instances[name] = factory()
        return instance

    async def aclose(self) -> None:
        instances = list(self._instances.values())
        self._instances.clear()
        for instance in instances:
            await instance.aclose()
