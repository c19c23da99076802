"""The routes and holders of the executor relay (tools_app.relay): which instance serves a
session's alias, and which holds an executor, recorded in Redis.

Every bind of an executor to a session's alias is announced as that alias's route (the instance,
its incarnation and the executor id); the last bind wins, so a rebind through any instance takes
the alias over. Each executor registered here is recorded (tools_app.relay_records) with its
holder, so its routes reaching another instance are forwarded here (fleet_app.routing), and with
what a session created elsewhere binds it by. A session's routes are one hash: closing the session
on its owner closes the executors that serve it on every instance. Nothing from Redis is trusted
unsealed (tools_app.relay_seal)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from foundation.errors import Unavailable
from foundation.logs import logger

from . import relay_records as records
from .executor_store import Executor, LocalExecutors
from .relay_channel import REDIS_SECONDS
from .relay_records import Holder, Located, Records, Route
from .relay_seal import RelaySeal

__all__ = ["HOLDER_REFRESH_SECONDS", "HOLDER_SECONDS", "Members", "RelayRoutes"]

# A holder record is written at registration and rewritten every HOLDER_REFRESH_SECONDS while
# the executor lives, so one left by a killed instance goes within HOLDER_SECONDS.
HOLDER_SECONDS = 900
HOLDER_REFRESH_SECONDS = 300.0

# (instance, incarnation) -> that process's address in the fleet's instances table while it is a
# live member of the fleet, else None
Members = Callable[[str, str], Awaitable[str | None]]


class RelayRoutes:
    """Routes and holders in Redis; the relay (tools_app.relay.ExecutorRelay) adds the calls and
    the messages between instances (`_send`)."""

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
        # (session, alias) -> the route of a bind to an executor held elsewhere, being written
        self._binding: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def _send(self, instance: str, kind: str, body: dict[str, object]) -> None:
        """One sealed message to another instance's channel (the relay's)."""
        raise NotImplementedError

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
