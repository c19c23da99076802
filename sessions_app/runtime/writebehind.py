"""Session rows written behind: a changed record reaches the database at most
WRITE_BEHIND_SECONDS later, in one batch. Crash recovery does not depend on it (the event log and
the running marker do); the admin and lists see it."""

from __future__ import annotations

import asyncio
import dataclasses

from foundation.logs import logger
from sessions_app import db
from sessions_app.records import SessionRecord

__all__ = ["WRITE_BEHIND_SECONDS", "WriteBehind"]

WRITE_BEHIND_SECONDS = 0.2


class WriteBehind:
    def __init__(self) -> None:
        self._dirty: dict[str, SessionRecord] = {}

    def mark(self, record: SessionRecord) -> None:
        self._dirty[record.id] = record

    def forget(self, session_id: str) -> None:
        """A session this process no longer writes: its pending row is dropped."""
        self._dirty.pop(session_id, None)

    async def flush(self) -> None:
        if not self._dirty:
            return
        records, self._dirty = list(self._dirty.values()), {}
        # copies: the actors keep changing their records while the thread writes
        snapshot = [dataclasses.replace(r, checkpoint=r.checkpoint.copy()) for r in records]
        try:
            await db.asave_session_states(snapshot)
        except Exception:  # supervision boundary: keep the rows for the next flush
            logger.exception("session state write failed")
            for record in records:
                self._dirty.setdefault(record.id, record)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(WRITE_BEHIND_SECONDS)
            await self.flush()
