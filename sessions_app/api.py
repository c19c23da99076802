"""Routes of the sessions API: parse, authorize, call operations. No ORM, no runtime internals.
Send and event pages return pre-encoded bytes (an `HttpResponse`, which ninja passes through
untouched): their declared schemas document the wire at no cost per request."""

from __future__ import annotations

import re
from typing import Annotated

import orjson
from django.http import HttpRequest, HttpResponse
from ninja import Path, Router
from pydantic import WithJsonSchema

from foundation.errors import InvalidRequest
from foundation.principal import principal_of, require_manage, require_write
from foundation.wire import SESSION_ID_PATTERN, SessionId

from . import configuration, deletion, operations
from .app_object import request_brain
from .eventlog import Event as LoggedEvent
from .records import ApprovalBody, SessionBody
from .schemas import (
    Approval,
    ApprovalDecision,
    CreateSession,
    Deleted,
    EventList,
    Input,
    SendAccepted,
    Session,
    SessionList,
    Status,
)

router = Router(tags=["sessions"])

MAX_PAGE = 1000  # spec: limit is 1-1000 (out of range is 400, never clamped)
DEFAULT_PAGE = 100
ApprovalId = Annotated[
    str,
    WithJsonSchema({"type": "string", "pattern": SESSION_ID_PATTERN}),
    Path(description="The approval_id of an approval.requested event."),
]

# Query parameters are parsed by `_limit` and operations (out-of-range limits are 400 with the
# spec's message, bad cursors 409), so they are published here rather than declared to ninja.
_LIMIT_PARAMETER = {
    "in": "query",
    "name": "limit",
    "description": "Maximum number of items to return (JSON mode).",
    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE},
}
_LIST_PARAMETERS = [
    {
        "in": "query",
        "name": "after",
        "description": "Last session ID from the previous page.",
        "schema": {"type": "string"},
    },
    _LIMIT_PARAMETER,
]
_EVENTS_PARAMETERS = [
    {
        "in": "query",
        "name": "after",
        "description": "Opaque cursor from the last retained event.",
        "schema": {"type": "string"},
    },
    _LIMIT_PARAMETER,
    {
        "in": "header",
        "name": "Last-Event-ID",
        "description": "SSE reconnect cursor (used when the after query parameter is omitted).",
        "schema": {"type": "string"},
    },
]
# With `Accept: text/event-stream` brainsite.asgi hands the same path to the SSE consumer.
_STREAM_TEXT = (
    "SSE frames: the retained events after the cursor, then the text of the message being written "
    "(one assistant.delta with its offset, when a turn is writing one), then live events."
)
_EVENT_STREAM = {"text/event-stream": {"schema": {"type": "string", "description": _STREAM_TEXT}}}

INTERRUPT_REQUESTED = b'{"status":"interrupt_requested"}'


def _limit(request: HttpRequest) -> int:
    raw = request.GET.get("limit")
    if raw is None or raw == "":
        return DEFAULT_PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest("limit must be an integer from 1 to 1000")
    return int(raw)


TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")  # W3C trace context


def _event_response(event: LoggedEvent) -> HttpResponse:
    """202 with the event's stored bytes: no decode and re-encode on the hot path."""
    return HttpResponse(event.wire(), status=202, content_type="application/json")


def _page_response(page: operations.EventPage) -> HttpResponse:
    body = b'{"events":[' + b",".join(event.wire() for event in page.events) + b'],"next_cursor":'
    return HttpResponse(body + orjson.dumps(page.next_cursor) + b"}", content_type="application/json")


def _traceparent(request: HttpRequest) -> str:
    """A well-formed `traceparent` header, joined by the turn and its tool calls; else ""."""
    value = request.headers.get("traceparent", "").strip().lower()
    return value if TRACEPARENT.fullmatch(value) else ""


@router.post(
    "/sessions", response={201: Session}, operation_id="create", summary="Create a session", exclude_unset=True
)
async def create_session(request: HttpRequest, body: CreateSession) -> tuple[int, SessionBody]:
    record = await operations.create_session(
        request_brain(request).engine,
        principal_of(request),
        harness=body.harness,
        config=body.config.model_dump(exclude_none=True),
        credentials=body.credentials,
        model_credential=body.model_credential.model_dump() if body.model_credential is not None else None,
    )
    return 201, record.as_wire()


@router.get(
    "/sessions",
    response={200: SessionList},
    operation_id="list",
    summary="List sessions",
    exclude_unset=True,
    openapi_extra={"parameters": _LIST_PARAMETERS},
)
async def list_sessions(request: HttpRequest) -> dict[str, list[SessionBody]]:
    after = request.GET.get("after", "")
    engine = request_brain(request).engine
    records = await operations.list_sessions(engine, principal_of(request), after=after, limit=_limit(request))
    return {"sessions": [record.as_wire() for record in records]}


