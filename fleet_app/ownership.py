"""A fleet instance's ownership of the sessions it serves: the lease taken when a session is
created or loaded, the epoch its local copy was written under, the stale copy replaced by the
archive's `latest`, and the check before every write; and its stand-in for one instance alone,
owner of every session at SOLO_EPOCH.

Sees the session runtime's files and the archive only through the protocols below; no Django.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from foundation.errors import Unavailable
from foundation.logs import logger

from .journal import InputJournal
from .lease_token import Leases, LeaseToken
from .solo import SoloJournal, SoloLeases

__all__ = ["LeasedOwnership", "SessionCopies", "SoloOwnership", "TakeOver"]

FIRST_EPOCH = 1  # fleet_app.db: a session's first lease ever


class SessionCopy(Protocol):
    """A session's directory here (sessions_app.storage.SessionFiles)."""

    def exists(self) -> bool: ...
    def read_lease_epoch(self) -> int | None: ...
    def write_lease_epoch(self, epoch: int) -> None: ...


class SessionCopies(Protocol):
    """The sessions' directories here (sessions_app.storage.SessionStorage)."""

    def files(self, session_id: str) -> SessionCopy: ...


class TakeOver(Protocol):
    async def take_over(self, tenant: str, session_id: str) -> bool:
        """Replace the local copy (kept aside) with the archive's latest: False without one."""

    async def rebuild(self, tenant: str, session_id: str) -> bool:
        """With no local copy and nothing in the archive: the session as created, from its row
        in the fleet's database. False without a row."""


class LeasedOwnership:
    def __init__(self, leases: Leases, storage: SessionCopies, archive: TakeOver | None, journal: InputJournal) -> None:
        self.leases = leases
        self.storage = storage
        self.archive = archive
        self.journal = journal

    async def _acquire(self, session_id: str) -> int:
        if not self.leases.joined:  # the others could not see this instance as the owner yet
            raise Unavailable("this instance has not joined the fleet yet")
        epoch = await self.leases.acquire(session_id)
        if epoch is None:
            raise Unavailable("the session is owned by another instance")
        return epoch

    async def claim_new(self, session_id: str) -> None:
        """A session created here: its first lease, recorded in its new directory."""
        epoch = await self._acquire(session_id)
        await asyncio.to_thread(self.storage.files(session_id).write_lease_epoch, epoch)

    async def claim(self, tenant: str, session_id: str) -> bool:
        """Take the lease of a session about to load here. The local copy serves when it was
        written under the epoch now held (nobody took the session meanwhile: it is the freshest
        there is); otherwise the archive's latest replaces it. With neither (its owner died
        before its first upload), the session is rebuilt as it was created from its row, and
        the input journal, which nothing has pruned, brings back every input acknowledged since
        (the actor adopts it at load). True when the local copy was replaced.

        A load that fails after the acquire (the archive unreadable, say) keeps the lease: the
        next request, here or forwarded here by another instance, acquires it again at the
        same epoch, so retries never move the epoch on."""
        epoch = await self._acquire(session_id)
        files = self.storage.files(session_id)
        local = await asyncio.to_thread(files.read_lease_epoch)
        exists = await asyncio.to_thread(files.exists)
        # the copy is the freshest when written under the epoch held, or under the one before it
        # by a former process of this instance's name (a restart after a crash: nobody else
        # held the session in between)
        own = self.leases.own_name_epoch(session_id)
        fresh = exists and (
            local == epoch or (local is None and epoch == FIRST_EPOCH) or (local is not None and local == own)
        )
        replaced = False
        if not fresh and self.archive is not None:
            replaced = await self.archive.take_over(tenant, session_id)
            if exists and replaced:
                logger.info(
                    "stale session copy replaced",
                    extra={"session_id": session_id, "local_epoch": local, "epoch": epoch},
                )
            elif not exists and not replaced:
                exists = await self.archive.rebuild(tenant, session_id)
        if not replaced and not exists:
            raise Unavailable("the session's state is neither on this instance nor in the archive")
        await asyncio.to_thread(files.write_lease_epoch, epoch)
        return replaced

    def require_writable(self, session_id: str) -> LeaseToken:
        """The lease to write under; 503 unavailable while it is not (or no longer) ours."""
        token = self.leases.held_token(session_id)
        if token is None:
            raise Unavailable("this instance's lease on the session is lapsing; retry")
        return token


class SoloOwnership:
    """One instance alone: every session is its own, claimed by nothing, always writable."""

    def __init__(self) -> None:
        self.leases = SoloLeases()
        self.journal = SoloJournal()

    async def claim_new(self, session_id: str) -> None:
        pass

    async def claim(self, tenant: str, session_id: str) -> bool:
        return False

    def require_writable(self, session_id: str) -> LeaseToken:
        return self.leases.held_token(session_id)
