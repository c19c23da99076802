"""Runtime tools across a fleet: a session owned by one instance calls an executor whose command
stream is held by another, over the Channels Redis layer (the routes and holders it finds the
executor by: tools_app.relay_routes).

A call whose route names another instance is sent once to that instance's channel; the holder
pushes it on the executor's stream and sends progress and the result back to the caller's
channel. Nothing is replayed: a call whose holder leaves the fleet (row gone or expired, or a new
incarnation) before a result came, or whose send or reply path fails on Redis, ends unknown; a
call to a holder that is not alive is refused before sending.

Nothing from Redis is trusted unsealed (tools_app.relay_seal); a holder is reached at the instances
table's address; a call reaches only an executor bound to its session and tenant."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from foundation.errors import Conflict, Unavailable
from foundation.logs import logger
from toolkits.events import event_refusal

from . import relay_records as records
from .environments.events import EmitRefused, Emitter
from .executor_store import CallLost, ExecutorUnavailable, LocalExecutors, bound_to
from .relay_channel import RelayChannel
from .relay_records import Holder, Located, Route
from .relay_routes import HOLDER_SECONDS, Members, RelayRoutes

__all__ = ["CHANNEL_REDIS_ENV", "ExecutorRelay", "Holder", "Located", "Route"]

CHANNEL_REDIS_ENV = "BRAIN_CHANNEL_REDIS"
ALIVE_CHECK_SECONDS = 1.0  # how often a caller checks that the holder of a pending call is alive
HOLDER_CALL_SECONDS = 330.0  # the holder's own bound on one relayed call (the caller's is 300 s)
# How long a holder waits for the owner to append an executor's event of a relayed call: an
# append is one local write, so an answer this late means the owner or Redis is in trouble.
EVENT_RELAY_SECONDS = 30.0


@dataclass(eq=False)
class _Pending:
    future: asyncio.Future[object]
    progress: Callable[[object], None]
    emit: Emitter | None  # a placed call's events (tools_app.environments.events)


class ExecutorRelay(RelayRoutes):
    """This instance's end of the relay: announces its binds, sends calls to other instances and
    serves the calls they send to the executors held here (`local`). The hub is built with it
    as its remote (tools_app.executors.RemoteExecutors); other instances hold executors too."""

    shared = True

    def __init__(
        self, local: LocalExecutors, *, redis_url: str, instance: str, incarnation: str, secret: bytes, member: Members
    ) -> None:
        super().__init__(
            local, redis_url=redis_url, instance=instance, incarnation=incarnation, secret=secret, member=member
        )
        self._layer = RelayChannel(redis_url, self.channel, self._seal)
        self._pending: dict[str, _Pending] = {}  # relay id -> a call this instance sent
        self._serving: dict[str, asyncio.Task[None]] = {}  # relay id -> a call served here
        # call id -> (the caller's channel, relay id) of a call served here, for its events
        self._relayed: dict[str, tuple[str, str]] = {}
        self._events: dict[str, asyncio.Future[dict[str, object]]] = {}  # event id -> the owner's answer
        self._receiver: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._receiver = loop.create_task(self._receive(), name="brain-executor-relay")
        self._refresher = loop.create_task(self._refresh_holders(), name="brain-executor-holders")

    async def stop(self) -> None:
        for task in (self._receiver, self._refresher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for task in [*self._serving.values(), *self._tasks]:
            task.cancel()
        self._fail_pending("this instance is stopping")
        with contextlib.suppress(Exception):
            await self._layer.close()
        with contextlib.suppress(Exception):
            await self._redis.aclose()

    # -- the calling side ------------------------------------------------------------------

    async def call(
        self,
        session: str,
        alias: str,
        *,
        call_id: str,
        tool: str,
        arguments: object,
        scope: dict[str, str],
        progress: Callable[[object], None],
        emit: Emitter | None = None,
    ) -> object:
        """The call on whichever instance serves the alias now (this one included), made only
        to an executor bound to `session` of the tenant `scope` names."""
        tenant = scope.get("tenant_id", "")
        if not session or not tenant or scope.get("session_id") != session:
            raise ExecutorUnavailable("a runtime call names no session and tenant")
        binding = self._binding.get((session, alias))
        if binding is not None:  # bound here to an executor held elsewhere: its route first
            await asyncio.shield(binding)
        local = self.local.executor_for(session, alias)
        try:
            route = await self.route(session, alias)
        except self.errors as exc:
            if local is None:
                raise ExecutorUnavailable(f"the executor routes are out of reach ({exc})") from exc
            route = None
        if route is None or (route.instance == self.instance and route.incarnation == self.incarnation):
            executor = (self.local.get(route.executor) if route is not None else local) or local
            bound_to(executor, session, tenant)
            return await self.local.call(
                executor, call_id=call_id, tool=tool, arguments=arguments, scope=scope, progress=progress
            )
        if not await self._alive(route.instance, route.incarnation):
            raise ExecutorUnavailable(
                f"the runtime executor's instance {route.instance} is gone; the client must rebind"
            )
        relay_id = secrets.token_hex(16)
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending[relay_id] = _Pending(future, progress, emit)
        command = {
            "relay": relay_id,
            "reply_to": self.channel,
            "session": session,
            "executor": route.executor,
            "call_id": call_id,
            "tool": tool,
            "arguments": arguments,
            "scope": scope,
        }
        try:
            try:
                await self._send(route.instance, "call", command)
            except self.errors as exc:  # it may have been sent: never sent again
                raise CallLost(f"the relay to instance {route.instance} failed ({exc})") from exc
            while True:
                done, _ = await asyncio.wait({future}, timeout=ALIVE_CHECK_SECONDS)
                if done:
                    return future.result()
                if not await self._alive(route.instance, route.incarnation):
                    raise CallLost(f"the runtime executor's instance {route.instance} left the fleet")
        except asyncio.CancelledError:
            with contextlib.suppress(*self.errors):
                await asyncio.shield(self._send(route.instance, "cancel", {"relay": relay_id}))
            raise
        finally:
            self._pending.pop(relay_id, None)
            if not future.done():
                future.cancel()

    async def _send(self, instance: str, kind: str, body: dict[str, object]) -> None:
        await self._send_to(records.channel_of(instance), kind, body)

    async def _send_to(self, channel: str, kind: str, body: dict[str, object]) -> None:
        await self._layer.send(channel, kind, body)

    def _fail_pending(self, reason: str) -> None:
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(CallLost(reason))

    # -- the receiving side ----------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            try:
                message = await self._layer.receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis out of reach: replies may be lost, so pending calls are
                logger.warning("executor relay cannot receive", extra={"error": str(exc)})
                self._fail_pending(f"the relay's Redis is out of reach ({exc})")
                await asyncio.sleep(ALIVE_CHECK_SECONDS)
                continue
            try:
                if message is not None:
                    self._dispatch(*message)
            except Exception as exc:
                logger.warning("executor relay message dropped", extra={"error": str(exc)})

    def _dispatch(self, kind: str, body: dict[str, object]) -> None:
        relay_id = str(body.get("relay", ""))
        if kind == "call":
            task = asyncio.get_running_loop().create_task(self._serve(relay_id, body))
            self._serving[relay_id] = task
            task.add_done_callback(lambda _: self._serving.pop(relay_id, None))
        elif kind == "cancel":
            serving = self._serving.get(relay_id)
            if serving is not None:
                serving.cancel()
        elif kind == "reply":
            pending = self._pending.get(relay_id)
            if pending is None or pending.future.done():
                return
            if "progress" in body:
                with contextlib.suppress(Exception):
                    pending.progress(body["progress"])
            elif "result" in body:
                pending.future.set_result(body["result"])
            elif body.get("unavailable"):
                pending.future.set_exception(ExecutorUnavailable(str(body.get("message", ""))))
            else:
                pending.future.set_exception(CallLost(str(body.get("message", "the call was lost"))))
        elif kind == "event":  # an executor's event of a call this instance sent
            self._spawn(self._commit_event(self._pending.get(relay_id), body))
        elif kind == "event_reply":
            answer = self._events.get(str(body.get("event", "")))
            if answer is not None and not answer.done():
                answer.set_result(body)
        elif kind == "bind":  # a session created on another instance bound it
            executor = self.local.get(str(body.get("executor", "")))
            bound = str(body.get("session", ""))
            if executor is not None and bound and executor.session in ("", bound):
                # its route was written by the binding instance (a later rebind's is not undone)
                self.local.route(executor, bound)
                record = self._redis.set(
                    records.executor_key(executor.id), self._records.executor(executor), ex=HOLDER_SECONDS
                )
                self._spawn(self._quietly(record, "bind"))
        elif kind == "close":
            executor = self.local.get(str(body.get("executor", "")))
            session = body.get("session")  # a session's close: only an executor that serves it
            if executor is not None and (session is None or executor.session == session):
                if self.local.remove(executor, reason=str(body.get("reason", "closed by another instance"))):
                    self.withdraw_soon(executor)

    async def _serve(self, relay_id: str, body: dict[str, object]) -> None:
        """A call another instance sent for an executor connected here."""
        reply_to = str(body.get("reply_to", ""))

        def progress(value: object) -> None:
            self._spawn(
                self._quietly(self._send_to(reply_to, "reply", {"relay": relay_id, "progress": value}), "progress")
            )

        answer: dict[str, object] = {"relay": relay_id}
        raw_scope = body.get("scope")
        scope = {str(k): str(v) for k, v in raw_scope.items()} if isinstance(raw_scope, dict) else {}
        executor = self.local.get(str(body.get("executor", "")))
        call_id = str(body.get("call_id", ""))
        self._relayed[call_id] = (reply_to, relay_id)
        try:
            served = bound_to(executor, str(body.get("session", "")), scope.get("tenant_id", ""))
            if scope.get("session_id") != served.session:
                raise ExecutorUnavailable("a runtime call names no session and tenant")
            async with asyncio.timeout(HOLDER_CALL_SECONDS):
                answer["result"] = await self.local.call(
                    served,
                    call_id=call_id,
                    tool=str(body.get("tool", "")),
                    arguments=body.get("arguments"),
                    scope=scope,
                    progress=progress,
                )
        except ExecutorUnavailable as exc:
            answer |= {"unavailable": True, "message": str(exc)}
        except CallLost as exc:
            answer["message"] = str(exc)
        except TimeoutError:
            answer["message"] = "the runtime executor sent no result in time"
        finally:
            self._relayed.pop(call_id, None)
        await self._quietly(self._send_to(reply_to, "reply", answer), "reply")

    async def close_remote(self, route: Route, reason: str) -> None:
        """Close an executor another instance holds (a rebind here replaced it)."""
        await self._quietly(
            self._send(route.instance, "close", {"executor": route.executor, "reason": reason}), "close"
        )

    # -- extension events of relayed calls -------------------------------------------------

    def relayed_emitter(self, call_id: str) -> Emitter | None:
        """The emitter of a call another instance relayed to an executor held here: each event
        goes to that instance, which appends it to the session's log before answering."""
        relayed = self._relayed.get(call_id)
        if relayed is None:
            return None
        reply_to, relay_id = relayed

        async def emit(kind: str, data: object) -> None:
            await self._relay_event(reply_to, relay_id, kind, data)

        return emit

    async def _relay_event(self, reply_to: str, relay_id: str, kind: str, data: object) -> None:
        refusal = event_refusal(kind, data)
        if refusal is not None:  # refused here: it never crosses Redis
            raise EmitRefused(refusal)
        event_id = secrets.token_hex(16)
        answer: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self._events[event_id] = answer
        body = {"relay": relay_id, "event": event_id, "reply_to": self.channel, "kind": kind, "data": data}
        unconfirmed = "the session's owner did not confirm the event ({}): it may have been committed"
        try:
            await self._send_to(reply_to, "event", body)
            async with asyncio.timeout(EVENT_RELAY_SECONDS):
                reply = await answer
        except TimeoutError:
            raise Unavailable(unconfirmed.format("no answer in time")) from None
        except self.errors as exc:
            raise Unavailable(unconfirmed.format(type(exc).__name__)) from None
        finally:
            self._events.pop(event_id, None)
        if reply.get("status") == "committed":
            return
        message = str(reply.get("refused", "the event was refused"))
        if reply.get("over"):
            raise Conflict(message)
        raise EmitRefused(message)

    async def _commit_event(self, pending: _Pending | None, body: dict[str, object]) -> None:
        """Append an executor's event of a call this instance sent, then answer its holder."""
        answer: dict[str, object] = {"event": str(body.get("event", ""))}
        if pending is None or pending.emit is None or pending.future.done():
            answer |= {"refused": "the call is over: its events can no longer be recorded", "over": True}
        else:
            try:
                await pending.emit(str(body.get("kind", "")), body.get("data"))
                answer["status"] = "committed"
            except EmitRefused as exc:
                answer["refused"] = str(exc)
        await self._quietly(self._send_to(str(body.get("reply_to", "")), "event_reply", answer), "event")
