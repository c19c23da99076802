"""The server's side of background sync: the dirty set, its bound, the scan that publishes it.

A session is marked dirty when it is created and whenever it settles. Every
`interval_seconds` the scheduler hands each dirty session to a publisher: Celery workers when a
broker is configured (`manage.py syncworker`), otherwise threads of this process. Either way
the publisher's result lands in the session's sync-state row, which the scheduler polls; a
session leaves the dirty set once a publish covered its newest mark. While the set holds
`queue` sessions or more, writes get 429 and readiness is 503. Turns never wait for any of it.

The sessions the startup scan finds are dispatched at once, whatever the interval. A session
whose publish failed permanently (credentials, a missing bucket) leaves the dirty set and is
parked: it is tried again after `retry_seconds`, doubling up to RETRY_CEILING times that, at
the next startup, or at its next change, whichever comes first. Retries of parked sessions do
not count against `queue`: a misconfigured archive must not turn into 429s.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from foundation.logs import logger
from foundation.telemetry import Telemetry
from persistence_app import db, localstate
from persistence_app.sync import Publisher, PublishOutcome, PublishReport
from sessions_app.storage import CheckpointError, SessionStorage

__all__ = ["Dispatch", "SyncScheduler", "unsynced_sessions"]

POLL_SECONDS = 0.25  # how soon a worker's result reaches readiness and the 429
# a dispatched publish with no result after this long is dispatched again (a worker died)
REDISPATCH_SECONDS = 30.0
IN_PROCESS_THREADS = 4
RETRY_CEILING = 30  # a parked session's delay doubles from retry_seconds up to 30 times it (1 min → 30 min)

Dispatch = Callable[[str, int], None]  # hands (session_id, seq) to a Celery worker


@dataclass(slots=True)
class _Dirty:
    seq: int  # time.time_ns() of the newest mark
    dispatched_seq: int = 0
    dispatched_at: float = 0.0


@dataclass(slots=True)
class _Parked:
    """A session whose last publish failed permanently, waiting for its next try."""

    delay: float  # the wait before this try; doubles after each failed one
    due: float  # time.monotonic() of the next try


def unsynced_sessions(storage: SessionStorage) -> list[str]:
    """Local sessions whose events or checkpoint are newer than what uploaded.json records
    (`<id>-replaced-<ID>` directories and strays are not sessions)."""
    found = []
    for name in storage.session_ids():
        files = storage.files(name)
        uploaded = localstate.read_uploaded(files.directory)
        if uploaded is None:
            found.append(name)
            continue
        try:
            history = files.history_bytes()
            last = files.last_checkpoint_id()
        except (OSError, CheckpointError):
            continue
        if history != uploaded["history_bytes"] or (last is not None and last != uploaded["native_checkpoint"]):
            found.append(name)
    return sorted(found)


class SyncScheduler:
    def __init__(
        self,
        publisher: Publisher,
        *,
        interval_seconds: float,
        queue: int,
        retry_seconds: float = 60.0,
        dispatch: Dispatch | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.publisher = publisher
        self.interval = interval_seconds
        self.queue = queue
        self.retry_seconds = retry_seconds
        self._dispatch = dispatch
        self._telemetry = telemetry
        if telemetry is not None:
            telemetry.observe_sync_pending(lambda: len(self._dirty))
        self._dirty: dict[str, _Dirty] = {}
        self._parked: dict[str, _Parked] = {}
        self._retrying: set[str] = set()  # dirty only to retry a parked failure: not counted in `full`
        self._threads = None if dispatch else ThreadPoolExecutor(IN_PROCESS_THREADS, thread_name_prefix="brain-sync")
        self._locks: dict[str, asyncio.Lock] = {}
        self._scanned = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Future[PublishReport]] = set()

    # -- what the server asks --------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._dirty)

    @property
    def full(self) -> bool:
        return len(self._dirty) - len(self._retrying) >= self.queue

    @property
    def ready(self) -> bool:
        """Readiness: the startup scan is done and the backlog is not full."""
        return self._scanned and not self.full

    def is_pending(self, session_id: str) -> bool:
        return session_id in self._dirty

    def is_parked(self, session_id: str) -> bool:
        return session_id in self._parked

    def mark_dirty(self, session_id: str) -> None:
        self._parked.pop(session_id, None)  # a change is tried at once, with a fresh backoff
        self._retrying.discard(session_id)
        entry = self._dirty.get(session_id)
        seq = time.time_ns()
        if entry is None:
            self._dirty[session_id] = _Dirty(seq)
        else:
            entry.seq = seq

    def forget(self, session_id: str) -> None:
        """A restore replaced the session: whatever was dirty belonged to the old copy."""
        self._drop(session_id)
        self._parked.pop(session_id, None)

    def _drop(self, session_id: str) -> None:
        self._dirty.pop(session_id, None)
        self._retrying.discard(session_id)

    def _park(self, session_id: str) -> None:
        """Out of the dirty set after a permanent failure; due again after a doubling delay."""
        retried = session_id in self._retrying
        self._drop(session_id)
        parked = self._parked.get(session_id)
        ceiling = self.retry_seconds * RETRY_CEILING
        delay = min(parked.delay * 2, ceiling) if parked is not None and retried else self.retry_seconds
        self._parked[session_id] = _Parked(delay=delay, due=time.monotonic() + delay)

    def _unpark_due(self, now: float) -> None:
        for session_id, parked in list(self._parked.items()):
            if parked.due > now or session_id in self._dirty:
                continue
            logger.info("sync retry of a failed session", extra={"session_id": session_id, "after": parked.delay})
            self._dirty[session_id] = _Dirty(time.time_ns())
            self._retrying.add(session_id)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="brain-sync-scheduler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        storage = self.publisher.storage
        try:
            found = await asyncio.to_thread(unsynced_sessions, storage)
        except Exception:  # supervision boundary: a failed scan must not keep readiness down
            logger.exception("sync startup scan failed")
            found = []
        try:  # permanent failures a previous run recorded are tried again now
            failed = await db.apermanently_failed()
        except Exception:  # supervision boundary: as above
            logger.exception("sync startup scan failed")
            failed = []
        local = set(found) | {session_id for session_id in failed if storage.directory(session_id).is_dir()}
        for session_id in sorted(local):
            self.mark_dirty(session_id)
        self._scanned = True
        logger.info("sync startup scan done", extra={"unsynced": len(found), "failed": len(local) - len(found)})
        last_dispatch = -math.inf  # what the scan found is dispatched now, not one interval later
        unsent: list[tuple[str, int]] = []  # what the last dispatch could not hand to the broker
        while True:
            now = time.monotonic()
            if self._parked:
                self._unpark_due(now)
            # after a broker failure, parked retries wait for the interval too (no busy retrying)
            if now - last_dispatch >= self.interval or (not unsent and self._retrying_undispatched()):
                last_dispatch = now
                due = self._dispatch_due(now)
                unsent = await asyncio.to_thread(self._send, due) if due else []  # the broker is network I/O
                for session_id, seq in unsent:
                    self._retry_later(session_id, seq)  # at the next interval, not after REDISPATCH_SECONDS
            if self._dispatch is not None and self._dirty:
                await self._poll()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            self._wake.clear()

    def _retrying_undispatched(self) -> bool:
        return any(self._dirty[session_id].dispatched_seq == 0 for session_id in self._retrying)

    def _dispatch_due(self, now: float) -> list[tuple[str, int]]:
        """Start in-process publishes of the due sessions; return those due for Celery."""
        due: list[tuple[str, int]] = []
        for session_id, entry in list(self._dirty.items()):
            if entry.dispatched_seq == entry.seq and now - entry.dispatched_at < REDISPATCH_SECONDS:
                continue  # its publish is on the way
            if entry.dispatched_seq and entry.dispatched_seq != entry.seq and now - entry.dispatched_at < self.interval:
                continue
            entry.dispatched_seq, entry.dispatched_at = entry.seq, now
            if self._dispatch is not None:
                due.append((session_id, entry.seq))
            else:
                self._run_in_thread(session_id, entry.seq)
        return due

    def _send(self, due: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """Hand `due` to the broker; returns what did not reach it (from the first failure on)."""
        assert self._dispatch is not None
        for index, (session_id, seq) in enumerate(due):
            try:
                self._dispatch(session_id, seq)
            except Exception as exc:  # a broker outage: stay dirty, dispatched again next interval
                logger.error("sync dispatch failed", extra={"session_id": session_id, "error": str(exc)})
                return due[index:]
        return []

    def _run_in_thread(self, session_id: str, seq: int) -> None:
        assert self._threads is not None
        future = asyncio.wrap_future(self._threads.submit(self.publisher.run, session_id, seq))
        self._inflight.add(future)

        def done(finished: asyncio.Future[PublishReport]) -> None:
            self._inflight.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                logger.error("sync job crashed", extra={"session_id": session_id, "error": repr(error)})
                self._retry_later(session_id, seq)
                return
            self._settle(session_id, seq, finished.result())

        future.add_done_callback(done)

    def _settle(self, session_id: str, seq: int, result: PublishReport) -> None:
        if self._telemetry is not None:
            self._telemetry.record_sync(result.seconds, failed=result.outcome == PublishOutcome.FAILED)
        entry = self._dirty.get(session_id)
        if entry is None:
            return
        if result.outcome in (
            PublishOutcome.PUBLISHED,
            PublishOutcome.UNCHANGED,
            PublishOutcome.FENCED,
            PublishOutcome.GONE,
        ):
            if entry.seq <= seq:
                self._drop(session_id)
        elif result.outcome == PublishOutcome.FAILED and result.permanent:
            if entry.seq <= seq:
                self._park(session_id)  # shown in SyncStatus.error; tried again later
        else:
            self._retry_later(session_id, seq)

    def _retry_later(self, session_id: str, seq: int) -> None:
        entry = self._dirty.get(session_id)
        if entry is not None and entry.dispatched_seq == seq:
            entry.dispatched_seq = 0  # due again at the next scan

    async def _poll(self) -> None:
        """Celery mode: learn from the sync-state rows which dirty sessions a worker published."""
        ids = list(self._dirty)
        try:
            rows = await db.astates(ids)
        except Exception as exc:  # the database is busy or gone: poll again later
            logger.warning("sync state poll failed", extra={"error": str(exc)})
            return
        for session_id in ids:
            entry, row = self._dirty.get(session_id), rows.get(session_id)
            if entry is None or row is None:
                continue
            if row.synced_seq >= entry.seq:
                self._drop(session_id)
            elif row.failed_seq >= entry.dispatched_seq > 0:
                if row.error_permanent and row.failed_seq >= entry.seq:
                    self._park(session_id)
                else:
                    entry.dispatched_seq = 0

    # -- flush -------------------------------------------------------------------------------

    async def flush(self, session_id: str) -> PublishReport:
        """Publish now, in this process, whatever the dispatch mode; one flush per session at a
        time. A background publish of the session in flight is waited for, then this one runs."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        try:
            async with lock:
                seq = time.time_ns()
                result = await asyncio.to_thread(self.publisher.run, session_id, seq, wait=True)
                entry = self._dirty.get(session_id)
                if result.outcome in (PublishOutcome.PUBLISHED, PublishOutcome.UNCHANGED):
                    self._parked.pop(session_id, None)
                    if entry is not None and entry.seq <= seq:
                        self._drop(session_id)
                return result
        finally:
            if not lock.locked():
                self._locks.pop(session_id, None)
