"""Session rows written behind: a changed record reaches the database at most
WRITE_BEHIND_SECONDS later, in one batch. Crash recovery does not depend on it (the event log and
the running marker do); the admin and lists see it.

In a fleet the rows are shared: each is written only under the epoch this instance still holds
its session at (sessions_app.db.LeaseFence), and a session whose lease is lapsing or lost is
not written at all: its next owner writes it."""

from __future__ import annotations

import asyncio
import dataclasses

from fleet_app.lease_token import Leases
from foundation.logs import logger
from sessions_app import db
from sessions_app.records import SessionRecord

__all__ = ["WRITE_BEHIND_SECONDS", "WriteBehind"]

WRITE_BEHIND_SECONDS = 0.2


class WriteBehind:
    def __init__(self, leases: Leases) -> None:
        """`leases`: the instance's, which fence each row (not at all for one instance alone)."""
        self._dirty: dict[str, SessionRecord] = {}
        self._leases = leases

    def mark(self, record: SessionRecord) -> None:
        self._dirty[record.id] = record

    def forget(self, session_id: str) -> None:
        """A session this process no longer writes: its pending row is dropped."""
        self._dirty.pop(session_id, None)

    async def save_config(self, record: SessionRecord) -> None:
        """A configuration change, written at once (not behind): the next turn, a restore from
        the archive and a new owner read the row. In a fleet, only under the lease still held."""
        fence, _ = self._leases.fence_rows((record.id,))
        await db.asave_session_config(record, fence=fence)

    async def flush(self) -> None:
        if not self._dirty:
            return
        records, self._dirty = list(self._dirty.values()), {}
        # copies: the actors keep changing their records while the thread writes
        snapshot = [dataclasses.replace(r, checkpoint=r.checkpoint.copy()) for r in records]
        fence, lapsing = self._leases.fence_rows(record.id for record in records)
        for record in records:
            if record.id in lapsing:  # written if the renewal comes back
                self._dirty.setdefault(record.id, record)
        try:
            await db.asave_session_states(snapshot, fence=fence)
        except Exception:  # supervision boundary: keep the rows for the next flush
            logger.exception("session state write failed")
            for record in records:
                self._dirty.setdefault(record.id, record)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(WRITE_BEHIND_SECONDS)
            await self.flush()
