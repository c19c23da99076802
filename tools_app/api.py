"""GET /catalog: the tools the caller's tenant may enable; GET /tasks: its tasks (read-only).
The runtime executor routes (/executors...): registration with an API token, then the executor's
own credential for its command stream (SSE here, WebSocket in tools_app.consumers), replies and
close; in a fleet these reach the instance holding the executor through any instance
(fleet_app.routing forwards them).
"""

from __future__ import annotations

from typing import Annotated, Literal, NoReturn

from django.http import HttpRequest
from ninja import Path, Query, Router
from ninja.security.base import AuthBase
from pydantic import WithJsonSchema

from foundation.errors import Conflict, InvalidRequest, NotFound, Unavailable
from foundation.principal import principal_of, require_manage
from foundation.session_ids import canonical_session_id
from foundation.wire import SessionId

from .app_object import request_brain
from .bindings import ALIAS, compile_runtime_tools, runtime_descriptors
from .environments.checks import placed_descriptors
from .executors import Executor, normalized_tools
from .providers.tasks import db as tasks_db
from .relay import ExecutorRelay
from .schemas import (
    CatalogBody,
    CredentialBody,
    ExecutorCredential,
    ExecutorRegistration,
    ExtensionEvent,
    Reply,
    Status,
    StatusBody,
    TaskPage,
    TaskPageBody,
    ToolCatalog,
)

router = Router(tags=["tools"])

EXECUTOR_ID_PATTERN = "^[a-fA-F0-9]{32}$"  # contract

CALL_ID_PATTERN = "^[a-f0-9]{32}$"  # a tool call's id (tool.call `id`)
CallId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": CALL_ID_PATTERN}), Path(description="The tool call's id.")
]

ExecutorId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": EXECUTOR_ID_PATTERN}), Path(description="Opaque executor ID.")
]

# Commands arrive as SSE frames whose `data:` is a Command.
_EVENT_STREAM: dict[str, object] = {
    "responses": {200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}}
}
# A WebSocket upgrade has no body.
_UPGRADE: dict[str, object] = {"responses": {101: {"content": {}}}}


@router.get(
    "/catalog", response={200: ToolCatalog}, operation_id="catalog", summary="List available tools", exclude_unset=True
)
async def catalog(request: HttpRequest) -> CatalogBody:
    return {"tools": await request_brain(request).registry.acatalog_for(principal_of(request).tenant)}


MAX_TASK_PAGE = 100  # tasks in one page


@router.get(
    "/tasks",
    response={200: TaskPage},
    operation_id="listTasks",
    summary="List the tenant's tasks (manage_tasks), in id order",
    exclude_unset=True,
)
async def list_tasks(
    request: HttpRequest,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_TASK_PAGE)] = 50,
    status: Annotated[Literal["", "pending", "in_progress", "completed", "cancelled"], Query()] = "",
) -> TaskPageBody:
    rows = await tasks_db.alist_tasks(principal_of(request).tenant, after=after, limit=limit, status=status)
    page: TaskPageBody = {"tasks": rows}
    if len(rows) == limit:
        page["next_after"] = rows[-1]["id"]
    return page


@router.post(
    "/executors",
    response={201: ExecutorCredential},
    operation_id="registerExecutor",
    summary="Register runtime tools",
)
async def register_executor(request: HttpRequest, body: ExecutorRegistration) -> tuple[int, CredentialBody]:
    brain = request_brain(request)
    principal = principal_of(request)
    require_manage(principal)
    if not ALIAS.fullmatch(body.binding):
        raise InvalidRequest("binding must start with a letter: 1-32 of A-Z a-z 0-9 _ -")
    tools = runtime_descriptors([tool.model_dump(exclude_none=True) for tool in body.tools])
    session = ""
    if body.session is not None:
        session = canonical_session_id(body.session) or ""
        if not session or (principal.session and principal.session != session):
            raise NotFound("session not found")
        if brain.executors.remote.shared:  # a fleet: the session may be owned elsewhere, its row is shared
            config = await brain.saved_session_config(principal.tenant, session)
            if config is None:
                raise NotFound("session not found")
        else:
            config = (await brain.engine.get_actor(principal.tenant, session)).record.config
        saved = next((b for b in config.get("bindings", ()) if b.get("alias") == body.binding), None)
        placement = config.get("placement") or {}
        if saved is None and any(
            e.get("executor") for e in placement.get("environments", ()) if e["name"] == body.binding
        ):
            saved = {"runtime": placed_descriptors(placement, body.binding)}  # a host environment's executor
        if saved is None:
            raise Conflict(f"session has no runtime binding {body.binding!r}")
        if normalized_tools(saved.get("runtime") or []) != normalized_tools(tools):
            raise Conflict(f"the tools differ from the descriptors saved for binding {body.binding!r}")
    # last, off the loop: a request refused by a cheap check above compiles nothing
    await compile_runtime_tools(tools, brain.executors.schemas)
    executor_id, token = brain.executors.register(principal.tenant, body.binding, tools, session=session)
    relay = brain.executors.remote
    if isinstance(relay, ExecutorRelay):  # a fleet: its own routes reach it through any instance
        await relay.hold(executor_id)
        if session:
            await _take_over_route(relay, session, body.binding, executor_id)
    return 201, {"id": executor_id, "token": token}


