"""One sync of one session: publish its local state to the archive, retrying transient failures.

The same job runs in the server (in-process publisher, a worker thread) and in Celery workers
(`manage.py syncworker`); its result reaches the server through the session's sync-state row.
Two file locks per session, under data_dir/sync-locks/:

- `<id>.publish`, held for the whole job without waiting: one publisher per session at a time;
  a second one reports busy and the scheduler tries again later.
- `<id>.commit`, held briefly to check the epoch and then write `latest` and uploaded.json;
  restore holds it while it bumps the epoch and swaps the directory, so a publish that started
  before a restore never writes `latest` after it.

A session deleted (DELETE /sessions/{id}) has no row: a publish that finds none, before it
starts or under the commit lock, writes nothing (GONE), so a job queued before the delete never
brings `latest` or the discovery index back; the delete removes both under the same lock.

In a fleet (`epoch_of` given, or a lease epoch passed with the job) `latest` is written fenced,
carrying the epoch of the lease this instance holds (the store refuses an older one than it
records), and not at all while no lease is held: a paused former owner never replaces its
successor's `latest`. Either refusal is the FENCED outcome, permanent, never retried.

Blocking I/O; no asyncio.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import time as clock
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson

from foundation.logs import logger
from foundation.rfc3339 import now_rfc3339
from persistence_app import archive, localstate
from persistence_app.db import Publication, current_epoch, record_failure, record_publication
from persistence_app.discovery import DiscoveryIndex, TenantMismatch
from persistence_app.stores.base import MAX_OBJECT_BYTES, REASON_FENCED, Fenced, ObjectStore, StoreError
from sessions_app.db import get_session_by_id
from sessions_app.records import SessionRecord
from sessions_app.storage import CheckpointError, SessionStorage
from tools_app.db import recovery_records
from tools_app.vault import recovery_digest

__all__ = ["ATTEMPTS", "PublishOutcome", "PublishReport", "Publisher", "commit_lock", "lock_dir"]

ATTEMPTS = 5  # spec: transient failures retry up to 5 times with exponential backoff
FIRST_BACKOFF_SECONDS = 0.5
PUBLISH_TIMEOUT_SECONDS = 60.0  # persistence.publish_timeout_seconds' default
# a publish's deadline grows by one second per MiB it has to send: a slow link still finishes
# a large session, a hung archive holds a publisher thread for about PUBLISH_TIMEOUT_SECONDS
DEADLINE_BYTES_PER_SECOND = 1 << 20


class PublishOutcome(StrEnum):
    PUBLISHED = "published"  # a new checkpoint is in the archive
    UNCHANGED = "unchanged"  # the archive already had this state
    BUSY = "busy"  # another publisher holds the session
    FENCED = "fenced"  # a restore replaced the session, or its lease is lost (`lease_lost`)
    FAILED = "failed"  # recorded in the sync-state row
    GONE = "gone"  # the session was deleted: nothing is written, nothing recorded


@dataclass(frozen=True, slots=True)
class PublishReport:
    outcome: PublishOutcome
    publication: Publication | None = None
    bytes_sent: int = 0
    error: str = ""
    permanent: bool = False  # a failure that retrying will not fix (credentials, a bad bucket)
    seconds: float = 0.0
    forbidden: bool = False  # the discovery index holds the id for another tenant (403 on flush)
    lease_lost: bool = False  # FENCED in a fleet: another instance owns the session now
    # PUBLISHED / UNCHANGED: the input-journal seq the checkpoint `latest` names covers (0: none)
    covered_seq: int = 0


def lock_dir(data_dir: Path) -> Path:
    return data_dir / "sync-locks"


@contextlib.contextmanager
def _flock(path: Path, *, wait: bool) -> Iterator[bool]:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)  # releases the lock


def commit_lock(data_dir: Path, session_id: str) -> contextlib.AbstractContextManager[bool]:
    return _flock(lock_dir(data_dir) / f"{session_id}.commit", wait=True)


class Publisher:
    """Publishes sessions of one data dir to one archive."""

    def __init__(
        self,
        store: ObjectStore,
        data_dir: Path,
        *,
        index: DiscoveryIndex | None = None,
        timeout_seconds: float = PUBLISH_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = clock.sleep,
        epoch_of: Callable[[str], int | None] | None = None,
        fleet: bool = False,
        on_lease_lost: Callable[[str], None] | None = None,
        on_published: Callable[[str, int], None] | None = None,
    ) -> None:
        """`epoch_of` (a fleet instance's own publisher): the lease epoch it holds on a session,
        None when it holds none. `fleet` (a sync worker of a fleet): every job must carry the
        epoch the server holds. `on_lease_lost`: called (from the publishing thread) with a
        session whose publish was fenced. `on_published`: called (from the publishing thread)
        with a session and the input-journal seq its archived checkpoint covers, once `latest`
        names that checkpoint (a fleet forgets the journal entries it covers)."""
        self.store = store
        self.data_dir = data_dir
        self.storage = SessionStorage(data_dir)
        self.index = index
        self.timeout = timeout_seconds
        self._sleep = sleep
        self._epoch_of = epoch_of
        self.fleet = fleet or epoch_of is not None
        self._on_lease_lost = on_lease_lost
        self._on_published = on_published

    def run(self, session_id: str, seq: int, *, wait: bool = False, lease_epoch: int | None = None) -> PublishReport:
        """Publish with retries; the outcome is also in the session's sync-state row. `wait`:
        wait for another publisher of the session instead of reporting busy (flush).
        `lease_epoch`: the epoch the dispatching server held (a fleet's sync worker)."""
        started = clock.monotonic()
        result = self._run(session_id, seq, started, wait=wait, lease_epoch=lease_epoch)
        return dataclasses.replace(result, seconds=clock.monotonic() - started)

    def _lease_epoch(self, session_id: str, passed: int | None) -> int | None:
        """The epoch to fence `latest` with now: the one passed with the job, else the one held."""
        if passed is not None:
            return passed
        return self._epoch_of(session_id) if self._epoch_of is not None else None

    def _run(self, session_id: str, seq: int, started: float, *, wait: bool, lease_epoch: int | None) -> PublishReport:
        error = detail = ""
        for attempt in range(ATTEMPTS):
            try:
                result = self._publish_once(session_id, seq, wait=wait, started=started, lease_epoch=lease_epoch)
            except Fenced as exc:
                # the archive records a newer owner: permanent, and this instance must stop serving
                logger.warning(
                    "publish fenced: another instance owns the session",
                    extra={"session_id": session_id, "stored_epoch": exc.stored, "epoch": exc.epoch},
                )
                return self._lease_lost(session_id, seq)
            except archive.PublishDeadline as exc:
                # a hung archive: give the thread back; the scheduler tries again after a while
                return self._failed(session_id, seq, exc.reason, detail=str(exc), permanent=False)
            except StoreError as exc:
                # the message (endpoints, buckets, hosts) is logged; the row and API get the reason
                error, detail = exc.reason, str(exc)
                if not exc.retryable:
                    return self._failed(
                        session_id, seq, error, detail=detail, permanent=True, forbidden=isinstance(exc, TenantMismatch)
                    )
                logger.warning(
                    "sync attempt failed", extra={"session_id": session_id, "attempt": attempt + 1, "error": detail}
                )
                pause = FIRST_BACKOFF_SECONDS * 2**attempt
                if attempt + 1 < ATTEMPTS:
                    if clock.monotonic() + pause > started + self.timeout:
                        break  # out of time for this job: the scheduler tries again later
                    self._sleep(pause)
                continue
            except (CheckpointError, OSError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
                if isinstance(exc, CheckpointError):
                    reason = str(exc)  # names native files by their relative path only
                error = f"local session state cannot be read: {reason}"
                return self._failed(session_id, seq, error, detail=f"{error} ({exc!r})", permanent=True)
            if result.lease_lost:
                return self._lease_lost(session_id, seq)
            if result.outcome == PublishOutcome.PUBLISHED:
                logger.info(
                    "session published",
                    extra={
                        "session_id": session_id,
                        "checkpoint": result.publication.checkpoint if result.publication else "",
                        "bytes": result.bytes_sent,
                        "seconds": round(clock.monotonic() - started, 3),
                    },
                )
            return result
        return self._failed(session_id, seq, error, detail=detail, permanent=False)

    def _lease_lost(self, session_id: str, seq: int) -> PublishReport:
        """FENCED for good: recorded as a permanent failure (a server polling a worker's
        results stops dispatching it) and reported to the instance, which drops the session."""
        record = get_session_by_id(session_id)
        record_failure(session_id, record.tenant if record else "", seq, REASON_FENCED, permanent=True)
        if self._on_lease_lost is not None:
            self._on_lease_lost(session_id)
        return PublishReport(PublishOutcome.FENCED, error=REASON_FENCED, permanent=True, lease_lost=True)

    def _failed(
        self, session_id: str, seq: int, error: str, *, detail: str, permanent: bool, forbidden: bool = False
    ) -> PublishReport:
        """Record a failure: `error` (a client-visible reason) in the row, `detail` in the log."""
        logger.error(
            "sync failed", extra={"session_id": session_id, "error": detail, "reason": error, "permanent": permanent}
        )
        record = get_session_by_id(session_id)
        record_failure(session_id, record.tenant if record else "", seq, error, permanent=permanent)
        return PublishReport(PublishOutcome.FAILED, error=error, permanent=permanent, forbidden=forbidden)

    def _publish_once(
        self, session_id: str, seq: int, *, wait: bool, started: float, lease_epoch: int | None
    ) -> PublishReport:
        record = get_session_by_id(session_id)
        if record is None:
            return PublishReport(PublishOutcome.GONE)
        with _flock(lock_dir(self.data_dir) / f"{session_id}.publish", wait=wait) as locked:
            if not locked:
                return PublishReport(PublishOutcome.BUSY)
            epoch = current_epoch(session_id)
            directory = self.storage.directory(session_id)
            snapshot = localstate.snapshot(directory)
            uploaded = localstate.read_uploaded(directory)
            entry = snapshot.native_checkpoint
            # sealed, never plaintext; a rotation or revocation changes them without a turn
            credentials = recovery_records(session_id)
            credentials_sha256 = recovery_digest(credentials)
            if (
                uploaded is not None
                and uploaded["checkpoint"]
                and uploaded["history_bytes"] == snapshot.history_bytes
                and uploaded["native_checkpoint"] == entry["id"]
                and uploaded.get("credentials_sha256", "") == credentials_sha256
            ):
                publication = Publication(
                    checkpoint=uploaded["checkpoint"],
                    history_bytes=uploaded["history_bytes"],
                    resume_offset=uploaded["resume_offset"],
                    native_checkpoint=uploaded["native_checkpoint"],
                    time=uploaded["time"],
                )
                if self.index is not None:  # an index write that failed before is retried here
                    index_epoch = (self._lease_epoch(session_id, lease_epoch) or 0) if self.fleet else 0
                    with commit_lock(self.data_dir, session_id):
                        if get_session_by_id(session_id) is None:
                            return PublishReport(PublishOutcome.GONE)
                        self.index.put(_index_entry(record), publication.checkpoint, epoch=index_epoch)
                record_publication(session_id, record.tenant, seq, publication)
                return PublishReport(
                    PublishOutcome.UNCHANGED, publication, covered_seq=self._published(session_id, entry)
                )
            checkpoint, published_at = archive.new_checkpoint_id(), now_rfc3339()
            session = record.as_manifest()
            deadline = started + self.timeout + _unsent_bytes(snapshot.files, uploaded) / DEADLINE_BYTES_PER_SECOND
            published = archive.publish(
                self.store,
                checkpoint=checkpoint,
                session=session,
                native_checkpoint=dict(entry),
                history_bytes=snapshot.history_bytes,
                time=published_at,
                files=snapshot.files,
                uploaded=uploaded["files"] if uploaded else {},
                credentials=credentials,
                deadline=deadline,
            )
            publication = Publication(
                checkpoint=checkpoint,
                history_bytes=snapshot.history_bytes,
                resume_offset=entry["offset"],
                native_checkpoint=entry["id"],
                time=published_at,
            )
            if clock.monotonic() >= deadline:
                # `latest` is written under the commit lock and waited for (never abandoned, or
                # it could land after a restore): only within the deadline
                raise archive.PublishDeadline("the publish passed its deadline before writing latest")
            with commit_lock(self.data_dir, session_id):
                if current_epoch(session_id) != epoch:
                    return PublishReport(PublishOutcome.FENCED)
                if get_session_by_id(session_id) is None:  # deleted while this publish ran
                    return PublishReport(PublishOutcome.GONE)
                held: int | None = 0  # a single instance indexes at epoch 0
                if not self.fleet:
                    pointer = orjson.dumps({"checkpoint": checkpoint, "time": published_at})
                    assert len(pointer) < MAX_OBJECT_BYTES
                    self.store.put(archive.latest_key(session_id), pointer, immutable=False)
                else:
                    held = self._lease_epoch(session_id, lease_epoch)
                    if held is None:  # the lease lapsed or moved: write nothing under it
                        logger.warning("publish refused: no lease held", extra={"session_id": session_id})
                        return PublishReport(
                            PublishOutcome.FENCED, error=REASON_FENCED, permanent=True, lease_lost=True
                        )
                    pointer = orjson.dumps({"checkpoint": checkpoint, "time": published_at, "epoch": held})
                    assert len(pointer) < MAX_OBJECT_BYTES
                    self.store.put_fenced(archive.latest_key(session_id), pointer, epoch=held)
                localstate.write_uploaded(
                    directory,
                    {
                        "checkpoint": checkpoint,
                        "history_bytes": snapshot.history_bytes,
                        "resume_offset": entry["offset"],
                        "native_checkpoint": entry["id"],
                        "time": published_at,
                        "files": published.uploaded,
                        "credentials_sha256": credentials_sha256,
                    },
                )
                if self.index is not None:  # under the lock: a delete removes latest and the entry together
                    self.index.put(_index_entry(record), checkpoint, epoch=held or 0)
            record_publication(session_id, record.tenant, seq, publication)
            covered = self._published(session_id, entry)
            return PublishReport(PublishOutcome.PUBLISHED, publication, published.bytes_sent, covered_seq=covered)

    def _published(self, session_id: str, entry: Mapping[str, object]) -> int:
        """`latest` names the checkpoint of `entry`: tell on_published what it covers; returns that."""
        covered = entry.get("covered_seq", 0)
        if not isinstance(covered, int) or covered <= 0:
            return 0
        if self._on_published is not None:
            self._on_published(session_id, covered)
        return covered


def _unsent_bytes(files: list[archive.LocalFile], uploaded: localstate.Uploaded | None) -> int:
    """About what this publish sends: the files' bytes past what uploaded.json says is stored."""
    stored = 0
    for state in (uploaded["files"] if uploaded else {}).values():
        stored += state["blocks"] * archive.BLOCK_BYTES + sum(size for _, size in state["tail"])
    return max(0, sum(local.size for local in files) - stored)


def _index_entry(record: SessionRecord) -> dict[str, Any]:
    """The discovery index's copy: the session as GET /sessions shows it, with its tenant."""
    return {**record.as_wire(), "tenant": record.tenant}
