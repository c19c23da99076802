"""POST /flush, GET /sync, POST /restore. External persistence is not built into this server
yet, so after the usual authorization and session lookup they answer 422 `unsupported`, the
spec's answer when `persistence` is not configured."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import ConfigDict

from brainsite.application import request_brain
from brainsite.errors import Unsupported
from brainsite.principal import principal_of, require_manage
from sessions_app import services

router = Router(tags=["persistence"])

NOT_CONFIGURED = "external persistence is not configured on this server"


class RestoreIn(Schema):
    model_config = ConfigDict(extra="forbid", strict=True)

    checkpoint: str


@router.post("/sessions/{session_id}/flush")
async def flush_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    principal = principal_of(request)
    require_manage(principal)
    await services.get_session(request_brain(request).engine, principal, session_id)
    raise Unsupported(NOT_CONFIGURED)


@router.get("/sessions/{session_id}/sync")
async def sync_status(request: HttpRequest, session_id: str) -> dict[str, Any]:
    await services.get_session(request_brain(request).engine, principal_of(request), session_id)
    raise Unsupported(NOT_CONFIGURED)


@router.post("/sessions/{session_id}/restore")
async def restore_session(request: HttpRequest, session_id: str, body: RestoreIn) -> dict[str, Any]:
    principal = principal_of(request)
    require_manage(principal)
    await services.get_session(request_brain(request).engine, principal, session_id)
    raise Unsupported(NOT_CONFIGURED)
