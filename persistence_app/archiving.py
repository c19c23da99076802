"""External persistence as the server uses it: sync status, flush, restore, cold loads and
the discovery index, built from the host config's `persistence` block and owned by the
application object."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

from foundation.errors import BrainError, Conflict, Forbidden, InvalidRequest, NotFound, Unavailable
from foundation.hostconfig import Persistence
from foundation.logs import logger
from foundation.telemetry import Telemetry
from persistence_app import archive, db, localstate, removal
from persistence_app.discovery import DiscoveryIndex
from persistence_app.scheduler import Dispatch, SyncScheduler
from persistence_app.stores import open_store
from persistence_app.stores.base import ObjectMissing, ObjectStore, StoreError
from persistence_app.sync import Publisher, PublishOutcome, commit_lock
from sessions_app import db as sessions_db
from sessions_app.records import SessionRecord, SessionStatus
from sessions_app.storage import SessionStorage
from tools_app import db as tools_db
from tools_app.vault import MODEL_CREDENTIAL_ALIAS, parse_recovery_records

__all__ = ["ArchiveService", "LiveSessions"]


class LiveSessions(Protocol):
    """The session runtime as persistence sees it (sessions_app's Engine): persistence never
    imports the runtime; the application object hands it in."""

    async def session_record(self, tenant: str, session_id: str) -> SessionRecord:
        """A tenant's session, loaded (404 otherwise)."""

    async def flush(self) -> None:
        """Write the rows of sessions that changed now (the runtime writes them behind)."""

    def offline(self, tenant: str, session_id: str) -> AbstractAsyncContextManager[None]:
        """The session out of service while the block replaces its files."""

    async def land_restored(self, tenant: str, session_id: str) -> SessionRecord:
        """Load a freshly restored session, settled to wait for a resume."""


class SyncStatusBody(TypedDict):
    """GET /sync and POST /flush on the wire (the SyncStatus schema)."""

    history_bytes: int
    resume_offset: int
    pending: bool
    checkpoint: NotRequired[str]
    native_checkpoint: NotRequired[str]
    time: NotRequired[str]
    error: NotRequired[str]


class ArchiveService:
    def __init__(
        self,
        settings: Persistence,
        data_dir: Path,
        environ: Mapping[str, str],
        *,
        session_bytes: int,
        dispatch: Dispatch | None = None,
        telemetry: Telemetry | None = None,
        lease_epoch: Callable[[str], int | None] | None = None,
        on_lease_lost: Callable[[str], None] | None = None,
        on_published: Callable[[str, int], None] | None = None,
        dispatch_problem: Callable[[], str | None] | None = None,
    ) -> None:
        """In a fleet, `lease_epoch` gives the epoch this instance holds on a session (None when
        it holds none): `latest` is written fenced with it. `on_lease_lost` is called on the
        event loop with a session whose publish the archive refused for a newer owner;
        `on_published` from the publishing thread with a session and the input-journal seq its
        archived checkpoint covers."""
        self.settings = settings
        self.data_dir = data_dir
        self.storage = SessionStorage(data_dir)
        # what one manifest may describe: its event log up to limits.session_bytes (the most a
        # local log may hold), and as much again for the harness's native files
        self.max_history_bytes, self.max_total_bytes = session_bytes, 2 * session_bytes
        self.store: ObjectStore = open_store(settings, environ)
        self.index = DiscoveryIndex(environ[settings.postgres_env]) if settings.postgres_env else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_lease_lost = on_lease_lost
        self._dispatch_problem = dispatch_problem  # why dispatched publishes do not run (no worker), or None
        self._lease_epoch = lease_epoch
        self.publisher = Publisher(
            self.store,
            data_dir,
            index=self.index,
            timeout_seconds=settings.publish_timeout_seconds,
            epoch_of=lease_epoch,
            on_lease_lost=self._lease_lost if on_lease_lost is not None else None,
            on_published=on_published,
        )
        self.scheduler = SyncScheduler(
            self.publisher,
            interval_seconds=settings.interval_seconds,
            queue=settings.queue,
            retry_seconds=settings.retry_seconds,
            dispatch=dispatch,
            telemetry=telemetry,
        )

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.remove_stale_staging)
        await self.scheduler.start()

    def _lease_lost(self, session_id: str) -> None:
        """From a publishing thread: hand the fenced session to the loop."""
        if self._loop is not None and self._on_lease_lost is not None:
            self._loop.call_soon_threadsafe(self._on_lease_lost, session_id)

    # -- the engine's hooks (sessions_app.runtime.engine.ArchiveHooks) -----------------------

    def mark_dirty(self, session_id: str) -> None:
        self.scheduler.mark_dirty(session_id)

    @property
    def backlog_full(self) -> bool:
        return self.scheduler.full

    async def close(self) -> None:
        await self.scheduler.close()
        await asyncio.to_thread(self._close_clients)

    def _close_clients(self) -> None:
        self.store.close()
        if self.index is not None:
            self.index.close()

    @property
    def ready(self) -> bool:
        return self.scheduler.ready

    # -- GET /sync and POST /flush -----------------------------------------------------------

    async def status(self, session_id: str) -> SyncStatusBody:
        row = await db.aget_state(session_id)
        status: SyncStatusBody = {
            "history_bytes": row.history_bytes if row else 0,
            "resume_offset": row.resume_offset if row else 0,
            "pending": self.scheduler.is_pending(session_id) or row is None or not row.checkpoint,
        }
        if row is not None and row.checkpoint:
            status["checkpoint"] = row.checkpoint
            status["native_checkpoint"] = row.native_checkpoint
            if row.published_at:
                status["time"] = row.published_at
        if row is not None and row.error:
            status["error"] = row.error
        problem = self._dispatch_problem() if self._dispatch_problem is not None and status["pending"] else None
        if problem is not None:  # a publish waiting for a worker that is not there says so
            status["error"] = problem
        return status

    async def flush(self, session_id: str) -> SyncStatusBody:
        result = await self.scheduler.flush(session_id)
        if result.outcome == PublishOutcome.FAILED:
            if result.forbidden:  # spec: a cross-tenant collision in the index is 403 forbidden
                raise Forbidden(f"flush failed: {result.error}")
            raise BrainError(f"flush failed: {result.error}")  # a generic reason; the detail is logged
        if result.outcome == PublishOutcome.FENCED and result.lease_lost:
            raise Unavailable("flush refused: another instance owns the session now; retry")
        if result.outcome == PublishOutcome.FENCED:
            raise BrainError("flush failed: the session was restored while it was being uploaded")
        return await self.status(session_id)

    # -- restore and cold load -----------------------------------------------------------------

    async def _manifest(self, session_id: str, checkpoint: str) -> archive.Manifest:
        """The checked manifest. NotFound when missing; archive.InvalidManifest when malformed
        or over budget (the caller picks its 4xx); BrainError with a generic reason when the
        archive cannot be read."""
        try:
            return await asyncio.to_thread(
                archive.read_manifest,
                self.store,
                session_id,
                checkpoint,
                max_history_bytes=self.max_history_bytes,
                max_total_bytes=self.max_total_bytes,
            )
        except ObjectMissing as exc:
            raise NotFound(f"checkpoint {checkpoint} of session {session_id} not found") from exc
        except archive.InvalidManifest as exc:
            logger.error("archived manifest refused", extra={"session_id": session_id, "error": str(exc)})
            raise
        except StoreError as exc:
            raise _unreadable(session_id, exc) from exc

    async def restore(self, engine: LiveSessions, tenant: str, session_id: str, checkpoint: str) -> SessionRecord:
        """Replace the local session with `checkpoint` from the archive; it lands interrupted
        (closed when the checkpoint was taken after a close). A closed session is never
        reopened: a checkpoint from before its close is 409."""
        epoch = await self._writable_epoch(engine, tenant, session_id)
        await engine.flush()  # a close a moment ago is in the row the checks below read
        try:
            manifest = await self._manifest(session_id, checkpoint)
        except archive.InvalidManifest as exc:
            raise InvalidRequest(exc.reason) from exc
        if manifest["session"]["tenant"] != tenant:
            raise Forbidden("the checkpoint belongs to another tenant")
        local = await sessions_db.aget_session_by_id(session_id)
        if local is not None and local.tenant != tenant:
            raise Forbidden("the session belongs to another tenant")
        if not _closed(manifest) and await self._closed_since(local, session_id, checkpoint):
            raise Conflict(REOPEN_REFUSED)
        async with engine.offline(tenant, session_id):
            await self._install(manifest, replace=True)
            if epoch is not None:  # written under the lease held: the load keeps it, not latest
                await asyncio.to_thread(self.storage.files(session_id).write_lease_epoch, epoch)
        return await engine.land_restored(tenant, session_id)

    async def _writable_epoch(self, engine: LiveSessions, tenant: str, session_id: str) -> int | None:
        """In a fleet, the lease epoch a restore writes under (None for a session new to it)."""
        if self._lease_epoch is None:
            return None
        try:
            await engine.session_record(tenant, session_id)
        except NotFound:
            return None
        epoch = self._lease_epoch(session_id)
        if epoch is None:  # loaded here, but the lease lapsed: a paused or cut-off owner
            raise Unavailable("this instance's lease on the session is lapsing; retry")
        return epoch

    async def _closed_since(self, local: SessionRecord | None, session_id: str, checkpoint: str) -> bool:
        """Whether the session was closed after `checkpoint`: its local row says so, or the
        archive's `latest` is a checkpoint of the closed session (another server closed it)."""
        if local is not None and local.status == SessionStatus.CLOSED:
            return True
        try:
            latest = await asyncio.to_thread(archive.read_latest, self.store, session_id)
            if latest == checkpoint:
                return False
            return _closed(await self._manifest(session_id, latest))
        except (NotFound, ObjectMissing, archive.InvalidManifest):
            return False  # no usable `latest`: nothing says the session was closed
        except StoreError as exc:
            raise _unreadable(session_id, exc) from exc

    async def cold_load(self, tenant: str, session_id: str) -> bool:
        """Load a session this server does not have from the archive's `latest` (the engine asks
        when the local database has no row). Another tenant's session is simply not found; a
        `latest` that is not a valid checkpoint is 409 conflict."""
        if self.storage.files(session_id).exists():
            return False
        try:
            if self.index is not None:
                owner = await asyncio.to_thread(self.index.owner, session_id)
                if owner is not None and owner != tenant:
                    return False
            checkpoint = await asyncio.to_thread(archive.read_latest, self.store, session_id)
        except ObjectMissing:
            return False
        except archive.ArchiveError as exc:
            logger.error("archived latest refused", extra={"session_id": session_id, "error": str(exc)})
            raise Conflict(f"the archived state of session {session_id} cannot be loaded: {exc.reason}") from exc
        except StoreError as exc:
            raise _unreadable(session_id, exc) from exc
        try:
            manifest = await self._manifest(session_id, checkpoint)
        except archive.InvalidManifest as exc:
            raise Conflict(f"the archived state of session {session_id} cannot be loaded: {exc.reason}") from exc
        if manifest["session"]["tenant"] != tenant:
            return False
        if await sessions_db.aget_session_by_id(session_id) is not None:
            return False  # another tenant's local session, or one created meanwhile
        await self._install(manifest, replace=False)
        logger.info("session loaded from the archive", extra={"session_id": session_id, "checkpoint": checkpoint})
        return True

    async def take_over(self, tenant: str, session_id: str) -> bool:
        """In a fleet, a session whose lease epoch moved past this copy's (or that has no copy
        here): install the archive's `latest`, the local directory (if any) kept aside as a
        replaced copy, never deleted. False when the archive has no `latest` for it."""
        try:
            checkpoint = await asyncio.to_thread(archive.read_latest, self.store, session_id)
        except ObjectMissing:
            return False
        except archive.ArchiveError as exc:
            raise Conflict(f"the archived state of session {session_id} cannot be loaded: {exc.reason}") from exc
        except StoreError as exc:
            raise _unreadable(session_id, exc) from exc
        try:
            manifest = await self._manifest(session_id, checkpoint)
        except archive.InvalidManifest as exc:
            raise Conflict(f"the archived state of session {session_id} cannot be loaded: {exc.reason}") from exc
        if manifest["session"]["tenant"] != tenant:
            return False
        await self._install(manifest, replace=True)
        logger.info("session taken over from the archive", extra={"session_id": session_id, "checkpoint": checkpoint})
        return True

    async def rebuild(self, tenant: str, session_id: str) -> bool:
        """A fleet's session in neither the archive nor here: as created, from its row (or False)."""
        record = await sessions_db.aget_session(tenant, session_id)
        if record is None:
            return False
        staging = self.storage.directory(f"{STAGING_PREFIX}{session_id}.restoring-{secrets.token_hex(8)}")
        await asyncio.to_thread(localstate.materialize_created, record, staging, max_bytes=self.max_history_bytes)
        await asyncio.to_thread(self._swap_in, session_id, tenant, staging, replace=False)
        self.scheduler.mark_dirty(session_id)
        logger.warning("session rebuilt as created, not in the archive yet", extra={"session_id": session_id})
        return True

    async def _install(self, manifest: archive.Manifest, *, replace: bool) -> None:
        """Write the checkpoint beside the session, swap it in, then import its row. Everything
        that can be refused is checked before the first byte is written; a failure after the
        swap puts the old directory back, so directory and row never disagree."""
        session = manifest["session"]
        session_id = session["id"]
        try:
            credentials = parse_recovery_records(manifest.get("credentials") or [], max_records=MAX_RECOVERY_RECORDS)
        except ValueError as exc:
            problem = f"checkpoint {manifest['checkpoint']} holds invalid credential records: {exc}"
            raise InvalidRequest(problem) from None
        # every credential binding has a record, live or revoked; the session's own model key has one too
        bindings = sorted(alias for alias in credentials if alias != MODEL_CREDENTIAL_ALIAS)
        record = SessionRecord.from_manifest(session, manifest["native_checkpoint"], credential_bindings=bindings)
        publication = db.Publication(
            checkpoint=manifest["checkpoint"],
            history_bytes=manifest["history_bytes"],
            resume_offset=manifest["resume_offset"],
            native_checkpoint=str(manifest["native_checkpoint"]["id"]),
            time=manifest["time"],
        )
        staging = self.storage.directory(f"{STAGING_PREFIX}{session_id}.restoring-{secrets.token_hex(8)}")
        try:
            await asyncio.to_thread(localstate.materialize, self.store, manifest, staging)
        except ObjectMissing as exc:
            logger.error("archived checkpoint incomplete", extra={"session_id": session_id, "error": str(exc)})
            raise BrainError(f"checkpoint {manifest['checkpoint']} is incomplete in the archive") from exc
        except archive.ArchiveError as exc:  # an object that does not match its manifest
            logger.error("archived checkpoint refused", extra={"session_id": session_id, "error": str(exc)})
            raise Conflict(f"checkpoint {manifest['checkpoint']} cannot be restored: {exc.reason}") from exc
        except StoreError as exc:
            raise _unreadable(session_id, exc) from exc
        aside = await asyncio.to_thread(self._swap_in, session_id, session["tenant"], staging, replace=replace)
        self.scheduler.forget(session_id)
        try:
            if not await sessions_db.aimport_session(record):
                raise Forbidden("the session belongs to another tenant")
        except BaseException:
            await asyncio.to_thread(self._swap_back, session_id, aside)
            raise
        # still sealed: usable where the same credential_keys are configured; records this
        # database already holds for the session (newer ones, tombstones) win
        await tools_db.aimport_credentials(record.tenant, session_id, credentials)
        await asyncio.to_thread(db.record_publication, session_id, session["tenant"], time.time_ns(), publication)
        if aside is not None:
            prune = localstate.prune_replaced
            await asyncio.to_thread(
                prune,
                self.storage,
                f"{session_id}{REPLACED_INFIX}",
                keep=self.settings.keep_replaced,
                budget=self.max_total_bytes,
            )

    def _swap_in(self, session_id: str, tenant: str, staging: Path, *, replace: bool) -> Path | None:
        """Under the commit lock: fence in-flight publishes, keep the old directory aside as
        `<id>-replaced-<ID>`, move the restored one in. Returns the directory kept aside."""
        target = self.storage.directory(session_id)
        aside = None
        with commit_lock(self.data_dir, session_id):
            db.bump_epoch(session_id, tenant)
            if target.exists():
                if not replace:
                    localstate.remove_tree(staging)
                    raise Conflict("the session appeared on local disk while it was being loaded")
                aside = self.storage.directory(f"{session_id}{REPLACED_INFIX}{secrets.token_hex(8)}")
                target.rename(aside)
                os.utime(aside)  # its mtime orders the kept directories, newest first
                logger.info("session directory replaced", extra={"session_id": session_id, "kept_as": aside.name})
            staging.rename(target)
        return aside

    def _swap_back(self, session_id: str, aside: Path | None) -> None:
        """Undo _swap_in after the row could not be imported: the old directory (or none) again."""
        target = self.storage.directory(session_id)
        with commit_lock(self.data_dir, session_id):
            failed = self.storage.directory(f"{STAGING_PREFIX}{session_id}.failed-{secrets.token_hex(8)}")
            target.rename(failed)
            if aside is not None:
                aside.rename(target)
        localstate.remove_tree(failed)
        logger.warning("restore rolled back", extra={"session_id": session_id})

    def remove_stale_staging(self) -> None:
        """Directories a restore was writing when the server stopped: never a session's."""
        for entry in self.storage.entries():
            name = entry.name
            if name.startswith(STAGING_PREFIX) and (".restoring-" in name or ".failed-" in name):
                localstate.remove_tree(Path(entry.path))

    async def remove(self, session_id: str, local: Callable[[], None]) -> None:
        """A deleted session (persistence_app.removal), its rows and files removed by `local`."""
        self.scheduler.forget(session_id)
        await asyncio.to_thread(removal.remove_archived, self.store, self.index, self.data_dir, session_id, local)

    # -- discovery -----------------------------------------------------------------------------

    async def list_remote(self, tenant: str, after: str, limit: int) -> list[SessionRecord]:
        """Sessions the discovery index knows (other servers' included); [] when it is down."""
        if self.index is None:
            return []
        try:
            rows = await asyncio.to_thread(self.index.list, tenant, after=after, limit=limit)
        except StoreError as exc:
            logger.warning("discovery index unavailable", extra={"error": str(exc)})
            return []
        return [record for row in rows if (record := SessionRecord.from_index(tenant, row)) is not None]


MAX_RECOVERY_RECORDS = 64  # one per binding; a session has far fewer bindings
STAGING_PREFIX = "."  # restores write beside the sessions under a hidden name
REPLACED_INFIX = "-replaced-"  # spec: the replaced directory is kept as <id>-replaced-<ID>
REOPEN_REFUSED = (
    "the session is closed, and this checkpoint was taken before its close: restoring it would reopen the session"
)


def _closed(manifest: archive.Manifest) -> bool:
    return bool(manifest["session"].get("status") == SessionStatus.CLOSED)


def _unreadable(session_id: str, exc: StoreError) -> BrainError:
    """A store failure as clients see it: the generic reason; the SDK's text goes to the log."""
    logger.error("archive read failed", extra={"session_id": session_id, "error": str(exc)})
    return BrainError(f"the archive cannot be read: {exc.reason}")
