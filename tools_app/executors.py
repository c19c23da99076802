"""The runtime executor hub: the executors this process holds (tools_app.executor_store) and,
in a fleet, how it reaches those other instances hold (`remote`, the relay of tools_app.relay),
told at construction.

With a remote each bind is announced, so a session owned by another instance reaches its
executor, and a session created on one instance may bind an executor another instance holds; a
call of a session's alias goes wherever the alias is served now. Without one, an executor serves
the sessions of this process alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from foundation.errors import Conflict, InvalidRequest
from foundation.hostconfig import Limits
from foundation.schema_workers import SchemaWorkers
from runners.protocol import ToolDescriptor

from .executor_store import (
    SWEEP_SECONDS,
    CallLost,
    Connection,
    Executor,
    ExecutorUnavailable,
    LocalExecutors,
    bound_to,
    normalized_tools,
)

# An extension event's emitter: returns once the event is committed (environments.events).
Emitter = Callable[[str, object], Awaitable[None]]

__all__ = [
    "CallLost",
    "Connection",
    "Executor",
    "ExecutorHub",
    "ExecutorUnavailable",
    "LocalExecutors",
    "RemoteExecutors",
    "SoloExecutors",
    "bound_to",
    "normalized_tools",
]


class RemoteExecutors(Protocol):
    """How the hub reaches executors other instances hold (a fleet's relay): binds announced,
    closes withdrawn, a closed session's executors elsewhere closed, a session's call sent to
    whichever instance serves its alias (this one included). `shared`: other instances exist (a
    session's row, not this process's actor, is the truth about its bindings)."""

    shared: bool

    def announce_soon(self, session: str, alias: str, executor_id: str) -> None: ...

    def withdraw_soon(self, executor: Executor) -> None: ...

    def revoke_soon(self, session: str) -> None: ...

    async def held_elsewhere(self, executor_id: str) -> Executor | None: ...

    def bind_elsewhere_soon(self, session: str, executor: Executor) -> None: ...

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
    ) -> object: ...

    def relayed_emitter(self, call_id: str) -> Emitter | None:
        """Where an executor held here sends the events of a call another instance relayed to it
        (that instance appends them); None when no such call runs here."""
        ...


class SoloExecutors:
    """The remote of a single instance: no other instance holds an executor, so there is
    nothing to announce or withdraw, and a call goes to the executor held here."""

    shared = False

    def __init__(self, local: LocalExecutors) -> None:
        self.local = local

    def announce_soon(self, session: str, alias: str, executor_id: str) -> None:
        pass

    def withdraw_soon(self, executor: Executor) -> None:
        pass

    def revoke_soon(self, session: str) -> None:
        pass

    async def held_elsewhere(self, executor_id: str) -> Executor | None:
        return None

    def bind_elsewhere_soon(self, session: str, executor: Executor) -> None:
        pass

    def relayed_emitter(self, call_id: str) -> Emitter | None:
        return None

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
        return await self.local.call(
            self.local.executor_for(session, alias),
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            scope=scope,
            progress=progress,
        )


class ExecutorHub:
    """The process's runtime executors (`local`) and, in a fleet, the `remote` way to those other
    instances hold. One no session has bound closes `unbound_seconds` after its registration
    (`expire_unbound`, run by the engine, sweeps them on time)."""

    def __init__(self, local: LocalExecutors | None = None, *, remote: RemoteExecutors | None = None) -> None:
        self.local = local if local is not None else LocalExecutors()
        self.remote: RemoteExecutors = remote if remote is not None else SoloExecutors(self.local)
        # the running placed calls' extension events, by call id (tools_app.environments.events)
        self._emitters: dict[str, Emitter] = {}

    @classmethod
    def of(cls, limits: Limits, *, remote: RemoteExecutors | None = None) -> ExecutorHub:
        """A hub with the tenant share and expiry of `limits`."""
        return cls(LocalExecutors.of(limits), remote=remote)

    @property
    def schemas(self) -> SchemaWorkers:
        return self.local.schemas

    # -- registration and binds ------------------------------------------------------------

    def register(self, tenant: str, binding: str, tools: list[ToolDescriptor], *, session: str = "") -> tuple[str, str]:
        """A new executor and its credential. With `session` (a rebind) it replaces the
        executor that served the session's alias."""
        self._expire_unbound()
        previous = self.local.executor_for(session, binding) if session else None
        executor, token = self.local.admit(tenant, binding, tools, replacing=1 if previous is not None else 0)
        if session:
            self.bind(executor, session)
            if previous is not None:
                self.close(previous, reason="replaced by a rebind")
        return executor.id, token

    def bind(self, executor: Executor, session: str) -> None:
        """The executor serves `session`'s alias from now on (announced in a fleet)."""
        if executor.holder is not None:  # held by another instance: its route names that one
            executor.session = session
            self.remote.bind_elsewhere_soon(session, executor)
            return
        self.local.route(executor, session)
        self.remote.announce_soon(session, executor.binding, executor.id)

    async def held_elsewhere(self, executor_id: str) -> Executor | None:
        """An executor another live instance of the fleet holds; None on a single instance."""
        return await self.remote.held_elsewhere(executor_id)

    def close(self, executor: Executor, *, reason: str = "the executor closed") -> None:
        """Unregister: pending calls end with unknown outcomes; the credential stops working."""
        if self.local.remove(executor, reason=reason):
            self.remote.withdraw_soon(executor)

    def revoke_session(self, session: str) -> None:
        """The session closed: its executors and their credentials end, in a fleet those on
        other instances too."""
        for executor in self.local.serving(session):
            self.close(executor, reason="the session closed")
        self.remote.revoke_soon(session)

    def _expire_unbound(self) -> None:
        for executor in self.local.expired():
            self.close(executor, reason="never bound to a session")

    async def expire_unbound(self) -> None:
        """Sweep unbound executors every SWEEP_SECONDS until cancelled (the engine owns the task)."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            self._expire_unbound()

    # -- what the local executors answer ---------------------------------------------------

    def authenticate(self, executor_id: str, authorization: str | None) -> Executor:
        return self.local.authenticate(executor_id, authorization)

    def check_token(self, executor_id: str, token: str) -> Executor:
        return self.local.check_token(executor_id, token)

    def get(self, executor_id: str) -> Executor | None:
        return self.local.get(executor_id)

    def executor_for(self, session: str, alias: str) -> Executor | None:
        return self.local.executor_for(session, alias)

    def executor_ids(self) -> list[str]:
        return self.local.executor_ids()

    def require_owned(self, executor_id: str, tenant: str) -> Executor:
        return self.local.require_owned(executor_id, tenant)

    def connect(self, executor: Executor) -> Connection:
        return self.local.connect(executor)

    def disconnect(self, executor: Executor, connection: Connection) -> None:
        self.local.disconnect(executor, connection)

    def reply(
        self, executor: Executor, *, connection: str, call_id: str, progress: object = None, result: object = None
    ) -> None:
        self.local.reply(executor, connection=connection, call_id=call_id, progress=progress, result=result)

    # -- extension events of placed calls --------------------------------------------------

    def expect_events(self, call_id: str, emit: Emitter | None) -> str:
        """While a placed call runs, its executor's `event` replies reach `emit` (the token
        given back ends that)."""
        if emit is not None:
            self._emitters[call_id] = emit
        return call_id

    def forget_events(self, token: str) -> None:
        self._emitters.pop(token, None)

    async def emit(self, executor: Executor, *, connection: str, call_id: str, kind: str, data: object) -> None:
        """An executor's extension event of a pending call, committed to the session's log
        before this returns (a call relayed here from the session's owner: committed there): 409
        for a call that is not pending or has ended, 400 for an event refused (kind, size, count),
        503 when the owner could not be asked."""
        from .environments.events import EmitRefused  # the environments import this module

        self.local.pending(executor, connection=connection, call_id=call_id)
        emitter = self._emitters.get(call_id) or self.remote.relayed_emitter(call_id)
        if emitter is None:
            raise Conflict("this call takes no events: it is not a running placed call")
        try:
            await emitter(kind, data)
        except EmitRefused as exc:
            raise InvalidRequest(str(exc)) from None

    # -- calls -----------------------------------------------------------------------------

    async def call_alias(
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
        """One call of whichever executor serves the session's alias now, here or (with a
        remote) on another instance. Raises ExecutorUnavailable before dispatch, CallLost
        after it; cancellation propagates."""
        return await self.remote.call(
            session,
            alias,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            scope=scope,
            progress=progress,
            emit=self._emitters.get(call_id),
        )
