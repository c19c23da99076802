"""Wire schemas of the tools API, named as the contract's components (openapi.json): the
catalog and the runtime executor protocol. `Tool` and `Status` come from foundation.wire."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from pydantic import Field

from foundation.wire import Status, StrictSchema, Tool, WireSchema
from runners.protocol import ToolDescriptor
from toolkits.events import EVENT_KIND_PATTERN

from .invocation.results import Outcome
from .providers.tasks.db import TaskFields

__all__ = [
    "Call",
    "CatalogBody",
    "CredentialBody",
    "StatusBody",
    "TaskPageBody",
    "Command",
    "Content",
    "ExecutorCredential",
    "ExecutorRegistration",
    "ExtensionEvent",
    "Reply",
    "Result",
    "Status",
    "Tool",
    "TaskItem",
    "TaskPage",
    "ToolCatalog",
    "ToolEvent",
    "ToolResult",
    "ToolScope",
]


class ToolCatalog(WireSchema):
    tools: list[Tool]


class ExecutorRegistration(StrictSchema):
    binding: str
    tools: list[Tool]
    session: str | None = None


class ExecutorCredential(WireSchema):
    id: str
    token: str


class ToolScope(WireSchema):
    tenant_id: str
    session_id: str
    call_id: str
    brain_url: str | None = None
    inspection_token: str | None = None
    # additive, a placed tool's call (README, "Tool environments"): the environment, the committed
    # position of its tool.call (decimal text), its deadline (RFC 3339) and its options (JSON text)
    environment: str | None = None
    sequence: str | None = None
    deadline: str | None = None
    options: str | None = None


class Command(WireSchema):
    """The `data:` of one SSE frame of GET /executors/{id}/commands (and of an RPC frame)."""

    type: str  # ready, ping, call or cancel
    connection: str
    call_id: str | None = None
    tool: str | None = None
    arguments: object = None
    scope: ToolScope | None = None


class Content(StrictSchema):
    type: str
    text: str | None = None
    data: str | None = None
    mime_type: str | None = None


class Result(StrictSchema):
    content: list[Content]
    is_error: bool | None = None
    unknown_outcome: bool | None = None
    structured_content: object = None


class ExtensionEvent(StrictSchema):
    """A placed call's extension event (additive to the contract): answered once committed."""

    kind: str
    data: object = None


class Reply(StrictSchema):
    connection: str
    call_id: str
    progress: object = None
    result: Result | None = None
    event: ExtensionEvent | None = None  # additive: Brain answers once the event is committed


class Call(WireSchema):
    """`tool.call` event data."""

    id: str
    name: str
    arguments: object
    environment: str | None = None  # additive: the environment the harness named (placed tools)


class ToolResult(WireSchema):
    """`tool.result` event data."""

    call_id: str
    result: Result
    outcome: Outcome | None = None  # additive: how the call ended (every outcome Brain records)
    environment: str | None = None  # additive: a placed tool's environment


class ToolEvent(WireSchema):
    """`tool.event` event data (additive): a placed call's committed extension event."""

    call_id: str
    environment: str
    kind: str = Field(pattern=EVENT_KIND_PATTERN)
    data: object


class TaskItem(WireSchema):
    """One task of the caller's tenant (additive to the contract: GET /tasks)."""

    id: int
    parent_id: int | None
    title: str
    description: str
    status: str
    created_at: str
    updated_at: str


class TaskPage(WireSchema):
    tasks: list[TaskItem]
    next_after: int | None = None


# What the handlers return, validated by ninja against the Schemas above.


class CatalogBody(TypedDict):
    tools: list[ToolDescriptor]


class TaskPageBody(TypedDict):
    tasks: list[TaskFields]
    next_after: NotRequired[int]


class CredentialBody(TypedDict):
    id: str
    token: str


class StatusBody(TypedDict):
    status: str
