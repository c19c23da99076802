"""Tool registry: which tools a tenant may use, their descriptors, and dispatch of calls.

This version authorizes and describes tools; dispatch to HTTP, SSE and MCP services arrives
with the transports, so every call currently ends in an `is_error` result naming the tool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from brainsite.hostconfig import ToolBindingConfig

__all__ = ["CallContext", "catalog_for", "descriptors_for", "error_result", "install", "invoke"]

_bindings: dict[str, ToolBindingConfig] = {}


@dataclass(frozen=True, slots=True)
class CallContext:
    """The trusted identity of one call, kept apart from the model's arguments."""

    tenant: str
    session_id: str
    call_id: str
    tools: tuple[str, ...]  # the tools enabled for the session
    progress: Callable[[Any], None]


def install(bindings: Sequence[ToolBindingConfig]) -> None:
    """Replace the bindings the registry serves (called at startup)."""
    _bindings.clear()
    _bindings.update({binding.name: binding for binding in bindings})


def _allowed(tenant: str) -> list[ToolBindingConfig]:
    return [binding for binding in _bindings.values() if tenant in binding.tenants]


def catalog_for(tenant: str) -> list[dict[str, Any]]:
    """Descriptors of every tool the tenant may enable; never URLs or credentials."""
    return [binding.descriptor() for binding in sorted(_allowed(tenant), key=lambda b: b.name)]


def descriptors_for(tenant: str, names: Sequence[str]) -> list[dict[str, Any]] | None:
    """Descriptors for `names` in order, or None when one is not available to the tenant."""
    allowed = {binding.name: binding for binding in _allowed(tenant)}
    if any(name not in allowed for name in names):
        return None
    return [allowed[name].descriptor() for name in names]


def error_result(message: str, *, unknown_outcome: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "is_error": True}
    if unknown_outcome:
        result["unknown_outcome"] = True
    return result


async def invoke(context: CallContext, name: str, arguments: Any) -> dict[str, Any]:
    """Run one call and return the model-visible result. Never raises for tool failures."""
    binding = _bindings.get(name)
    if name not in context.tools or binding is None or context.tenant not in binding.tenants:
        return error_result(f"tool {name!r} is not enabled for this session")
    return error_result(f"tool {name!r} is not available: no transport can dispatch it yet")
