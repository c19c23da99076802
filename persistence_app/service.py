"""External persistence as the server uses it: sync status, flush, restore, cold loads and
the discovery index, built from the host config's `persistence` block and owned by the
application object."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from brainsite.errors import BrainError, Forbidden, NotFound
from brainsite.hostconfig import Persistence
from brainsite.logs import logger
from brainsite.telemetry import Telemetry
from persistence_app import archive, db, localstate
from persistence_app.discovery import DiscoveryIndex
from persistence_app.scheduler import Dispatch, SyncScheduler
from persistence_app.stores import open_store
from persistence_app.stores.base import ObjectMissing, ObjectStore, StoreError
from persistence_app.sync import Outcome, Publisher, commit_lock
from sessions_app import db as sessions_db
from sessions_app.eventlog import now_rfc3339
from sessions_app.records import SessionRecord, SessionStatus
from sessions_app.runtime.engine import Engine
from tools_app import db as tools_db
from tools_app.vault import SealedCredential, parse_recovery_records

__all__ = ["ArchiveService"]


class ArchiveService:
    def __init__(
        self,
        settings: Persistence,
        data_dir: Path,
        environ: Mapping[str, str],
        *,
        dispatch: Dispatch | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.settings = settings
        self.data_dir = data_dir
        self.sessions_dir = data_dir / "sessions"
        self.store: ObjectStore = open_store(settings, environ)
        self.index = DiscoveryIndex(environ[settings.postgres_env]) if settings.postgres_env else None
        self.publisher = Publisher(self.store, data_dir, index=self.index)
        self.scheduler = SyncScheduler(
            self.publisher,
            interval_seconds=settings.interval_seconds,
            queue=settings.queue,
            dispatch=dispatch,
            telemetry=telemetry,
        )
        self._engine: Engine | None = None

    async def start(self, engine: Engine) -> None:
        self._engine = engine
        engine.sync = self.scheduler
        engine.cold_loader = self.cold_load
        if self.index is not None:
            engine.remote_lister = self.list_indexed
        await self.scheduler.start()

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

    async def status(self, session_id: str) -> dict[str, Any]:
        row = await db.aget_state(session_id)
        status: dict[str, Any] = {
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
        return status

    async def flush(self, session_id: str) -> dict[str, Any]:
        result = await self.scheduler.flush(session_id)
        if result.outcome == Outcome.FAILED:
            if result.forbidden:  # spec: a cross-tenant collision in the index is 403 forbidden
                raise Forbidden(f"flush failed: {result.error}")
            raise BrainError(f"flush failed: {result.error}")
        if result.outcome == Outcome.FENCED:
            raise BrainError("flush failed: the session was restored while it was being uploaded")
        return await self.status(session_id)

    # -- restore and cold load -----------------------------------------------------------------

    async def _manifest(self, session_id: str, checkpoint: str) -> archive.Manifest:
        try:
            return await asyncio.to_thread(archive.read_manifest, self.store, session_id, checkpoint)
        except ObjectMissing as exc:
            raise NotFound(f"checkpoint {checkpoint} of session {session_id} not found") from exc
        except StoreError as exc:
            logger.error("archive read failed", extra={"session_id": session_id, "error": str(exc)})
            raise BrainError(f"the archive cannot be read: {exc}") from exc

    async def restore(self, engine: Engine, tenant: str, session_id: str, checkpoint: str) -> SessionRecord:
        """Replace the local session with `checkpoint` from the archive; it lands interrupted."""
        manifest = await self._manifest(session_id, checkpoint)
        if manifest["session"]["tenant"] != tenant:
            raise Forbidden("the checkpoint belongs to another tenant")
        local = await sessions_db.aget_session_by_id(session_id)
        if local is not None and local.tenant != tenant:
            raise Forbidden("the session belongs to another tenant")
        async with engine.offline(tenant, session_id):
            await self._install(manifest, replace=True)
        return await engine.land_restored(tenant, session_id)

    async def cold_load(self, tenant: str, session_id: str) -> bool:
        """Load a session this server does not have from the archive's `latest` (the engine asks
        when the local database has no row). Another tenant's session is simply not found."""
        if (self.sessions_dir / session_id).exists():
            return False
        try:
            if self.index is not None:
                owner = await asyncio.to_thread(self.index.owner, session_id)
                if owner is not None and owner != tenant:
                    return False
            checkpoint = await asyncio.to_thread(archive.read_latest, self.store, session_id)
        except ObjectMissing:
            return False
        except StoreError as exc:
            logger.error("archive read failed", extra={"session_id": session_id, "error": str(exc)})
            raise BrainError(f"the archive cannot be read: {exc}") from exc
        manifest = await self._manifest(session_id, checkpoint)
        if manifest["session"]["tenant"] != tenant:
            return False
        if await sessions_db.aget_session_by_id(session_id) is not None:
            return False  # another tenant's local session, or one created meanwhile
        await self._install(manifest, replace=False)
        logger.info("session loaded from the archive", extra={"session_id": session_id, "checkpoint": checkpoint})
        return True

    async def _install(self, manifest: archive.Manifest, *, replace: bool) -> None:
        session = manifest["session"]
        session_id = session["id"]
        credentials = _recovery_records(manifest)
        staging = self.sessions_dir / f".{session_id}.restoring-{secrets.token_hex(8)}"
        try:
            await asyncio.to_thread(localstate.materialize, self.store, manifest, staging)
        except ObjectMissing as exc:
            raise BrainError(f"checkpoint {manifest['checkpoint']} is incomplete in the archive: {exc}") from exc
        except StoreError as exc:
            raise BrainError(f"the archive cannot be read: {exc}") from exc
        await asyncio.to_thread(self._swap_in, session_id, session["tenant"], staging, replace=replace)
        self.scheduler.forget(session_id)
        record = _restored_record(manifest, credentials)
        if not await sessions_db.aimport_session(record):
            raise Forbidden("the session belongs to another tenant")
        # still sealed: usable where the same credential_keys are configured; records this
        # database already holds for the session (newer ones, tombstones) win
        await tools_db.aimport_credentials(record.tenant, session_id, credentials)
        publication = db.Publication(
            checkpoint=manifest["checkpoint"],
            history_bytes=manifest["history_bytes"],
            resume_offset=manifest["resume_offset"],
            native_checkpoint=str(manifest["native_checkpoint"].get("id", "")),
            time=manifest["time"],
        )
        await asyncio.to_thread(db.record_publication, session_id, session["tenant"], time.time_ns(), publication)

    def _swap_in(self, session_id: str, tenant: str, staging: Path, *, replace: bool) -> None:
        """Under the commit lock: fence in-flight publishes, keep the old directory aside as
        `<id>-replaced-<ID>`, move the restored one in."""
        target = self.sessions_dir / session_id
        with commit_lock(self.data_dir, session_id):
            db.bump_epoch(session_id, tenant)
            if target.exists():
                if not replace:
                    _remove(staging)
                    raise BrainError("the session appeared on local disk while it was being loaded")
                aside = self.sessions_dir / f"{session_id}-replaced-{secrets.token_hex(8)}"
                target.rename(aside)
                logger.info("session directory replaced", extra={"session_id": session_id, "kept_as": aside.name})
            staging.rename(target)

    # -- discovery -----------------------------------------------------------------------------

    async def list_indexed(self, tenant: str, after: str, limit: int) -> list[SessionRecord]:
        """Sessions the discovery index knows (other servers' included); [] when it is down."""
        if self.index is None:
            return []
        try:
            rows = await asyncio.to_thread(self.index.list, tenant, after=after, limit=limit)
        except StoreError as exc:
            logger.warning("discovery index unavailable", extra={"error": str(exc)})
            return []
        return [record for row in rows if (record := _indexed_record(tenant, row)) is not None]


