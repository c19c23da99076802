"""Where a draining instance sends the requests of a session it no longer holds.

While an instance stops gracefully it uploads its sessions and releases their leases, and keeps
answering for a grace period. A request for a session it released that nobody has taken yet goes
to a live instance that is not draining (the same one for the same session while the choice
holds), which takes the session's lease as it serves it; the draining instance never takes it
again. Read from the instances table, remembered briefly. No Django; the database through db twins.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from . import db

__all__ = ["Successor", "Successors"]

logger = logging.getLogger("brain.fleet")

# How long the list of live instances that are not draining is reused: a drain lasts seconds.
SUCCESSORS_SECONDS = 0.5


class Owner(Protocol):
    @property
    def instance(self) -> str: ...
    @property
    def incarnation(self) -> str: ...


class DrainingLeases(Protocol):
    """What the choice needs of fleet_app.leases.LeaseManager."""

    @property
    def instance(self) -> str: ...
    @property
    def database(self) -> str: ...
    async def owner_of(self, session_id: str) -> Owner | None: ...


@dataclass(frozen=True, slots=True)
class Successor:
    instance: str
    incarnation: str
    url: str


class Successors:
    """One per process (the router's)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._live: tuple[float, list[Successor]] | None = None  # (read at, instances)

    async def pick(self, leases: DrainingLeases, session_id: str) -> Successor | None:
        """A live instance, not draining and not this one, for the session; None when there is
        none (the whole fleet is stopping) or the database cannot tell."""
        now = self._clock()
        if self._live is None or now - self._live[0] > SUCCESSORS_SECONDS:
            try:
                rows = await db.alist_instances(using=leases.database)
            except Exception:  # the database: nobody can tell who may take the session
                logger.warning("fleet successor lookup failed", exc_info=True, extra={"session_id": session_id})
                return None
            live = [Successor(row.name, row.incarnation, row.url) for row in rows if row.alive and not row.draining]
            self._live = (now, [row for row in live if row.instance != leases.instance])
        candidates = self._live[1]
        if not candidates:
            return None
        return candidates[zlib.crc32(session_id.encode()) % len(candidates)]

    @staticmethod
    async def still_free_or_taken_by(leases: DrainingLeases, session_id: str, successor: Owner) -> bool:
        """While the successor's answer has not started: the session is still free, or it is the
        successor's (it took the lease); a failed lookup cannot tell, so it says no."""
        try:
            owner = await leases.owner_of(session_id)
        except Exception:
            logger.warning("fleet successor re-check failed", exc_info=True, extra={"session_id": session_id})
            return False
        return owner is None or (owner.instance, owner.incarnation) == (successor.instance, successor.incarnation)
