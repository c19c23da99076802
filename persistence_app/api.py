"""POST /flush, GET /sync, POST /restore. External persistence is not built into this server
yet, so after the usual authorization and session lookup they answer 422 `unsupported`, the
spec's answer when `persistence` is not configured."""

from __future__ import annotations

from typing import Annotated, NoReturn

from django.http import HttpRequest
from ninja import Path, Router
from pydantic import WithJsonSchema

from brainsite.application import request_brain
from brainsite.errors import Unsupported
from brainsite.principal import principal_of, require_manage
from sessions_app import services

from .schemas import Restore, SyncStatus

router = Router(tags=["persistence"])

NOT_CONFIGURED = "external persistence is not configured on this server"
SESSION_ID_PATTERN = "^[a-fA-F0-9]{32}$"  # contract; a malformed id is 404 (services), so unchecked here

SessionId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": SESSION_ID_PATTERN}), Path(description="Opaque session ID.")
]

# A restore answers the restored Session, a component the sessions app declares; the layer
# rules keep its schema out of this app, so the document refers to it by name.
_SESSION_RESPONSE = {
    "responses": {200: {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}}}}
}


@router.post("/sessions/{id}/flush", response={200: SyncStatus}, operation_id="flush", summary="Flush external state")
async def flush_session(request: HttpRequest, id: SessionId) -> NoReturn:
    principal = principal_of(request)
    require_manage(principal)
    await services.get_session(request_brain(request).engine, principal, id)
    raise Unsupported(NOT_CONFIGURED)


@router.get(
    "/sessions/{id}/sync", response={200: SyncStatus}, operation_id="sync", summary="Read synchronization status"
)
async def sync_status(request: HttpRequest, id: SessionId) -> NoReturn:
    await services.get_session(request_brain(request).engine, principal_of(request), id)
    raise Unsupported(NOT_CONFIGURED)


@router.post(
    "/sessions/{id}/restore",
    response={200: None},
    operation_id="restore",
    summary="Restore a checkpoint",
    openapi_extra=_SESSION_RESPONSE,
)
async def restore_session(request: HttpRequest, id: SessionId, body: Restore) -> NoReturn:
    principal = principal_of(request)
    require_manage(principal)
    await services.get_session(request_brain(request).engine, principal, id)
    raise Unsupported(NOT_CONFIGURED)
