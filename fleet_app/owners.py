"""The owner of a session as a non-owner sees it: looked up in PostgreSQL, a remote owner
remembered briefly, the lookups in flight bounded (fleet_app.gate), and asked afresh while a
forwarded request waits for its answer. No Django."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from foundation.errors import Unavailable

from .executor_routes import HolderView
from .gate import LookupBound

__all__ = ["LeaseOwnerView", "LeaseView", "OwnerCache"]

logger = logging.getLogger("brain.fleet")

# How long a looked-up remote owner is reused, at most a tenth of the lease; bounded in size.
OWNER_CACHE_SECONDS = 1.0
OWNER_CACHE_ENTRIES = 10_000


# A session's owner is seen as an executor's holder is: a process of the fleet (its name,
# incarnation and URL), so routing forwards to either the same way.
LeaseOwnerView = HolderView


class LeaseView(Protocol):
    """What routing needs of fleet_app.leases.LeaseManager."""

    @property
    def instance(self) -> str: ...
    @property
    def incarnation(self) -> str: ...
    @property
    def lease_seconds(self) -> float: ...
    @property
    def database(self) -> str: ...
    @property
    def draining(self) -> bool: ...
    def held_epoch(self, session_id: str) -> int | None: ...
    async def owner_of(self, session_id: str) -> LeaseOwnerView | None: ...


class OwnerCache:
    """Remote owners this instance looked up, each reused for a moment."""

    def __init__(self) -> None:
        self.lookups = 0  # owner lookups in the database
        self.in_flight = LookupBound()
        # session id -> (its remote owner, monotonic time the entry stops being used)
        self._owners: dict[str, tuple[LeaseOwnerView, float]] = {}

    async def owner(self, leases: LeaseView, session_id: str) -> LeaseOwnerView | None:
        """The session's live owner: a remote owner remembered briefly, else the database's answer."""
        now = time.monotonic()
        cached = self._owners.get(session_id)
        if cached is not None and now < cached[1]:
            return cached[0]
        self.lookups += 1
        if not self.in_flight.enter():
            raise Unavailable("too many session owner lookups are in flight on this instance")
        try:
            owner = await leases.owner_of(session_id)
        finally:
            self.in_flight.leave()
        if owner is None or (owner.instance, owner.incarnation) == (leases.instance, leases.incarnation):
            self._owners.pop(session_id, None)
            return owner
        if len(self._owners) >= OWNER_CACHE_ENTRIES:
            self._owners.pop(next(iter(self._owners)))
        self._owners[session_id] = (owner, now + min(OWNER_CACHE_SECONDS, leases.lease_seconds / 10))
        return owner

    @property
    def remembered(self) -> int:
        """Remote owners remembered now (expired entries included until replaced)."""
        return len(self._owners)

    def forget(self, session_id: str) -> None:
        self._owners.pop(session_id, None)

    async def still_owner(self, leases: LeaseView, session_id: str, owner: LeaseOwnerView) -> bool:
        """Whether `owner` still holds the session's live lease at the epoch it was found with
        (the database asked afresh; a failed lookup cannot tell, so it says no)."""
        try:
            now = await leases.owner_of(session_id)
        except Exception:
            logger.warning("fleet owner re-check failed", exc_info=True, extra={"session_id": session_id})
            return False
        return (
            now is not None
            and (now.instance, now.incarnation) == (owner.instance, owner.incarnation)
            and getattr(now, "epoch", None) == getattr(owner, "epoch", None)
        )
