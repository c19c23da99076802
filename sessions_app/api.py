"""Routes of the sessions API: parse, authorize, call services. No ORM, no runtime internals."""

from __future__ import annotations

import re
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Router

from brainsite.application import request_brain
from brainsite.errors import InvalidRequest
from brainsite.principal import principal_of, require_manage, require_write

from . import services
from .eventlog import Event
from .schemas import CreateSessionIn, InputIn

router = Router(tags=["sessions"])

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


def _event_response(event: Event) -> HttpResponse:
    """202 with the event's stored bytes: no decode and re-encode on the hot path."""
    return HttpResponse(event.wire(), status=202, content_type="application/json")


def _page_response(page: services.EventPage) -> HttpResponse:
    body = b'{"events":[' + b",".join(event.wire() for event in page.events) + b'],"next_cursor":'
    return HttpResponse(body + orjson.dumps(page.next_cursor) + b"}", content_type="application/json")


def _traceparent(request: HttpRequest) -> str:
    """A well-formed `traceparent` header, joined by the turn and its tool calls; else ""."""
    value = request.headers.get("traceparent", "").strip().lower()
    return value if TRACEPARENT.fullmatch(value) else ""


@router.post("/sessions", response={201: dict[str, Any]})
async def create_session(request: HttpRequest, body: CreateSessionIn) -> tuple[int, dict[str, Any]]:
    record = await services.create_session(
        request_brain(request).engine,
        principal_of(request),
        harness=body.harness,
        config=body.config.model_dump(exclude_none=True),
        credentials=body.credentials,
    )
    return 201, record.as_wire()


@router.get("/sessions")
async def list_sessions(request: HttpRequest) -> dict[str, Any]:
    after = request.GET.get("after", "")
    engine = request_brain(request).engine
    records = await services.list_sessions(engine, principal_of(request), after=after, limit=_limit(request))
    return {"sessions": [record.as_wire() for record in records]}


@router.get("/sessions/{session_id}")
async def get_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    record = await services.get_session(request_brain(request).engine, principal_of(request), session_id)
    return record.as_wire()


@router.post("/sessions/{session_id}/events", response={202: dict[str, Any]})
async def send_input(request: HttpRequest, session_id: str, body: InputIn) -> tuple[int, dict[str, Any]] | HttpResponse:
    principal = principal_of(request)
    require_write(principal)
    engine = request_brain(request).engine
    if body.type == "user.interrupt":
        if body.model_fields_set - {"type"}:
            raise InvalidRequest("user.interrupt accepts no other fields")
        await services.interrupt_session(engine, principal, session_id)
        return 202, {"status": "interrupt_requested"}
    if body.type != "user.message":
        raise InvalidRequest("type must be user.message or user.interrupt")
    event = await services.send_message(
        engine,
        principal,
        session_id,
        text=body.text,
        key=body.key,
        delivery=body.delivery,
        traceparent=_traceparent(request),
    )
    return _event_response(event)


@router.get("/sessions/{session_id}/events")
async def read_events(request: HttpRequest, session_id: str) -> HttpResponse:
    after = request.GET.get("after", "")
    engine = request_brain(request).engine
    page = await services.read_events(engine, principal_of(request), session_id, after=after, limit=_limit(request))
    return _page_response(page)


@router.post("/sessions/{session_id}/resume")
async def resume_session(request: HttpRequest, session_id: str) -> dict[str, Any]:
    principal = principal_of(request)
    require_manage(principal)
    return (await services.resume_session(request_brain(request).engine, principal, session_id)).as_wire()


@router.post("/sessions/{session_id}/close", response={202: dict[str, Any]})
async def close_session(request: HttpRequest, session_id: str) -> tuple[int, dict[str, str]]:
    principal = principal_of(request)
    require_manage(principal)
    await services.close_session(request_brain(request).engine, principal, session_id)
    return 202, {"status": "close_requested"}
