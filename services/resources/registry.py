"""What a tool family gives the resources service: `ServiceTool`s (a descriptor, an async
handler of one call, and whether the call changes anything), built from the service's
environment by a `ToolSource`. The service trusts `Call.tenant_id` and `Call.session_id` (from
Brain's authenticated envelope), never the model's arguments, which are checked against the
descriptor's input_schema before the handler runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Call", "Handler", "ServiceTool", "ToolSource"]


@dataclass(frozen=True, slots=True)
class Call:
    tenant_id: str
    session_id: str
    call_id: str
    arguments: dict[str, Any]


# One call's result in the tools protocol's shape: {content, structured_content?, is_error?,
# unknown_outcome?}. A handler reports a failure it handled as a result with is_error.
Handler = Callable[[Call], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class ServiceTool:
    name: str  # the tool's name in Brain's host config (web_fetch, storage_read, ...)
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    # a call that may change something (storage_write, storage_delete): when it fails or runs
    # past the deadline after its handler started, the result is an unknown outcome
    mutates: bool = False


# A tool family: its tools as the environment configures them (none when it is not configured).
# It raises ValueError naming the variable at fault, which stops the service before it listens.
ToolSource = Callable[[Mapping[str, str]], list[ServiceTool]]
