"""Routes of the sessions API: parse, authorize, call services. No ORM, no runtime internals."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest
from ninja import Router

from brainsite.errors import InvalidRequest

from . import services
from .auth import BearerAuth, principal_of, require_manage, require_write
from .schemas import CreateSessionIn, InputIn

router = Router(auth=BearerAuth(), tags=["sessions"])

MAX_PAGE = 1000  # spec: limit is 1-1000 (out of range is 400, never clamped)
DEFAULT_PAGE = 100


def _limit(request: HttpRequest) -> int:
    raw = request.GET.get("limit")
    if raw is None or raw == "":
        return DEFAULT_PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest("limit must be an integer from 1 to 1000")
    return int(raw)


TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")  # W3C trace context


def _traceparent(request: HttpRequest) -> str:
    """A well-formed `traceparent` header, joined by the turn and its tool calls; else ""."""
    value = request.headers.get("traceparent", "").strip().lower()
    return value if TRACEPARENT.fullmatch(value) else ""


@router.post("/sessions", response={201: dict[str, Any]})
async def create_session(request: HttpRequest, body: CreateSessionIn) -> tuple[int, dict[str, Any]]:
    config = body.config.model_dump(exclude_none=True)
    credentials = body.credentials
    return 201, await services.create_session(
        principal_of(request),
        harness=body.harness,
        config=config,
        credentials=credentials,
    )


@router.get("/sessions")
async def list_sessions(request: HttpRequest) -> dict[str, Any]:
    after = request.GET.get("after", "")
    return await services.list_sessions(principal_of(request), after=after, limit=_limit(request))


@router.get("/sessions/{session_id}")
async def get_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    return await services.get_session(principal_of(request), session_id)


@router.post("/sessions/{session_id}/events", response={202: dict[str, Any]})
async def send_input(request: HttpRequest, session_id: str, body: InputIn) -> tuple[int, dict[str, Any]]:
    principal = principal_of(request)
    require_write(principal)
    if body.type == "user.interrupt":
        if body.model_fields_set - {"type"}:
            raise InvalidRequest("user.interrupt accepts no other fields")
        return 202, await services.interrupt_session(principal, session_id)
    if body.type != "user.message":
        raise InvalidRequest("type must be user.message or user.interrupt")
    return 202, await services.send_message(
        principal,
        session_id,
        text=body.text,
        key=body.key,
        delivery=body.delivery,
        traceparent=_traceparent(request),
    )


@router.get("/sessions/{session_id}/events")
async def read_events(request: HttpRequest, session_id: str) -> dict[str, Any]:
    after = request.GET.get("after", "")
    return await services.read_events(
        principal_of(request),
        session_id,
        after=after,
        limit=_limit(request),
    )


@router.post("/sessions/{session_id}/resume")
async def resume_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    require_manage(principal_of(request))
    return await services.resume_session(principal_of(request), session_id)


@router.post("/sessions/{session_id}/close", response={202: dict[str, Any]})
async def close_session(request: HttpRequest, session_id: str) -> tuple[int, dict[str, str]]:
    require_manage(principal_of(request))
    return 202, await services.close_session(principal_of(request), session_id)