async def _take_over_route(relay: ExecutorRelay, session: str, binding: str, executor_id: str) -> None:
    """A rebind in a fleet: the alias's calls come here from now on, and the executor that served
    it on another instance closes (its pending calls end with unknown outcomes)."""
    try:
        previous = await relay.route(session, binding)
        await relay.announce(session, binding, executor_id)
    except relay.errors as exc:
        raise Unavailable("the runtime executor routes are out of reach; retry") from exc
    if previous is not None and (previous.instance, previous.incarnation) != (relay.instance, relay.incarnation):
        await relay.close_remote(previous, "replaced by a rebind")


class ExecutorAuth(AuthBase):
    """The executor's own credential, for its routes: an API token is not one (401)."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __init__(self) -> None:
        super().__init__()
        self.is_async = True

    async def __call__(self, request: HttpRequest) -> Executor:
        match = request.resolver_match
        executor_id = str(match.kwargs.get("id", "")) if match is not None else ""
        hub = request_brain(request).executors
        return hub.authenticate(executor_id, request.headers.get("Authorization"))


def executor_of(request: HttpRequest) -> Executor:
    executor: Executor = request.auth  # type: ignore[attr-defined]  # set by ExecutorAuth
    return executor


@router.post(
    "/executors/{id}/close",
    response={200: Status},
    operation_id="unregisterExecutor",
    summary="Close a runtime executor",
    auth=ExecutorAuth(),
)
async def unregister_executor(request: HttpRequest, id: ExecutorId) -> StatusBody:
    request_brain(request).executors.close(executor_of(request))
    return {"status": "closed"}


@router.get(
    "/executors/{id}/commands",
    response={200: None},
    operation_id="executorCommands",
    summary="Connect a runtime executor",
    openapi_extra=_EVENT_STREAM,
    auth=ExecutorAuth(),
)
async def executor_commands(request: HttpRequest, id: ExecutorId) -> NoReturn:
    # the ASGI entry routes this path to tools_app.consumers.ExecutorCommandsConsumer
    raise InvalidRequest("the command stream is served as text/event-stream")


@router.post(
    "/executors/{id}/responses",
    response={200: Status},
    operation_id="executorReply",
    summary="Submit runtime progress or result",
    auth=ExecutorAuth(),
)
async def executor_reply(request: HttpRequest, id: ExecutorId, body: Reply) -> StatusBody:
    hub = request_brain(request).executors
    if body.event is not None:  # an extension event: answered once it is in the session's log
        if body.progress is not None or body.result is not None:
            raise InvalidRequest("a reply carries an event alone")
        event = body.event
        await hub.emit(
            executor_of(request), connection=body.connection, call_id=body.call_id, kind=event.kind, data=event.data
        )
        return {"status": "committed"}
    result = body.result.model_dump(exclude_none=True) if body.result is not None else None
    hub.reply(
        executor_of(request), connection=body.connection, call_id=body.call_id, progress=body.progress, result=result
    )
    return {"status": "accepted"}


@router.get(
    "/executors/{id}/rpc",
    response={101: None},
    operation_id="executorRPC",
    summary="Connect bidirectional runtime RPC",
    openapi_extra=_UPGRADE,
    auth=ExecutorAuth(),
)
async def executor_rpc(request: HttpRequest, id: ExecutorId) -> NoReturn:
    # a WebSocket upgrade reaches tools_app.consumers.ExecutorRPCConsumer; plain HTTP cannot
    raise InvalidRequest("GET /executors/{id}/rpc is a WebSocket endpoint (subprotocols brain-rpc, brain-auth.TOKEN)")


class EmitAuth(AuthBase):
    """The emit token a placed call's tool service was given (tools_app.environments.emits):
    sealed for this session's call and not expired, else 401; an API token is not one."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __init__(self) -> None:
        super().__init__()
        self.is_async = True

    async def __call__(self, request: HttpRequest) -> str:
        match = request.resolver_match
        kwargs = match.kwargs if match is not None else {}
        session = canonical_session_id(str(kwargs.get("id", ""))) or ""
        call_id = str(kwargs.get("call_id", ""))
        emits = request_brain(request).tool_path.config_tools.emits
        emits.check(session, call_id, request.headers.get("Authorization"))
        return call_id


@router.post(
    "/sessions/{id}/tool-calls/{call_id}/events",
    response={200: Status},
    operation_id="emitToolEvent",
    summary="Commit an extension event of a running tool call",
    auth=EmitAuth(),
)
async def emit_tool_event(request: HttpRequest, id: SessionId, call_id: CallId, body: ExtensionEvent) -> StatusBody:
    session = canonical_session_id(id) or ""
    await request_brain(request).tool_path.config_tools.emits.emit(session, call_id, body.kind, body.data)
    return {"status": "committed"}
