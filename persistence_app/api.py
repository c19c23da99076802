"""POST /flush, GET /sync, POST /restore: the checkpoint archive of the host config's
`persistence` block. Without one they answer 422 `unsupported` after the usual authorization
and session lookup, as the spec says."""

from __future__ import annotations

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Router

from foundation.errors import Unsupported
from foundation.principal import principal_of, require_manage
from foundation.wire import SessionId
from persistence_app.app_object import PersistenceAppObject, request_brain
from persistence_app.archiving import ArchiveService, SyncStatusBody
from sessions_app.operations import check_session_id

from .schemas import Restore, SyncStatus

router = Router(tags=["persistence"])

NOT_CONFIGURED = "external persistence is not configured on this server"

# A restore answers the restored Session, a component the sessions app declares; the layer
# rules keep its schema out of this app, so the document refers to it by name.
_SESSION_RESPONSE = {
    "responses": {200: {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}}}}
}


def _archive(brain: PersistenceAppObject) -> ArchiveService:
    if brain.archive is None:
        raise Unsupported(NOT_CONFIGURED)
    return brain.archive


@router.post("/sessions/{id}/flush", response={200: SyncStatus}, operation_id="flush", summary="Flush external state")
async def flush_session(request: HttpRequest, id: SessionId) -> SyncStatusBody:
    brain = request_brain(request)
    principal = principal_of(request)
    require_manage(principal)
    record = await brain.engine.session_record(principal.tenant, check_session_id(principal, id))
    archive = _archive(brain)
    await brain.engine.flush()  # the published record carries the session's current status
    return await archive.flush(record.id)


@router.get(
    "/sessions/{id}/sync", response={200: SyncStatus}, operation_id="sync", summary="Read synchronization status"
)
async def sync_status(request: HttpRequest, id: SessionId) -> SyncStatusBody:
    brain = request_brain(request)
    principal = principal_of(request)
    record = await brain.engine.session_record(principal.tenant, check_session_id(principal, id))
    return await _archive(brain).status(record.id)


@router.post(
    "/sessions/{id}/restore",
    response={200: None},
    operation_id="restore",
    summary="Restore a checkpoint",
    openapi_extra=_SESSION_RESPONSE,
)
async def restore_session(request: HttpRequest, id: SessionId, body: Restore) -> HttpResponse:
    brain = request_brain(request)
    principal = principal_of(request)
    require_manage(principal)
    session_id = check_session_id(principal, id)
    if brain.archive is None:
        await brain.engine.session_record(principal.tenant, session_id)  # 404 before 422, as elsewhere
    record = await _archive(brain).restore(brain.engine, principal.tenant, session_id, body.checkpoint)
    # the Session schema belongs to the sessions app's wiring: render its wire form directly
    return HttpResponse(orjson.dumps(record.as_wire()), content_type="application/json")
