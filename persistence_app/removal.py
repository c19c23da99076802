"""A deleted session's archived state: its `latest`, its discovery-index entry and its objects.

Blocking (a worker thread of the server). `latest` and the index entry go first, with the
session's rows and files, under the commit lock a publish writes `latest` under
(persistence_app.sync): a publish in flight either wrote before (and its `latest` is removed
here) or finds no session row after (and writes nothing). The objects under `sessions/<id>/`
(blocks, tails, manifests) go after, at most MAX_REMOVED_OBJECTS of them: nothing names them
any more, so an archive error there leaves unreachable objects (logged), never a session.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from foundation.errors import BrainError
from foundation.logs import logger
from persistence_app import archive, db
from persistence_app.discovery import DiscoveryIndex
from persistence_app.stores.base import ObjectStore, StoreError
from persistence_app.sync import commit_lock

__all__ = ["MAX_REMOVED_OBJECTS", "remove_archived"]

# a session's objects one delete removes: its blocks (2 × limits.session_bytes in 64 KiB blocks
# at most per generation), tails and manifests; a bound so a hostile archive cannot hold a
# worker thread for ever
MAX_REMOVED_OBJECTS = 100_000


def remove_archived(
    store: ObjectStore, index: DiscoveryIndex | None, data_dir: Path, session_id: str, local: Callable[[], None]
) -> int:
    """Remove the session from the archive and, under the same lock, run `local`; returns the
    archived objects removed. BrainError (nothing of the session removed but perhaps `latest`
    and its index entry, so a retry completes it) when the archive refuses."""
    with commit_lock(data_dir, session_id):
        try:
            store.delete(archive.latest_key(session_id))
            if index is not None:
                index.delete(session_id)
        except StoreError as exc:
            logger.error("archive delete failed", extra={"session_id": session_id, "error": str(exc)})
            raise BrainError(f"the session was not deleted: {exc.reason}") from exc
        local()
        db.delete_state(session_id)
    try:
        removed = store.delete_under(f"sessions/{session_id}/", max_objects=MAX_REMOVED_OBJECTS)
    except StoreError as exc:
        logger.error("archived objects of a deleted session left", extra={"session_id": session_id, "error": str(exc)})
        return 0
    if removed >= MAX_REMOVED_OBJECTS:
        logger.warning("archived objects of a deleted session left past the bound", extra={"session_id": session_id})
    return removed
