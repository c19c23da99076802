"""GET /catalog: the tools the caller's tenant may enable. The runtime executor routes
(/executors...): client-side runtime tools are not built into this server yet, so after the
usual authorization they answer 422 `unsupported`; their schemas are declared for the contract.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

from django.http import HttpRequest
from ninja import Path, Router
from pydantic import WithJsonSchema

from brainsite.application import request_brain
from brainsite.errors import Unsupported
from brainsite.principal import principal_of, require_manage

from .schemas import ExecutorCredential, ExecutorRegistration, Reply, Status, ToolCatalog

router = Router(tags=["tools"])

NOT_ENABLED = "runtime tool executors are not enabled on this server"
EXECUTOR_ID_PATTERN = "^[a-fA-F0-9]{32}$"  # contract

ExecutorId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": EXECUTOR_ID_PATTERN}), Path(description="Opaque executor ID.")
]

# Commands arrive as SSE frames whose `data:` is a Command.
_EVENT_STREAM: dict[str, Any] = {"responses": {200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}}}
# A WebSocket upgrade has no body.
_UPGRADE: dict[str, Any] = {"responses": {101: {"content": {}}}}


@router.get(
    "/catalog", response={200: ToolCatalog}, operation_id="catalog", summary="List available tools", exclude_unset=True
)
async def catalog(request: HttpRequest) -> dict[str, Any]:
    return {"tools": await request_brain(request).registry.acatalog_for(principal_of(request).tenant)}


@router.post(
    "/executors",
    response={201: ExecutorCredential},
    operation_id="registerExecutor",
    summary="Register runtime tools",
)
async def register_executor(request: HttpRequest, body: ExecutorRegistration) -> NoReturn:
    require_manage(principal_of(request))
    raise Unsupported(NOT_ENABLED)


@router.post(
    "/executors/{id}/close",
    response={200: Status},
    operation_id="unregisterExecutor",
    summary="Close a runtime executor",
)
async def unregister_executor(request: HttpRequest, id: ExecutorId) -> NoReturn:
    raise Unsupported(NOT_ENABLED)


@router.get(
    "/executors/{id}/commands",
    response={200: None},
    operation_id="executorCommands",
    summary="Connect a runtime executor",
    openapi_extra=_EVENT_STREAM,
)
async def executor_commands(request: HttpRequest, id: ExecutorId) -> NoReturn:
    raise Unsupported(NOT_ENABLED)


@router.post(
    "/executors/{id}/responses",
    response={200: Status},
    operation_id="executorReply",
    summary="Submit runtime progress or result",
)
async def executor_reply(request: HttpRequest, id: ExecutorId, body: Reply) -> NoReturn:
    raise Unsupported(NOT_ENABLED)


@router.get(
    "/executors/{id}/rpc",
    response={101: None},
    operation_id="executorRPC",
    summary="Connect bidirectional runtime RPC",
    openapi_extra=_UPGRADE,
)
async def executor_rpc(request: HttpRequest, id: ExecutorId) -> NoReturn:
    raise Unsupported(NOT_ENABLED)
