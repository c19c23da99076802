"""ASGI entry: CORS for browser clients (brainsite.cors), request IDs and security headers on
every response, the body limit, the lazy runtime start (Daphne has no lifespan), in a fleet the
forwarding of session requests to their owner (fleet_app.routing), routing of SSE streams to the
Channels consumer, and the static files in front of the admin.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import time
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")
django.setup()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from brainsite.apihandler import ApiHandler  # noqa: E402
from brainsite.application import SCOPE_KEY, Launcher  # noqa: E402
from brainsite.cors import CorsMiddleware  # noqa: E402
from brainsite.daphne_socket import abort_connection, pending_bytes_probe  # noqa: E402
from brainsite.staticfiles import static_files  # noqa: E402
from brainsite.upload_limits import request_body_limit  # noqa: E402
from foundation import telemetry  # noqa: E402
from foundation.asgi import Scope  # noqa: E402
from foundation.errors import PayloadTooLarge, error_envelope  # noqa: E402
from sessions_app.consumers import CONSOLE_STREAM_PATH, ConsoleStreamConsumer, EventStreamConsumer  # noqa: E402
from tools_app.consumers import ExecutorCommandsConsumer, ExecutorRPCConsumer  # noqa: E402

__all__ = ["application", "launcher"]

BODY_OVERHEAD_BYTES = 16 * 1024  # spec: bodies may be input_bytes + 16 KiB
DJANGO_PREFIXES = ("/admin", "/static/")  # served by the full Django stack (sessions, CSRF)
_EVENTS_PATH = re.compile(r"^/sessions/([^/]+)/events$")
_COMMANDS_PATH = re.compile(r"^/executors/([^/]+)/commands$")
_RPC_PATH = re.compile(r"^/executors/([^/]+)/rpc$")
_CONSOLE_PATH = re.compile(CONSOLE_STREAM_PATH)


class BodyTooLarge(Exception):
    """A request body past input_bytes + 16 KiB (413)."""


class BrainHttpMiddleware:
    """Outermost HTTP layer; knows nothing of sessions."""

    def __init__(
        self,
        launcher: Launcher,
        django_app: Any,
        api_app: Any,
        stream_app: Any,
        commands_app: Any,
        console_app: Any = None,
    ) -> None:
        self.console_app = console_app  # the admin's live transcript (sessions_app.console_stream)
        self.launcher = launcher
        self.django_app = django_app
        self.api_app = api_app
        self.stream_app = stream_app
        self.commands_app = commands_app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        brain = await self.launcher.started()
        scope[SCOPE_KEY] = brain
        request_id = secrets.token_hex(16)
        scope["brain_request_id"] = request_id
        scope["brain_pending_bytes"] = pending_bytes_probe(send)
        scope["brain_abort_connection"] = functools.partial(abort_connection, send)
        if brain.telemetry.enabled:
            send = _observed(brain.telemetry, scope, send)
        extra = [(b"x-request-id", request_id.encode()), (b"x-content-type-options", b"nosniff")]

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"x-content-type-options"]
                message = {**message, "headers": [*headers, *extra]}
            await send(message)

        limit = request_body_limit(
            scope.get("method", "").encode(),
            scope.get("path", "").encode(),
            (value for name, value in scope.get("headers", ()) if name == b"cookie"),
            default=brain.config.limits.input_bytes + BODY_OVERHEAD_BYTES,
        )
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._reject_too_large(send_with_headers, request_id)
                return
        routed = await brain.fleet.route(brain, scope, receive, send, limit=limit)  # in a fleet: to the owner
        if routed is None:
            return
        receive = routed
        match = _EVENTS_PATH.match(scope.get("path", ""))
        if match and scope.get("method") == "GET" and self._wants_stream(scope):
            scope["url_route"] = {"kwargs": {"id": match.group(1)}}
            scope["brain_route"] = "sessions/<id>/events"
            await self.stream_app(scope, receive, send_with_headers)
            return
        match = _COMMANDS_PATH.match(scope.get("path", ""))
        if match and scope.get("method") == "GET":
            scope["url_route"] = {"kwargs": {"id": match.group(1)}}
            scope["brain_route"] = "executors/<id>/commands"
            await self.commands_app(scope, receive, send_with_headers)
            return
        path = scope.get("path", "")
        match = _CONSOLE_PATH.match(path)
        if match and scope.get("method") == "GET" and self.console_app is not None:
            scope["url_route"] = {"kwargs": {"id": match.group(1)}}
            scope["brain_route"] = "admin/sessions/<id>/stream"
            await self.console_app(scope, receive, send_with_headers)
            return
        if path.startswith(DJANGO_PREFIXES):
            app = self.django_app
            scope["brain_route"] = next(prefix for prefix in DJANGO_PREFIXES if path.startswith(prefix))
        else:
            app = self.api_app
        await app(scope, self._limited_receive(receive, limit), send_with_headers)

    @staticmethod
    def _wants_stream(scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"accept" and b"text/event-stream" in value:
                return True
        return False

    @staticmethod
    async def _reject_too_large(send: Any, request_id: str) -> None:
        body = error_envelope(PayloadTooLarge("request body exceeds the size limit"), request_id)
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    def _limited_receive(receive: Any, limit: int) -> Any:
        """Chunked bodies have no Content-Length: cut them off past the limit."""
        received = 0

        async def limited() -> dict[str, Any]:
            nonlocal received
            message: dict[str, Any] = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge()
            return message  # noqa: RET504

        return limited


def _observed(recorder: telemetry.Telemetry, scope: Scope, send: Any) -> Any:
    """`send`, recording the request's metrics as its response ends; an SSE stream is counted
    when it starts, and never timed."""
    started = time.monotonic()
    status = 0

    async def observed(message: dict[str, Any]) -> None:
        nonlocal status
        await send(message)
        if message["type"] == "http.response.start":
            status = message["status"]
            if status == 200 and (b"content-type", b"text/event-stream") in message.get("headers", ()):
                recorder.record_request(_route(scope), scope["method"], status, "", None)
                status = 0
        elif status and not message.get("more_body"):
            code = _error_code(message.get("body", b"")) if status >= 400 else ""
            recorder.record_request(_route(scope), scope["method"], status, code, time.monotonic() - started)
            status = 0

    return observed


def _route(scope: Scope) -> str:
    route = scope.get("brain_route")
    return telemetry.route_template(route) if route is not None else telemetry.UNMATCHED_ROUTE


def _error_code(body: bytes) -> str:
    import orjson

    try:
        return str(orjson.loads(body)["error"]["code"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ""


class _TooLargeGuard:
    """Turns BodyTooLarge from a chunked upload into the 413 envelope."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        started = False

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await BrainHttpMiddleware._reject_too_large(send, scope.get("brain_request_id", ""))


