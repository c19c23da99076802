"""The runtime executors this process holds: tools that run in the client's own process,
reached over a command stream (SSE, or a WebSocket) that the client keeps open.

An executor is registered with a manage token and gets its own credential; a session binds it
under an alias. Each command connection gets a fresh id: commands name it, replies must carry
it, and a new connection supersedes the old. Commands are never replayed: a call dispatched on
a connection that drops, or to an executor that closes, ends with an unknown outcome; a call to
an executor with no connection fails before dispatch. Everything lives in this process's
memory: after a restart clients register again and rebind. What other instances of a fleet
learn of them, and how a call reaches one held elsewhere, is the hub's (tools_app.executors).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from foundation.errors import Conflict, NotFound, Overloaded, Unauthorized
from foundation.hostconfig import Limits
from foundation.logs import logger
from foundation.schema_workers import SchemaWorkers
from runners.protocol import ToolDescriptor

__all__ = [
    "CallLost",
    "Connection",
    "Executor",
    "ExecutorUnavailable",
    "LocalExecutors",
    "bound_to",
    "normalized_tools",
]

MAX_EXECUTORS = 4096  # per process; registrations past it are 429
# One tenant's share of MAX_EXECUTORS (limits.tenant_executors): a quarter, so a tenant that
# registers without end leaves room for at least three others.
DEFAULT_TENANT_EXECUTORS = MAX_EXECUTORS // 4
MAX_UNBOUND_SECONDS = 600.0  # an executor no session bound is dropped after this long
SWEEP_SECONDS = 1.0  # how often unbound executors are checked for expiry (an expiry is this late at most)
MAX_CALLS_PER_EXECUTOR = 32  # the published clients refuse more concurrent calls
MAX_QUEUED_COMMANDS = 256
PING_SECONDS = 15.0


class ExecutorUnavailable(Exception):
    """No executor or no connection: the call was not dispatched."""


class CallLost(Exception):
    """The call was dispatched, then its connection dropped or its executor closed."""


@dataclass(eq=False)
class Connection:
    """One command stream of an executor (SSE or WebSocket)."""

    id: str
    commands: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(MAX_QUEUED_COMMANDS))
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, command: dict[str, object]) -> bool:
        if self.closed.is_set():
            return False
        try:
            self.commands.put_nowait(orjson.dumps(command))
        except asyncio.QueueFull:
            return False
        return True

    def close(self) -> None:
        self.closed.set()

    async def next(self, timeout: float) -> bytes | None:
        """The next command, None when `timeout` passes first; raises CallLost once closed."""
        if not self.commands.empty():
            return self.commands.get_nowait()
        getter = asyncio.ensure_future(self.commands.get())
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            done, _ = await asyncio.wait({getter, closed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not getter.done():
                getter.cancel()
        if getter in done:
            return getter.result()
        if self.closed.is_set():
            raise CallLost("connection closed")
        return None


@dataclass(eq=False)
class _Call:
    id: str
    connection: str
    future: asyncio.Future[object]
    progress: Callable[[object], None]


@dataclass(eq=False)
class Executor:
    id: str
    tenant: str
    binding: str  # the alias it serves
    tools: list[ToolDescriptor]
    token_digest: bytes
    created: float
    session: str = ""  # the session that bound it
    connection: Connection | None = None
    calls: dict[str, _Call] = field(default_factory=dict)
    closed: bool = False
    # (instance, incarnation) of the fleet instance holding it, for one registered elsewhere
    # (as its holder recorded it); None for one this process holds
    holder: tuple[str, str] | None = None

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(tool["name"] for tool in self.tools)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def normalized_tools(tools: list[ToolDescriptor]) -> list[dict[str, object]]:
    """Descriptors compared by content, in name order (a rebind must match what was saved)."""
    return sorted((dict(tool) for tool in tools), key=lambda tool: str(tool.get("name")))


class LocalExecutors:
    """The executors this process holds: at most MAX_EXECUTORS, `tenant_share` of them per
    tenant, each unbound one listed until `unbound_seconds` after its registration (`expired`).
    `schemas` is the pool that compiles the tenants' runtime tool schemas and checks calls
    against them."""

    def __init__(
        self,
        *,
        tenant_share: int = DEFAULT_TENANT_EXECUTORS,
        unbound_seconds: float = MAX_UNBOUND_SECONDS,
        schemas: SchemaWorkers | None = None,
    ) -> None:
        self.schemas = schemas if schemas is not None else SchemaWorkers(name="brain-tenant-schemas")
        self._executors: dict[str, Executor] = {}
        self._routes: dict[tuple[str, str], str] = {}  # (session, alias) -> executor id
        self._tenant_share = tenant_share
        self._unbound_seconds = unbound_seconds
        self._per_tenant: dict[str, int] = {}
        self._unbound: dict[str, Executor] = {}  # in registration order, so the oldest come first

    @classmethod
    def of(cls, limits: Limits) -> LocalExecutors:
        """The executors of a process with the tenant share and expiry of `limits`."""
        return cls(tenant_share=limits.tenant_executors, unbound_seconds=limits.unbound_executor_seconds)

    # -- registration and credentials ------------------------------------------------------

    def admit(
        self, tenant: str, binding: str, tools: list[ToolDescriptor], *, replacing: int = 0
    ) -> tuple[Executor, str]:
        """A new unbound executor and its credential, within the limits (`replacing`: 1 when it
        takes the place of one that is about to close)."""
        if len(self._executors) - replacing >= MAX_EXECUTORS:
            raise Overloaded("too many runtime executors")
        if self._per_tenant.get(tenant, 0) - replacing >= self._tenant_share:
            raise Overloaded(
                f"the tenant's share of runtime executors ({self._tenant_share}, limits.tenant_executors) "
                "is in use; close executors it no longer needs or try again later"
            )
        executor_id, token = secrets.token_hex(16), secrets.token_urlsafe(32)
        executor = Executor(
            id=executor_id,
            tenant=tenant,
            binding=binding,
            tools=list(tools),
            token_digest=_digest(token),
            created=time.monotonic(),
        )
        self._executors[executor_id] = executor
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        self._unbound[executor_id] = executor
        return executor, token

    def authenticate(self, executor_id: str, authorization: str | None) -> Executor:
        """The executor whose credential `authorization` carries; 401 otherwise (also for an
        API token: executor credentials and API tokens never stand in for each other)."""
        scheme, _, token = (authorization or "").partition(" ")
        executor = self._executors.get(executor_id)
        if scheme.lower() != "bearer" or not token or executor is None or executor.closed:
            raise Unauthorized("invalid executor credential")
        if not hmac.compare_digest(executor.token_digest, _digest(token.strip())):
            raise Unauthorized("invalid executor credential")
        return executor

    def check_token(self, executor_id: str, token: str) -> Executor:
        return self.authenticate(executor_id, f"Bearer {token}")

    def get(self, executor_id: str) -> Executor | None:
        executor = self._executors.get(executor_id)
        return executor if executor is not None and not executor.closed else None

    def route(self, executor: Executor, session: str) -> None:
        """The executor, held here, serves `session`'s alias from now on."""
        executor.session = session
        self._unbound.pop(executor.id, None)
        self._routes[(session, executor.binding)] = executor.id

    def executor_for(self, session: str, alias: str) -> Executor | None:
        executor_id = self._routes.get((session, alias))
        return self.get(executor_id) if executor_id is not None else None

    def serving(self, session: str) -> list[Executor]:
        return [executor for executor in self._executors.values() if executor.session == session]

    def expired(self) -> list[Executor]:
        """The executors registered more than `unbound_seconds` ago that no session bound: only
        the expired ones are visited (the oldest first)."""
        expiry = time.monotonic() - self._unbound_seconds
        found: list[Executor] = []
        for executor in self._unbound.values():
            if executor.created > expiry:
                break
            found.append(executor)
        return found

    # -- connections -----------------------------------------------------------------------

    def connect(self, executor: Executor) -> Connection:
        """A new command connection; the previous one (and the calls dispatched on it) end."""
        previous = executor.connection
        connection = Connection(secrets.token_hex(16))
        executor.connection = connection
        if previous is not None:
            self._drop(executor, previous, "the executor reconnected")
        connection.push({"type": "ready", "connection": connection.id})
        return connection

    def disconnect(self, executor: Executor, connection: Connection) -> None:
        if executor.connection is connection:
            executor.connection = None
        self._drop(executor, connection, "the executor's connection dropped")

    def _drop(self, executor: Executor, connection: Connection, reason: str) -> None:
        connection.close()
        for call in list(executor.calls.values()):
            if call.connection == connection.id and not call.future.done():
                call.future.set_exception(CallLost(reason))

    def remove(self, executor: Executor, *, reason: str = "the executor closed") -> bool:
        """Unregister: pending calls end with unknown outcomes; the credential stops working.
        False when it was closed already."""
        if executor.closed:
            return False
        executor.closed = True
        self._executors.pop(executor.id, None)
        self._unbound.pop(executor.id, None)
        count = self._per_tenant.get(executor.tenant, 0) - 1
        if count > 0:
            self._per_tenant[executor.tenant] = count
        else:
            self._per_tenant.pop(executor.tenant, None)
        if self._routes.get((executor.session, executor.binding)) == executor.id:
            del self._routes[(executor.session, executor.binding)]
        if executor.connection is not None:
            self._drop(executor, executor.connection, reason)
            executor.connection = None
        for call in executor.calls.values():
            if not call.future.done():
                call.future.set_exception(CallLost(reason))
        logger.info("runtime executor closed", extra={"executor": executor.id, "reason": reason})
        return True

    def executor_ids(self) -> list[str]:
        return list(self._executors)

    # -- calls -----------------------------------------------------------------------------

    async def call(
        self,
        executor: Executor | None,
        *,
        call_id: str,
        tool: str,
        arguments: object,
        scope: dict[str, str],
        progress: Callable[[object], None],
    ) -> object:
        """Dispatch one call and wait for its result object. Raises ExecutorUnavailable before
        dispatch, CallLost after it; cancellation sends a `cancel` command and propagates."""
        if executor is None or executor.closed:
            raise ExecutorUnavailable("the runtime executor is not registered; the client must rebind")
        connection = executor.connection
        if connection is None or connection.closed.is_set():
            raise ExecutorUnavailable("the runtime executor is not connected")
        if len(executor.calls) >= MAX_CALLS_PER_EXECUTOR:
            raise ExecutorUnavailable(f"the runtime executor already runs {MAX_CALLS_PER_EXECUTOR} calls")
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        command = {
            "type": "call",
            "connection": connection.id,
            "call_id": call_id,
            "tool": tool,
            "arguments": arguments,
            "scope": scope,
        }
        if not connection.push(command):
            raise ExecutorUnavailable("the runtime executor's command stream is not keeping up")
        executor.calls[call_id] = _Call(call_id, connection.id, future, progress)
        try:
            return await future
        except asyncio.CancelledError:
            connection.push({"type": "cancel", "connection": connection.id, "call_id": call_id})
            raise
        finally:
            executor.calls.pop(call_id, None)
            if not future.done():
                future.cancel()

    def pending(self, executor: Executor, *, connection: str, call_id: str) -> _Call:
        """The call dispatched on `connection` that has no result yet (409 otherwise)."""
        current = executor.connection
        if current is None or current.id != connection:
            raise Conflict("stale executor connection")
        call = executor.calls.get(call_id)
        if call is None or call.connection != connection or call.future.done():
            raise Conflict("no such pending call on this connection (unsolicited or duplicate)")
        return call

    def reply(
        self, executor: Executor, *, connection: str, call_id: str, progress: object = None, result: object = None
    ) -> None:
        """Progress or the one result of a call, from the connection it was dispatched on."""
        call = self.pending(executor, connection=connection, call_id=call_id)
        if result is None and progress is None:
            raise Conflict("a reply carries progress or a result")
        if progress is not None:
            with contextlib.suppress(Exception):  # a progress event that cannot be recorded is dropped
                call.progress(progress)
        if result is not None:
            call.future.set_result(result)

    def require_owned(self, executor_id: str, tenant: str) -> Executor:
        executor = self.get(executor_id)
        if executor is None or executor.tenant != tenant:
            raise NotFound(f"runtime executor {executor_id} not found")
        return executor


def bound_to(executor: Executor | None, session: str, tenant: str) -> Executor:
    """The executor, when it is bound to `session` and the tenant's own; ExecutorUnavailable
    (not dispatched) otherwise."""
    if executor is None or executor.closed:
        raise ExecutorUnavailable("the runtime executor is not registered; the client must rebind")
    if not session or executor.session != session or executor.tenant != tenant:
        # a bind through another instance that lost a race with one of another session
        raise ExecutorUnavailable("the runtime executor serves another session; the client must rebind")
    return executor
