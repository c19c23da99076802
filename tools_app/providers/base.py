"""The tool provider contract.

A provider is a class named by dotted path in the `BRAIN_TOOL_PROVIDERS` setting, built once at
startup with the operator's options. A session binds it in `config.bindings` with an alias,
`operations` and `parameters`: `authorize` decides whether the tenant may use it, `bind`
validates the parameters and returns the descriptors of the chosen operations (the model sees
`<alias>_<operation>`), and `handle` runs one call. The trusted identity (tenant, session, call,
alias), the binding's parameters and its private credential reach `handle` apart from the
model's arguments. Cancellation (an interrupt) arrives as asyncio cancellation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runners.protocol import ToolDescriptor

__all__ = ["ProviderCall", "ProviderError", "ToolProvider"]


class ProviderError(Exception):
    """A call that produced no usable result; `reached`: the operation may have happened."""

    def __init__(self, message: str, *, reached: bool) -> None:
        super().__init__(message)
        self.reached = reached


@dataclass(frozen=True, slots=True)
class ProviderCall:
    tenant: str
    session_id: str
    call_id: str
    alias: str
    operation: str  # the operation's name, without the alias prefix
    arguments: dict[str, Any]  # the model's arguments, already checked against the descriptor
    parameters: Any  # the binding's parameters, as bind() accepted them
    credential: Any | None  # the binding's private credential, decrypted; None without one
    progress: Callable[[Any], None]

    def __repr__(self) -> str:  # never the credential
        return f"ProviderCall(alias={self.alias!r}, operation={self.operation!r}, call_id={self.call_id!r})"


class ToolProvider(ABC):
    def __init__(self, name: str, options: Mapping[str, Any]) -> None:
        self.name = name
        self.options = options

    def authorize(self, tenant: str) -> bool:
        """Whether `tenant` may bind this provider (default: every tenant the options list in
        `tenants`, or all when the options name none)."""
        tenants = self.options.get("tenants")
        return tenants is None or tenant in tenants

    @abstractmethod
    def bind(self, *, tenant: str, operations: Sequence[str], parameters: Any) -> list[ToolDescriptor]:
        """Descriptors (unprefixed names) for `operations` (all when empty); raise ValueError
        with a message for the client when the operations or parameters are not acceptable."""

    @abstractmethod
    async def handle(self, call: ProviderCall) -> Any:
        """The raw result object ({content, structured_content?, is_error?}); raise
        ProviderError when there is none."""

    async def aclose(self) -> None:  # noqa: B027  # optional: providers without resources have nothing to close
        """Release pooled connections and owned processes (shutdown)."""