def _indexed_record(tenant: str, row: dict[str, Any]) -> SessionRecord | None:
    try:
        return SessionRecord(
            id=str(row["id"]),
            tenant=tenant,
            harness=str(row["harness"]),
            config=dict(row["config"]),
            descriptors=list(row.get("descriptors") or []),
            status=str(row.get("status") or SessionStatus.INTERRUPTED.value),
            created_at=str(row["created_at"]),
            updated_at=str(row.get("updated_at") or row["created_at"]),
            checkpoint=dict(row.get("checkpoint") or {}),
            credential_bindings=[str(alias) for alias in row.get("credential_bindings") or []],
        )
    except (KeyError, TypeError, ValueError):
        return None


MAX_SUBAGENT_DEPTH = 32767  # the column's range; a manifest's depth outside it is not trusted
MAX_RECOVERY_RECORDS = 64  # one per binding; a session has far fewer bindings


def _recovery_records(manifest: archive.Manifest) -> dict[str, SealedCredential]:
    """The manifest's sealed credential records by alias, checked before anything is installed."""
    try:
        return parse_recovery_records(manifest.get("credentials") or [], max_records=MAX_RECOVERY_RECORDS)
    except ValueError as exc:
        raise BrainError(f"checkpoint {manifest['checkpoint']} holds invalid credential records: {exc}") from None


def _restored_record(manifest: archive.Manifest, credentials: Mapping[str, SealedCredential]) -> SessionRecord:
    session = manifest["session"]
    native = manifest["native_checkpoint"]
    now = now_rfc3339()
    try:
        sessions_db.parse_time(str(session.get("created_at")))
        created_at = str(session["created_at"])
    except ValueError:
        created_at = now
    try:
        sessions_db.parse_time(str(native.get("time")))
        checkpoint_time = str(native["time"])
    except ValueError:
        checkpoint_time = now
    return SessionRecord(
        id=session["id"],
        tenant=session["tenant"],
        harness=str(session.get("harness", "")),
        config=dict(session.get("config") or {}),
        descriptors=list(session.get("descriptors") or []),
        status=SessionStatus.INTERRUPTED.value,
        created_at=created_at,
        updated_at=now,
        checkpoint={"id": str(native.get("id", "")), "offset": int(native.get("offset", 0)), "time": checkpoint_time},
        credential_bindings=sorted(credentials),  # every credential binding has a record, live or revoked
        parent_session=str(session.get("parent_session") or ""),  # archives from before sub-agents lack them
        parent_call=str(session.get("parent_call") or ""),
        depth=_depth(session.get("depth")),
    )


def _depth(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SUBAGENT_DEPTH else 0


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