class BrainWebsocketRouter:
    """WebSocket scopes: only the executor RPC path; anything else is refused (403)."""

    def __init__(self, launcher: Launcher, rpc_app: Any) -> None:
        self.launcher = launcher
        self.rpc_app = rpc_app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        scope[SCOPE_KEY] = await self.launcher.started()
        match = _RPC_PATH.match(scope.get("path", ""))
        if match is None:
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 4404})
            return
        scope["url_route"] = {"kwargs": {"id": match.group(1)}}
        await self.rpc_app(scope, receive, send)


launcher = Launcher()  # runbrain configures it before serving
application = ProtocolTypeRouter(
    {
        "http": CorsMiddleware(  # the host config's `cors` block; preflights end there
            BrainHttpMiddleware(
                launcher,
                _TooLargeGuard(static_files(get_asgi_application())),  # /static/ from STATIC_ROOT, else Django
                _TooLargeGuard(ApiHandler()),
                EventStreamConsumer.as_asgi(),
                ExecutorCommandsConsumer.as_asgi(),
                ConsoleStreamConsumer.as_asgi(),
            ),
            origins_of=lambda: (cors.origins if (cors := launcher.host_config().cors) is not None else None),
        ),
        "websocket": BrainWebsocketRouter(launcher, ExecutorRPCConsumer.as_asgi()),
    }
)