@router.get("/sessions/{id}", response={200: Session}, operation_id="get", summary="Get a session", exclude_unset=True)
async def get_session(request: HttpRequest, id: SessionId) -> SessionBody:
    record = await operations.get_session(request_brain(request).engine, principal_of(request), id)
    return record.as_wire()


@router.post("/sessions/{id}/events", response={202: SendAccepted}, operation_id="send", summary="Send input")
async def send_input(request: HttpRequest, id: SessionId, body: Input) -> HttpResponse:
    principal = principal_of(request)
    require_write(principal)
    engine = request_brain(request).engine
    if body.type == "user.interrupt":
        if body.model_fields_set - {"type"}:
            raise InvalidRequest("user.interrupt accepts no other fields")
        await operations.interrupt_session(engine, principal, id)
        return HttpResponse(INTERRUPT_REQUESTED, status=202, content_type="application/json")
    if body.type == "session.configure":
        if body.model_fields_set - {"type", "config", "key"} or body.config is None:
            raise InvalidRequest("session.configure takes config, an optional key and no other fields")
        change = body.config.model_dump(exclude_unset=True)
        if any(value is None for value in change.values()):
            raise InvalidRequest("config fields of a change must not be null")
        event = await configuration.configure_session(engine, principal, id, change, key=body.key or None)
        return _event_response(event)
    if body.config is not None:
        raise InvalidRequest("config belongs to session.configure")
    event = await operations.send_message(
        engine,
        principal,
        id,
        text=body.text,
        media=None if body.media is None else [{"type": item.type, "url": item.url} for item in body.media],
        key=body.key,
        delivery=body.delivery,
        traceparent=_traceparent(request),
    )
    return _event_response(event)


@router.get(
    "/sessions/{id}/events",
    response={200: EventList},
    operation_id="events",
    summary="Read or stream events",
    openapi_extra={"parameters": _EVENTS_PARAMETERS, "responses": {200: {"content": _EVENT_STREAM}}},
)
async def read_events(request: HttpRequest, id: SessionId) -> HttpResponse:
    after = request.GET.get("after", "")
    engine = request_brain(request).engine
    page = await operations.read_events(engine, principal_of(request), id, after=after, limit=_limit(request))
    return _page_response(page)


@router.post(
    "/sessions/{id}/resume",
    response={200: Session},
    operation_id="resume",
    summary="Resume a session",
    exclude_unset=True,
)
async def resume_session(request: HttpRequest, id: SessionId) -> SessionBody:
    principal = principal_of(request)
    require_manage(principal)
    return (await operations.resume_session(request_brain(request).engine, principal, id)).as_wire()


@router.post("/sessions/{id}/close", response={202: Status}, operation_id="close", summary="Close a session")
async def close_session(request: HttpRequest, id: SessionId) -> tuple[int, dict[str, str]]:
    principal = principal_of(request)
    require_manage(principal)
    await operations.close_session(request_brain(request).engine, principal, id)
    return 202, {"status": "close_requested"}


@router.delete(
    "/sessions/{id}",
    response={200: Deleted},
    operation_id="delete",
    summary="Delete a session",
    description=(
        "Stops a running turn (its queued inputs and pending approvals are cancelled), closes the "
        "session's runtime executors and removes the session everywhere this server keeps it: its "
        "files, rows, discovery-index entry and archived state. Needs a manage token. 404 for an "
        "unknown or already deleted session, 409 while it has sub-agent sessions."
    ),
)
async def delete_session(request: HttpRequest, id: SessionId) -> deletion.Deleted:
    principal = principal_of(request)
    require_manage(principal)
    return await deletion.delete_session(request_brain(request).engine, principal, id)


@router.post(
    "/sessions/{id}/approvals/{approval_id}",
    response={200: Approval},
    operation_id="decide_approval",
    summary="Approve or reject a tool call",
    description=(
        "Decides a tool call that waits for approval (an approval.requested event). approve dispatches "
        "the call; reject gives the model an error result with the reason. Needs a token that is not "
        "read-only. 404 for an unknown approval, 409 once it is decided, expired or cancelled."
    ),
)
async def decide_approval(
    request: HttpRequest, id: SessionId, approval_id: ApprovalId, body: ApprovalDecision
) -> ApprovalBody:
    principal = principal_of(request)
    require_write(principal)
    engine = request_brain(request).engine
    approval = await operations.decide_approval(
        engine, principal, id, approval_id, decision=body.decision, reason=body.reason
    )
    return approval.as_wire()
