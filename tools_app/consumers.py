"""An executor's command connection: SSE (GET /executors/{id}/commands, replies by HTTP POST)
or a WebSocket (GET /executors/{id}/rpc, replies on the same socket). Both carry the same JSON
commands: `ready` first, then `call`, `cancel` and `ping`. Nothing is replayed: a connection
that drops takes its dispatched calls with it (unknown outcomes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import orjson
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer

from foundation.errors import BrainError, InvalidRequest
from foundation.streaming import SSE_HEADERS, StreamingConsumer, request_header

from .app_object import brain_of
from .executors import CallLost, Connection, Executor, ExecutorHub
from .rpc_limits import MAX_RPC_FRAME_BYTES

__all__ = ["ExecutorCommandsConsumer", "ExecutorRPCConsumer"]

PING_SECONDS = 15.0
RPC_SUBPROTOCOL = "brain-rpc"
AUTH_SUBPROTOCOL_PREFIX = "brain-auth."
PARSE_OFF_LOOP_BYTES = 256 * 1024  # replies at least this large are parsed in a worker thread
REPLY_FIELDS = frozenset({"connection", "call_id", "progress", "result", "event"})
EVENT_FIELDS = frozenset({"kind", "data"})
# To another instance of a fleet that forwarded the stream (a signed request, admitted by
# fleet_app.routing), the executor's tenant: it counts the stream in that tenant's share
# (fleet_app.streams.TENANT_HEADER, taken out there before the answer goes on).
FLEET_TENANT_HEADER = b"brain-fleet-tenant"


def _hub(scope: Mapping[str, object]) -> ExecutorHub:
    hub: ExecutorHub = brain_of(scope).executors
    return hub


class ExecutorCommandsConsumer(StreamingConsumer):
    async def stream(self) -> None:
        executor_id = self.scope["url_route"]["kwargs"]["id"]
        hub = _hub(self.scope)
        try:
            executor = hub.authenticate(executor_id, self.header(b"authorization"))
        except BrainError as error:
            await self.send_error(error)
            return
        connection = hub.connect(executor)
        headers = SSE_HEADERS
        if self.scope.get("brain_fleet_sender"):
            headers = [*SSE_HEADERS, (FLEET_TENANT_HEADER, quote(executor.tenant, safe="").encode())]
        try:
            await self.send_headers(status=200, headers=headers)
            while True:
                try:
                    command = await connection.next(PING_SECONDS)
                except CallLost:
                    break  # superseded by a newer connection, or the executor closed
                if command is None:
                    command = orjson.dumps({"type": "ping", "connection": connection.id})
                await self.send_body(b"data: " + command + b"\n\n", more_body=True)
            await self.send_body(b"", more_body=False)
        finally:
            hub.disconnect(executor, connection)


class ExecutorRPCConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels ships no type hints
    """Commands out as text frames; replies in as text frames with the Reply shape. A reply
    that fails gets an `error` frame back (the connection stays). A placed call's extension
    event (`{connection, call_id, event: {kind, data}}`, as on POST /executors/{id}/responses)
    is answered `{"type": "committed", "call_id"}` once it is in the session's log; the socket's
    next frame is read after that answer, so one connection's events commit in order."""

    executor: Executor | None = None
    connection: Connection | None = None
    pump: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        if request_header(self.scope, b"origin") is not None:
            await self.close(code=4403)  # spec: browser origins are refused
            return
        offered = self.scope.get("subprotocols") or []
        tokens = [p[len(AUTH_SUBPROTOCOL_PREFIX) :] for p in offered if p.startswith(AUTH_SUBPROTOCOL_PREFIX)]
        if RPC_SUBPROTOCOL not in offered or len(tokens) != 1:
            await self.close(code=4400)
            return
        hub = _hub(self.scope)
        try:
            self.executor = hub.check_token(self.scope["url_route"]["kwargs"]["id"], tokens[0])
        except BrainError:
            await self.close(code=4401)
            return
        await self.accept(subprotocol=RPC_SUBPROTOCOL)
        self.connection = hub.connect(self.executor)
        self.pump = asyncio.get_running_loop().create_task(self._pump(self.connection))

    async def _pump(self, connection: Connection) -> None:
        while True:
            try:
                command = await connection.next(PING_SECONDS)
            except CallLost:
                await self.close(code=1000)
                return
            if command is None:
                command = orjson.dumps({"type": "ping", "connection": connection.id})
            await self.send(text_data=command.decode())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.executor is None:
            return
        raw = text_data.encode("utf-8", "surrogatepass") if text_data is not None else bytes_data or b""
        reply: Any = None
        try:
            try:
                reply = (
                    await asyncio.to_thread(orjson.loads, raw)
                    if len(raw) >= PARSE_OFF_LOOP_BYTES
                    else orjson.loads(raw)
                )
            except orjson.JSONDecodeError as exc:
                raise InvalidRequest("reply frame is not JSON") from exc
            if len(raw) > MAX_RPC_FRAME_BYTES:
                self._fail_oversized_call(reply, len(raw))
                raise InvalidRequest(f"reply frame of {len(raw)} bytes exceeds 4 MiB; its call failed")
            if not isinstance(reply, dict) or not reply.keys() <= REPLY_FIELDS:
                raise InvalidRequest(
                    "a reply is {connection, call_id, progress?, result?} or {connection, call_id, event}"
                )
            connection, call_id = reply.get("connection"), reply.get("call_id")
            if not isinstance(connection, str) or not isinstance(call_id, str):
                raise InvalidRequest("a reply needs connection and call_id strings")
            if "event" in reply:
                await self._emit(connection, call_id, reply)
                return
            _hub(self.scope).reply(
                self.executor,
                connection=connection,
                call_id=call_id,
                progress=reply.get("progress"),
                result=reply.get("result"),
            )
        except BrainError as error:
            frame = {"type": "error", "call_id": reply.get("call_id") if isinstance(reply, dict) else None}
            frame["error"] = {"code": error.code, "message": error.message}
            await self.send(text_data=orjson.dumps(frame).decode())

    async def _emit(self, connection: str, call_id: str, reply: dict[str, Any]) -> None:
        assert self.executor is not None
        if "progress" in reply or "result" in reply:
            raise InvalidRequest("a reply carries an event alone")
        event = reply["event"]
        if not isinstance(event, dict) or not event.keys() <= EVENT_FIELDS or not isinstance(event.get("kind"), str):
            raise InvalidRequest("an event is {kind, data}")
        await _hub(self.scope).emit(
            self.executor, connection=connection, call_id=call_id, kind=event["kind"], data=event.get("data")
        )
        await self.send(text_data=orjson.dumps({"type": "committed", "call_id": call_id}).decode())

    def _fail_oversized_call(self, reply: Any, size: int) -> None:
        """A reply too large to accept still names its call: that call ends with an error result
        (its outcome unknown: the tool ran), the connection and the other calls go on."""
        if self.executor is None or not isinstance(reply, dict) or "result" not in reply:
            return
        connection, call_id = reply.get("connection"), reply.get("call_id")
        if not isinstance(connection, str) or not isinstance(call_id, str):
            return
        message = f"the runtime tool's reply of {size} bytes exceeds the 4 MiB frame limit"
        failed = {"content": [{"type": "text", "text": message}], "is_error": True, "unknown_outcome": True}
        with contextlib.suppress(BrainError):  # not a pending call of this connection: the error frame says so
            _hub(self.scope).reply(self.executor, connection=connection, call_id=call_id, result=failed)

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
        if self.executor is not None and self.connection is not None:
            _hub(self.scope).disconnect(self.executor, self.connection)
        raise StopConsumer()
