"""Runtime tools across a fleet: a session owned by one instance calls an executor whose command
stream is held by another, over the Channels Redis layer.

Every bind of an executor to a session's alias is announced in Redis as that alias's route (the
instance, its incarnation and the executor id); the last bind wins, so a rebind through any
instance takes the alias over. A call whose route names another instance is sent once to that
instance's channel; the holder pushes it on the executor's stream and sends progress and the
result back to the caller's channel. Nothing is replayed: a call whose holder leaves the fleet
(row gone or expired, or a new incarnation) before a result came, or whose send or reply path
fails on Redis, ends unknown; a call to a holder that is not alive is refused before sending.

Each executor registered here is recorded in Redis (tools_app.relay_records) with its holder, so
its routes reaching another instance are forwarded here (fleet_app.routing), and with what a
session created elsewhere binds it by: that instance writes the alias's route naming this one and
tells this one, which marks it bound. A session's routes are one hash: closing the session on its
owner closes the executors that serve it on every instance.

Nothing from Redis is trusted unsealed (tools_app.relay_seal); a holder is reached at the instances
table's address; a call reaches only an executor bound to its session and tenant."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from foundation.errors import Unavailable
from foundation.logs import logger

from . import relay_records as records
from .executor_store import CallLost, Executor, ExecutorUnavailable, LocalExecutors, bound_to
from .relay_channel import REDIS_SECONDS, RelayChannel
from .relay_records import Holder, Located, Records, Route
from .relay_seal import RelaySeal

__all__ = ["CHANNEL_REDIS_ENV", "ExecutorRelay", "Holder", "Located", "Route"]

CHANNEL_REDIS_ENV = "BRAIN_CHANNEL_REDIS"
# A holder record is written at registration and rewritten every HOLDER_REFRESH_SECONDS while
# the executor lives, so one left by a killed instance goes within HOLDER_SECONDS.
HOLDER_SECONDS = 900
HOLDER_REFRESH_SECONDS = 300.0
ALIVE_CHECK_SECONDS = 1.0  # how often a caller checks that the holder of a pending call is alive
HOLDER_CALL_SECONDS = 330.0  # the holder's own bound on one relayed call (the caller's is 300 s)

# (instance, incarnation) -> that process's address in the fleet's instances table while it is a
# live member of the fleet, else None
Members = Callable[[str, str], Awaitable[str | None]]


@dataclass(eq=False)
class _Pending:
    future: asyncio.Future[object]
    progress: Callable[[object], None]


class ExecutorRelay:
    """This instance's end of the relay: announces its binds, sends calls to other instances and
    serves the calls they send to the executors held here (`local`). The hub is built with it
    as its remote (tools_app.executors.RemoteExecutors); other instances hold executors too."""

    shared = True

    def __init__(
        self, local: LocalExecutors, *, redis_url: str, instance: str, incarnation: str, secret: bytes, member: Members
    ) -> None:
        self.local = local
        self.instance = instance
        self.incarnation = incarnation
        self.holder = Holder(instance, incarnation)
        self.channel = records.channel_of(instance)
        self._member = member
        self._seal = RelaySeal(secret)
        self._records = Records(self._seal)
        # imported here, not at module load: redis pulls in the OpenTelemetry SDK when it is
        # installed, and a server without a fleet relay must not load it (telemetry is opt-in)
        from redis import asyncio as aioredis
        from redis.exceptions import RedisError

        self.errors: tuple[type[Exception], ...] = (RedisError, OSError)  # what "Redis is out of reach" looks like
        self._redis = aioredis.Redis.from_url(
            redis_url, socket_timeout=REDIS_SECONDS, socket_connect_timeout=REDIS_SECONDS
        )
        self._layer = RelayChannel(redis_url, self.channel, self._seal)
        self._pending: dict[str, _Pending] = {}  # relay id -> a call this instance sent
        self._serving: dict[str, asyncio.Task[None]] = {}  # relay id -> a call served here
        # (session, alias) -> the route of a bind to an executor held elsewhere, being written
        self._binding: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
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

    def _spawn(self, awaitable: Awaitable[None]) -> None:
        async def run() -> None:
            await awaitable

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- routes ----------------------------------------------------------------------------

    async def announce(self, session: str, alias: str, executor_id: str) -> None:
        """This instance now serves the session's alias (the last bind wins)."""
        route = Route(self.instance, self.incarnation, executor_id)
        executor = self.local.get(executor_id)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(records.routes_key(session), alias, self._records.route(session, alias, route))
            if executor is not None:  # bound now: another instance's bind check sees it
                pipe.set(records.executor_key(executor_id), self._records.executor(executor), ex=HOLDER_SECONDS)
            await pipe.execute()

    def announce_soon(self, session: str, alias: str, executor_id: str) -> None:
        self._spawn(self._quietly(self.announce(session, alias, executor_id), "announce"))

    def withdraw_soon(self, executor: Executor) -> None:
        """The executor closed: its holder record goes, and its route unless a later bind
        replaced it."""
        holder, mine = records.holder_key(executor.id), self._records.holder(executor.id, self.holder)
        self._spawn(self._quietly(self._redis.eval(records.DELETE_IF_SAME, 1, holder, mine), "withdraw"))
        self._spawn(self._quietly(self._redis.delete(records.executor_key(executor.id)), "withdraw"))
        if not executor.session:
            return
        key, route = records.routes_key(executor.session), Route(self.instance, self.incarnation, executor.id)
        value = self._records.route(executor.session, executor.binding, route)
        withdrawn = self._redis.eval(records.HDELETE_IF_SAME, 1, key, executor.binding, value)
        self._spawn(self._quietly(withdrawn, "withdraw"))

    def revoke_soon(self, session: str) -> None:
        """The session closed here: the executors serving it on other instances close too."""
        self._spawn(self._quietly(self._revoke(session), "revoke"))

    async def _revoke(self, session: str) -> None:
        key = records.routes_key(session)
        routes = await self._redis.hgetall(key)
        for alias, raw in routes.items():
            route = self._records.open_route(session, alias.decode() if isinstance(alias, bytes) else alias, raw)
            if route is not None and (route.instance, route.incarnation) != (self.instance, self.incarnation):
                await self._send(
                    route.instance,
                    "close",
                    {"executor": route.executor, "session": session, "reason": "the session closed"},
                )
        await self._redis.delete(key)

    async def _quietly(self, awaitable: Awaitable[object], what: str) -> None:
        try:
            await awaitable
        except self.errors as exc:
            logger.warning("executor route not updated", extra={"action": what, "error": str(exc)})

    async def route(self, session: str, alias: str) -> Route | None:
        raw = await self._redis.hget(records.routes_key(session), alias)
        return self._records.open_route(session, alias, raw)

    # -- holders: where an executor's own routes are served ------------------------------------

    async def hold(self, executor_id: str) -> None:
        """Record that this instance holds the executor (registered here), and what a bind
        through another instance checks it by. Without Redis the executor still works through
        this instance; its routes through others answer 401, binds through them 400."""
        executor = self.local.get(executor_id)
        if executor is None:
            return
        await self._quietly(self._hold([executor]), "hold")

    async def _hold(self, executors: list[Executor]) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for executor in executors:
                pipe.set(
                    records.holder_key(executor.id), self._records.holder(executor.id, self.holder), ex=HOLDER_SECONDS
                )
                pipe.set(records.executor_key(executor.id), self._records.executor(executor), ex=HOLDER_SECONDS)
            await pipe.execute()

    async def held_elsewhere(self, executor_id: str) -> Executor | None:
        """An executor a live other instance holds, as its holder recorded it (`holder` set,
        `session` the one it serves if bound); None when no live instance does (or this one
        does). A retryable 503 when Redis is out of reach."""
        try:
            raw_holder, raw_record = await self._redis.mget(
                records.holder_key(executor_id), records.executor_key(executor_id)
            )
        except self.errors as exc:
            raise Unavailable("the runtime executor records are out of reach; retry") from exc
        holder = self._records.open_holder(executor_id, raw_holder)
        if holder is None or holder == self.holder:
            return None
        executor = self._records.open_executor(executor_id, raw_record, holder)
        if executor is None or not await self._alive(holder.instance, holder.incarnation):
            return None
        return executor

    def bind_elsewhere_soon(self, session: str, executor: Executor) -> None:
        """A session created here binds an executor another instance holds: the alias's route
        names that instance, which is told to mark the executor bound. A call of the session
        waits for the route to be written."""
        key = (session, executor.binding)
        task = asyncio.get_running_loop().create_task(self._quietly(self._bind_elsewhere(session, executor), "bind"))
        self._binding[key] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

        def written(done: asyncio.Task[None]) -> None:
            if self._binding.get(key) is done:
                del self._binding[key]

        task.add_done_callback(written)

    async def _bind_elsewhere(self, session: str, executor: Executor) -> None:
        assert executor.holder is not None
        instance, incarnation = executor.holder
        route = Route(instance, incarnation, executor.id)
        value = self._records.route(session, executor.binding, route)
        await self._redis.hset(records.routes_key(session), executor.binding, value)
        await self._send(instance, "bind", {"executor": executor.id, "session": session})

    def holds(self, executor_id: str) -> bool:
        return self.local.get(executor_id) is not None

    async def holder_of(self, executor_id: str) -> Located | None:
        """The other instance recorded as holding the executor, at the address the instances
        table gives it; None when none is, this one is, or the one recorded is no live member
        of the fleet. Raises when Redis or the database is out of reach."""
        holder = self._records.open_holder(executor_id, await self._redis.get(records.holder_key(executor_id)))
        if holder is None or holder == self.holder:
            return None
        url = await self._member(holder.instance, holder.incarnation)
        return Located(holder.instance, holder.incarnation, url) if url is not None else None

    async def holder_alive(self, instance: str, incarnation: str) -> bool:
        return await self._alive(instance, incarnation)

    async def _alive(self, instance: str, incarnation: str) -> bool:
        return await self._member(instance, incarnation) is not None

    async def _refresh_holders(self) -> None:
        while True:
            await asyncio.sleep(HOLDER_REFRESH_SECONDS)
            executors = [e for e in map(self.local.get, self.local.executor_ids()) if e is not None]
            if not executors:
                continue
            try:
                await self._hold(executors)
            except self.errors as exc:
                logger.warning("executor holders not refreshed", extra={"error": str(exc)})

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
        self._pending[relay_id] = _Pending(future, progress)
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
        try:
            served = bound_to(executor, str(body.get("session", "")), scope.get("tenant_id", ""))
            if scope.get("session_id") != served.session:
                raise ExecutorUnavailable("a runtime call names no session and tenant")
            async with asyncio.timeout(HOLDER_CALL_SECONDS):
                answer["result"] = await self.local.call(
                    served,
                    call_id=str(body.get("call_id", "")),
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
        await self._quietly(self._send_to(reply_to, "reply", answer), "reply")

    async def close_remote(self, route: Route, reason: str) -> None:
        """Close an executor another instance holds (a rebind here replaced it)."""
        await self._quietly(
            self._send(route.instance, "close", {"executor": route.executor, "reason": reason}), "close"
        )
