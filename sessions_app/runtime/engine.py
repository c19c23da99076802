"""The session runtime: loaded actors, limits, harness pools, write-behind, restart, shutdown.

One engine per Brain process, on the ASGI event loop. It never blocks the loop: ORM work goes
through the `a*` twins in db.py, file scans through to_thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fleet_app.ownership import SoloOwnership
from foundation.errors import Conflict, NotFound, Overloaded, Unavailable
from foundation.hostconfig import HostConfig, Limits, Secrets
from foundation.hostconfig.provider_keys import ProviderKeys
from foundation.logs import logger
from foundation.telemetry import Telemetry
from sessions_app import db
from sessions_app.eventlog import CorruptLog, RecordTooLarge
from sessions_app.harness.pool import Attachment
from sessions_app.records import SessionRecord
from sessions_app.storage import CheckpointError, SessionStorage
from tools_app.bindings import CredentialSource, no_credentials
from tools_app.executors import ExecutorHub
from tools_app.invocation import ToolKind
from tools_app.providers.registry import ProviderRegistry
from tools_app.registry import ToolRegistry
from tools_app.tool_path import ToolPath

from .actor import SessionActor
from .approvals import Approvals
from .deltas import DeltaBudget
from .engine_values import SessionDamaged, Stats
from .hooks import ArchiveHooks
from .model_keys import ModelKeys
from .ownership import Ownership
from .pubsub import SubscriberSlots
from .residency import Residency
from .retooling import journaled_changes
from .session_host import Stateful
from .session_kinds import session_kinds
from .toolcalls import ToolCalls
from .turnslots import TurnSlot, TurnSlots
from .writebehind import WriteBehind

__all__ = [
    "ArchiveHooks",
    "Engine",
    "SessionDamaged",
    "Stats",
]

SHUTDOWN_TURN_SECONDS = 12.0  # spec: exit within ~20 s; turns get this long to settle
ABANDONED_APPROVAL_REASON = "server restarted"


class Engine:
    """Loads and unloads actors, enforces `loaded` and `active`, writes status rows behind, and
    shuts down. The actors see it only as their SessionHost."""

    def __init__(
        self,
        config: HostConfig,
        secrets: Secrets,
        *,
        registry: ToolRegistry,
        tool_path: ToolPath,
        telemetry: Telemetry,
        executors: ExecutorHub | None = None,
        providers: ProviderRegistry | None = None,
        binding_credentials: CredentialSource = no_credentials,
        archive: ArchiveHooks | None = None,
        ownership: Ownership | None = None,
    ) -> None:
        """`ownership`: the instance's leases and input journal (fleet_app.ownership); without
        one, this instance alone owns every session."""
        self.config = config
        self.executors = executors if executors is not None else ExecutorHub.of(config.limits)
        self.providers = providers if providers is not None else ProviderRegistry()
        self.binding_credentials = binding_credentials  # provider bindings' private credentials
        self.model_keys = ModelKeys(
            config, secrets, sealed=binding_credentials
        )  # the key of each session's model calls
        self.secrets = secrets
        self.registry = registry
        self.tool_path = tool_path
        self.telemetry = telemetry
        self.data_dir = Path(config.data_dir).resolve()
        self.storage = SessionStorage(self.data_dir)
        self.actors: dict[str, SessionActor] = {}
        self.subscriber_slots = SubscriberSlots(config.limits.subscribers)
        self.delta_budget = DeltaBudget()  # streamed text kept for streams opened mid-message
        self._draining = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.residency = Residency(
            config.harnesses,
            workroot=self.data_dir / "hosts",
            max_resident=config.limits.active,
            telemetry=telemetry,
            track=self.track,
        )
        self._turn_slots = TurnSlots(config.limits.active)
        self._loading: dict[str, asyncio.Future[SessionActor]] = {}
        self.ownership: Ownership = ownership if ownership is not None else SoloOwnership()
        # in a fleet the rows are shared: written only under a lease still held
        self._rows = WriteBehind(self.ownership.leases)
        self._flusher: asyncio.Task[None] | None = None
        self._executor_expiry: asyncio.Task[None] | None = None
        self._key_watches: list[asyncio.Task[None]] = []  # follow model keys given as NAME_FILE
        self._streams_closed = asyncio.Event()
        self._archive = archive
        self._offline: dict[str, bool] = {}  # sessions a restore replaces (False) or a delete removes (True)

    @property
    def limits(self) -> Limits:
        return self.config.limits

    @property
    def draining(self) -> bool:
        return self._draining

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self.storage.ensure()
        shutil.rmtree(self.data_dir / "hosts", ignore_errors=True)  # private dirs of dead hosts
        marked = await asyncio.to_thread(self.storage.marked_running)
        for record in await db.aclaim_running_sessions(marked, owner=self.ownership.leases.instance or None):
            with contextlib.suppress(NotFound, Overloaded, Unavailable, SessionDamaged):  # loads on its next request
                await self.get_actor(record.tenant, record.id)  # loading settles the lost turn
        await self.flush()
        self._flusher = asyncio.get_running_loop().create_task(self._rows.run(), name="brain-write-behind")
        self._executor_expiry = asyncio.get_running_loop().create_task(
            self.executors.expire_unbound(), name="brain-executor-expiry"
        )
        for keys in (self.secrets.provider_keys, self.secrets.model_credential_keys):
            if isinstance(keys, ProviderKeys) and keys.watched:
                watch = self.residency.follow_provider_keys(keys)
                self._key_watches.append(asyncio.get_running_loop().create_task(watch, name=f"brain-{keys.section}"))

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self) -> None:
        """Stop new work, interrupt running turns, end streams, stop hosts, flush state."""
        self._draining = True
        for actor in list(self.actors.values()):
            actor.stop_for_shutdown()
        turns = [actor.task for actor in self.actors.values() if actor.task is not None]
        if turns:
            await asyncio.wait(turns, timeout=SHUTDOWN_TURN_SECONDS)
        for actor in self.actors.values():
            actor.subscribers.close_all()
        self._streams_closed.set()
        await self.residency.close()
        for task in (*self._key_watches, self._executor_expiry, self._flusher):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self.flush()
        await asyncio.to_thread(self._sync_and_close_logs)
        self.executors.schemas.close()

    def _sync_and_close_logs(self) -> None:
        for actor in self.actors.values():
            with contextlib.suppress(OSError, RecordTooLarge):
                actor.events.pay_owed()  # outcomes a full disk held back, if it has room now
            with contextlib.suppress(OSError):
                actor.log.sync()
            actor.log.close()

    # -- write-behind ------------------------------------------------------------------------

    def mark_dirty(self, actor: Stateful) -> None:
        self._rows.mark(actor.record)

    async def save_config(self, actor: Stateful) -> None:
        await self._rows.save_config(actor.record)

    def mark_settled(self, actor: Stateful) -> None:
        """The session settled: its new state is due for background sync."""
        if self._archive is not None:
            self._archive.mark_dirty(actor.id)

    def check_writes(self, session_id: str | None = None) -> None:
        """429 while shutting down or while the sync backlog is full (spec); in a fleet, 503
        while this instance's lease on `session_id` is not writable."""
        if session_id is not None:
            self.ownership.require_writable(session_id)
        if self._draining:
            raise Overloaded("server is shutting down")
        if self._archive is not None and self._archive.backlog_full:
            raise Overloaded("the checkpoint upload backlog is full")

    async def flush(self) -> None:
        """Write the changed session rows now."""
        await self._rows.flush()

    # -- sessions ----------------------------------------------------------------------------

    async def create(self, record: SessionRecord) -> SessionRecord:
        """Persist a new idle session with its creation checkpoint (offset 0)."""
        self.check_writes()
        files = self.storage.files(record.id)
        files.create()
        await self.ownership.claim_new(record.id)
        await asyncio.to_thread(
            files.checkpoints.record,
            record.checkpoint["id"],
            offset=0,
            time=record.checkpoint["time"],
            reported=[],
        )
        await db.acreate_session(record)
        if self._archive is not None:
            self._archive.mark_dirty(record.id)
        return record

    async def get_actor(self, tenant: str, session_id: str) -> SessionActor:
        """The loaded actor of a tenant's session, loading it from disk (or the archive);
        NotFound otherwise, Conflict while a restore replaces it."""
        if session_id in self._offline:
            if self._offline[session_id]:
                raise NotFound("session not found")  # being deleted
            raise Conflict("the session is being restored")
        actor = self.actors.get(session_id)
        if actor is not None:
            if actor.record.tenant != tenant:
                raise NotFound("session not found")
            return actor
        loading = self._loading.get(session_id)
        if loading is None:
            loading = asyncio.get_running_loop().create_future()
            self._loading[session_id] = loading
            try:
                actor = await self._load(tenant, session_id)
                loading.set_result(actor)
            except BaseException as exc:
                loading.set_exception(exc)
                loading.exception()  # retrieved: concurrent waiters re-raise it themselves
                raise
            finally:
                del self._loading[session_id]
            return actor
        actor = await asyncio.shield(loading)
        if actor.record.tenant != tenant:
            raise NotFound("session not found")
        return actor

    async def _load(self, tenant: str, session_id: str) -> SessionActor:
        record = await db.aget_session(tenant, session_id)
        cold = False
        if record is None and self._archive is not None and await self._archive.cold_load(tenant, session_id):
            cold = True
            record = await db.aget_session(tenant, session_id)
        if record is None:
            raise NotFound("session not found")
        if await self.ownership.claim(tenant, session_id):
            record = await db.aget_session(tenant, session_id) or record  # the archive's row
        # no call waits in a session being loaded: approvals a stopped server left pending are over
        abandoned = await db.acancel_pending_approvals(session_id, reason=ABANDONED_APPROVAL_REASON)
        await self._make_room()
        files = self.storage.files(session_id)
        log = files.open_log(max_bytes=self.limits.session_bytes)
        try:
            recovered = await asyncio.to_thread(files.recover, log)
        except CorruptLog as exc:
            log.close()
            logger.error("session log damaged", extra={"session_id": session_id, "offset": exc.offset})
            raise SessionDamaged(
                f"session {session_id} cannot be loaded: its event log is damaged at byte {exc.offset}"
            ) from exc
        except CheckpointError as exc:
            log.close()
            logger.error("session checkpoints damaged", extra={"session_id": session_id, "error": str(exc)})
            raise SessionDamaged(f"session {session_id} cannot be loaded: its checkpoint journal is damaged") from exc
        tool_calls = ToolCalls(
            self.tool_path,
            tenant=record.tenant,
            session_id=record.id,
            tools=tuple(record.config.get("tools", ())),
            bindings=self._session_bindings(record),
            sequential=self._tool_execution(record.harness) == "sequential",
            approvals=Approvals(tenant=record.tenant, session_id=record.id),
        )
        journal = self.ownership.journal
        last = recovered.last_checkpoint  # in a fleet: inputs acknowledged past the last checkpoint
        backlog = await journal.backlog(session_id, last.get("covered_seq", 0) if last is not None else 0)
        changes = await journaled_changes(self.registry, record, backlog)
        actor = SessionActor(
            self, record, files=files, log=log, tool_calls=tool_calls, telemetry=self.telemetry, journal=journal
        )
        self.actors[session_id] = actor
        for approval in abandoned:
            actor.record_abandoned_approval(approval)
        actor.settle_after_load(recovered, backlog, changes)
        if cold:
            actor.settle_restored()  # spec: a session loaded from the archive waits for a resume
        return actor

    def _session_bindings(self, record: SessionRecord) -> tuple[ToolKind, ...]:
        """The session's runtime executor tools, provider bindings and placed tools."""
        return session_kinds(self, record, self.actors.get)

    def _tool_execution(self, harness: str) -> str:
        settings = self.config.harnesses.get(harness)
        return settings.tool_execution if settings is not None else "parallel"

    async def _make_room(self) -> None:
        """Keep loaded sessions within limits.loaded: unload an idle one, else 429."""
        if len(self.actors) + len(self._loading) <= self.limits.loaded:
            return
        for actor in self.actors.values():
            if not actor.busy:
                await self.unload(actor)
                return
        raise Overloaded("too many loaded sessions")

    async def drop_lost(self, session_ids: frozenset[str]) -> None:
        """Sessions another instance took: unload them, their rows unwritten, their turns cancelled."""
        for session_id in session_ids:
            actor = self.actors.get(session_id)
            self._rows.forget(session_id)
            if actor is None:
                continue
            actor.subscribers.close_all()
            if actor.task is not None:
                actor.task.cancel(msg="the session moved to another instance")
            await self.unload(actor)

    async def unload(self, actor: SessionActor) -> None:
        self.actors.pop(actor.id, None)
        await self.residency.detach(actor)
        actor.log.close()

    @contextlib.asynccontextmanager
    async def offline(self, tenant: str, session_id: str, *, deleting: bool = False) -> AsyncIterator[None]:
        """Take a settled session out of service while a restore replaces its files (or a delete
        removes them): its streams end, its harness detaches, its actor unloads, and requests
        for it get 409 (404 when `deleting`) until the block exits. 409 if a turn runs or input
        is queued."""
        if deleting and self._offline.get(session_id):
            raise NotFound("session not found")  # a concurrent delete of it
        if session_id in self._offline or session_id in self._loading:
            raise Conflict("the session is being loaded or restored")
        actor = self.actors.get(session_id)
        if actor is not None:
            if actor.record.tenant != tenant:
                raise NotFound("session not found")
            if actor.task is not None or actor.queue:
                raise Conflict("a turn is running or input is queued; interrupt and wait for the session to settle")
        self._offline[session_id] = deleting
        try:
            if actor is not None:
                actor.subscribers.close_all()
                self._rows.forget(session_id)
                await self.unload(actor)
            yield
        finally:
            self._offline.pop(session_id, None)

    async def purge(self, session_id: str, local: Callable[[], None]) -> None:
        """Remove a deleted session: the archive's copy (its `latest`, index entry and objects)
        around `local` (its rows and files, blocking), or `local` alone without an archive."""
        if self._archive is not None:
            await self._archive.remove(session_id, local)
        else:
            await asyncio.to_thread(local)

    async def session_record(self, tenant: str, session_id: str) -> SessionRecord:
        """A tenant's session, loaded: NotFound otherwise."""
        return (await self.get_actor(tenant, session_id)).record

    async def land_restored(self, tenant: str, session_id: str) -> SessionRecord:
        """Load a freshly restored session and settle it interrupted: it waits for a resume."""
        actor = await self.get_actor(tenant, session_id)
        actor.settle_restored()
        return actor.record

    async def remote_sessions(self, tenant: str, after: str, limit: int) -> list[SessionRecord]:
        """Sessions other servers published (the discovery index); [] without persistence."""
        return await self._archive.list_remote(tenant, after, limit) if self._archive is not None else []

    def loaded_record(self, session_id: str) -> SessionRecord | None:
        actor = self.actors.get(session_id)
        return actor.record if actor is not None else None

    # -- SessionHost: turns and attachments --------------------------------------------------

    def turn_slot(self) -> contextlib.AbstractAsyncContextManager[TurnSlot]:
        """limits.active: turns beyond it wait for a slot (lent back while waiting on sub-agents)."""
        return self._turn_slots.hold()

    async def attach(self, actor: SessionActor) -> Attachment:
        """The session's attachment for a turn, its runner opened with the session's model key
        (recycled first when that key changed); a TurnFailure when the key cannot be had."""
        key = await self.model_keys.key_of(actor.record)
        return await self.residency.attach(
            actor, lambda: self.model_keys.open_params(actor.record, actor.checkpoints.native, key)
        )

    async def detach(self, actor: SessionActor) -> None:
        await self.residency.detach(actor)

    def release(self, actor: SessionActor) -> None:
        self.residency.release(actor)

    def attachment_of(self, actor: SessionActor) -> Attachment | None:
        return self.residency.attachment_of(actor)

    def forget_attachment(self, actor: SessionActor) -> None:
        self.residency.forget(actor)

    # -- reporting ---------------------------------------------------------------------------

    def stats(self) -> Stats:
        return Stats(
            loaded=len(self.actors),
            running=sum(1 for a in self.actors.values() if a.task is not None),
            attached=self.residency.attached,
            hosts=self.residency.hosts,
        )

    async def wait_streams_closed(self) -> None:
        await self._streams_closed.wait()
