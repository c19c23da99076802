"""A draining instance's last step for each session it holds: wait until nothing can append to
the session's event log any more, upload it, check that the archive holds every retained event
the log has, and only then release the lease, so the instance that takes the session next serves
every event a client has seen. Sessions are handed off a few at once, so many sessions fit in the
stop budget. A session whose last events cannot be uploaded in time keeps its lease (unrenewed: it
expires after lease_seconds, as after a crash) and the log says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from fleet_app.lease_token import Leases
from foundation.errors import BrainError
from foundation.logs import logger
from persistence_app.archiving import ArchiveService
from sessions_app.runtime.engine import Engine

__all__ = ["FLEET_FLUSHES_AT_ONCE", "FLEET_FLUSH_SECONDS", "release_sessions"]

# Graceful shutdown uploads each held session before releasing it; one stuck upload must not
# hold the others' handoff (its lease expires instead).
FLEET_FLUSH_SECONDS = 10.0
# Uploads at once while handing off: one at a time, a hundred sessions do not fit in the stop
# budget (about 20 s); more at once than this only queue on the archive's threads.
FLEET_FLUSHES_AT_ONCE = 8
# How long a session's turn may still take to settle (the engine gave turns SHUTDOWN_TURN_SECONDS
# already); past this its lease is kept to expire, its last events not uploaded.
SETTLE_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.05
# Uploads of one session before giving up when its log keeps growing past what was uploaded.
FLUSH_ATTEMPTS = 3


async def release_sessions(engine: Engine, archive: ArchiveService | None, leases: Leases) -> None:
    """Hand off every held session, FLEET_FLUSHES_AT_ONCE at a time (renewals still running)."""
    gate = asyncio.Semaphore(FLEET_FLUSHES_AT_ONCE)

    async def one(session_id: str) -> None:
        async with gate:
            await _hand_off_one(engine, archive, leases, session_id)

    await asyncio.gather(*(one(session_id) for session_id in list(leases.held())))


def _settled(engine: Engine, session_id: str) -> bool:
    """No turn of the session runs (nothing settles late into its log)."""
    actor = engine.actors.get(session_id)
    return actor is None or actor.task is None


async def _wait_settled(engine: Engine, session_id: str, clock: Callable[[], float] = time.monotonic) -> bool:
    deadline = clock() + SETTLE_SECONDS
    while not _settled(engine, session_id):
        if clock() > deadline:
            return False
        await asyncio.sleep(SETTLE_POLL_SECONDS)
    return True


async def _hand_off_one(engine: Engine, archive: ArchiveService | None, leases: Leases, session_id: str) -> None:
    if archive is not None and not await _uploaded_whole(engine, archive, session_id):
        leases.forget(session_id)  # not released: its lease expires, nobody takes it before
        return
    try:
        await leases.release(session_id)
    except Exception as exc:  # the database: released with the rest when leaving, or it expires
        logger.warning("releasing a lease failed", extra={"session_id": session_id, "error": str(exc)})


async def _uploaded_whole(engine: Engine, archive: ArchiveService, session_id: str) -> bool:
    """Upload the settled session until the archive holds its whole event log; False (logged)
    when a turn does not settle, an upload fails, or the log keeps growing."""
    if not await _wait_settled(engine, session_id):
        logger.warning(
            "a turn did not settle before leaving: the session keeps its lease until it expires",
            extra={"session_id": session_id},
        )
        return False
    files = engine.storage.files(session_id)
    for _ in range(FLUSH_ATTEMPTS):
        try:
            status: Mapping[str, object] = await asyncio.wait_for(archive.flush(session_id), FLEET_FLUSH_SECONDS)
        except (BrainError, TimeoutError) as exc:
            logger.warning(
                "upload before leaving failed: the session keeps its lease until it expires",
                extra={"session_id": session_id, "error": str(exc) or type(exc).__name__},
            )
            return False
        local = await asyncio.to_thread(files.history_bytes)
        if status.get("history_bytes") == local and _settled(engine, session_id):
            return True
    logger.warning(
        "the event log kept growing past its upload: the session keeps its lease until it expires",
        extra={"session_id": session_id},
    )
    return False
