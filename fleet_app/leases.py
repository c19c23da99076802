"""One instance's leases: acquire, renew in batches, release, and the local rule that stops
writes before a lease can expire elsewhere. No request objects; the database through db twins.

The local rule: a lease's local deadline is the monotonic time its last successful acquire or
renewal was *sent*, plus `lease_seconds - margin`. The database computed its expiry from a later
moment (when it ran the statement), so the deadline passes at least `margin` before any other
instance may acquire the session, whatever the network or this process did meanwhile (a pause,
a partition, a slow statement). Past the deadline the session is not writable until a renewal
succeeds at the same epoch, which proves nobody took it in between.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from foundation.telemetry import Telemetry

from . import db
from .db import DEFAULT_DB_ALIAS, DatabaseError
from .lease_token import LeaseFence, LeaseToken

__all__ = ["LeaseManager", "Renewal", "margin_seconds"]

logger = logging.getLogger("brain.fleet")

# How much earlier than the database's expiry an instance stops writing: a fifth of the lease,
# at least a second (a write that checked writability just before the deadline still finishes
# before a successor can start).
MARGIN_FRACTION = 0.2
MIN_MARGIN_SECONDS = 1.0
# Renewals run this many times per lease, so two may fail before the local deadline passes.
RENEWALS_PER_LEASE = 3


def margin_seconds(lease_seconds: float) -> float:
    return min(max(MIN_MARGIN_SECONDS, lease_seconds * MARGIN_FRACTION), lease_seconds / 2)


@dataclass(frozen=True, slots=True)
class Renewal:
    held: frozenset[str]  # still ours, writable until the new deadline
    lost: frozenset[str]  # taken by another instance or released: drop the local copy's ownership


@dataclass(slots=True)
class _Held:
    epoch: int
    deadline: float  # monotonic: writable while clock() < deadline
    # the epoch before, when a former process of this instance's name held the lease last
    # (it expired with that process): nobody else held the session in between
    own_name_before: int | None = None


class LeaseManager:
    """The leases one instance holds. Methods that touch the database are async (db twins);
    `is_writable` and `held_epoch` are local and cheap, for every write's check."""

    def __init__(
        self,
        *,
        instance: str,
        url: str,
        lease_seconds: float,
        database: str = DEFAULT_DB_ALIAS,
        clock: Callable[[], float] = time.monotonic,
        telemetry: Telemetry | None = None,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.instance = instance
        self.url = url
        self.lease_seconds = float(lease_seconds)
        self.margin = margin_seconds(self.lease_seconds)
        self.database = database
        # new for every process: its leases, fenced writes and the signed requests it accepts
        # name it, so a process that re-joins a name shares nothing with the one before it
        self.incarnation = secrets.token_hex(16)
        self._clock = clock
        self._held: dict[str, _Held] = {}
        self.joined = False
        self.draining = False  # stopping gracefully: acquires nothing more (see set_draining)
        # brain.fleet.leases, .acquisitions and .failovers (a no-op when telemetry is off)
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._telemetry.observe_fleet_leases(self._writable_count)

    @property
    def renew_interval(self) -> float:
        return self.lease_seconds / RENEWALS_PER_LEASE

    def _deadline(self, sent: float) -> float:
        return sent + self.lease_seconds - self.margin

    async def join(self) -> bool:
        """Register the instance; False while another live process uses this name."""
        self.joined = await db.ajoin_instance(
            self.instance,
            url=self.url,
            incarnation=self.incarnation,
            lease_seconds=self.lease_seconds,
            using=self.database,
        )
        return self.joined

    async def join_retrying(self, *, retry_seconds: float) -> None:
        """Join, trying again every `retry_seconds` while a live process holds the name or the
        database is out of reach."""
        while True:
            try:
                if await self.join():
                    return
                logger.warning("fleet instance name in use; retrying", extra={"instance": self.instance})
            except DatabaseError as exc:
                logger.warning("fleet join failed; retrying", extra={"instance": self.instance, "error": str(exc)})
            await asyncio.sleep(retry_seconds)

    async def acquire(self, session_id: str) -> int | None:
        """Take the session's lease (free, expired, or already ours): the epoch held, or None
        while another instance holds it. A change of owner increments the epoch. None while
        draining: a session this instance released is another instance's to take."""
        if self.draining:
            return None
        sent = self._clock()
        taken = await db.atake_lease(
            session_id,
            owner=self.instance,
            incarnation=self.incarnation,
            lease_seconds=self.lease_seconds,
            using=self.database,
        )
        if taken is None:
            self._held.pop(session_id, None)
            return None
        if (taken.previous, taken.previous_incarnation) != (self.instance, self.incarnation):  # taken now
            self._telemetry.record_fleet_acquisition(failover=taken.previous != "")
        held = self._held.get(session_id)
        before = None
        if taken.previous == self.instance and taken.previous_incarnation != self.incarnation:
            before = taken.epoch - 1  # straight from a former process of this name
        elif held is not None and held.epoch == taken.epoch:  # acquired again: the same tenure
            before = held.own_name_before
        self._held[session_id] = _Held(taken.epoch, self._deadline(sent), before)
        return taken.epoch

    async def renew(self) -> Renewal:
        """Renew every held lease and the heartbeat in one statement. Leases the database no
        longer gives us at our epoch are forgotten and returned as lost. A database error
        leaves every deadline where it was (they lapse on their own) and propagates."""
        sent = self._clock()
        snapshot = {session_id: held.epoch for session_id, held in self._held.items()}
        renewed = await db.arenew_leases(
            self.instance,
            snapshot,
            incarnation=self.incarnation,
            lease_seconds=self.lease_seconds,
            using=self.database,
        )
        still = renewed.held
        if not renewed.member and self.joined:
            # another process joined under this name (this one was paused or cut off past its
            # heartbeat): this process is no longer a member and takes no session any more
            self.joined = False
            logger.error(
                "another process took this instance's name; this process no longer serves sessions",
                extra={"instance": self.instance},
            )
        deadline = self._deadline(sent)
        lost: set[str] = set()
        for session_id, epoch in snapshot.items():
            held = self._held.get(session_id)
            if held is None or held.epoch != epoch:
                continue  # released or re-acquired while the statement ran: that call decided
            if session_id in still:
                held.deadline = max(held.deadline, deadline)
            else:
                del self._held[session_id]
                lost.add(session_id)
        return Renewal(frozenset(still), frozenset(lost))

    async def release(self, session_id: str) -> bool:
        """Give the lease up, after the session was flushed to the archive, so another
        instance takes it at once. Writes stop here whatever the database answers."""
        held = self._held.pop(session_id, None)
        if held is None:
            return False
        return await db.arelease_lease(
            session_id, owner=self.instance, incarnation=self.incarnation, epoch=held.epoch, using=self.database
        )

    def forget(self, session_id: str) -> None:
        """Stop writing the session and keep the lease unreleased, to expire on its own (a
        graceful shutdown that could not upload it: no successor takes it before it must)."""
        self._held.pop(session_id, None)

    async def release_all(self) -> set[str]:
        """Graceful shutdown, after the flush: every lease in one statement."""
        snapshot = {session_id: held.epoch for session_id, held in self._held.items()}
        self._held.clear()
        if not snapshot:
            return set()
        return await db.arelease_all(self.instance, snapshot, incarnation=self.incarnation, using=self.database)

    async def leave(self) -> None:
        """Release everything and mark the instance gone, so routing skips it at once."""
        await self.release_all()
        await db.aleave_instance(self.instance, incarnation=self.incarnation, using=self.database)
        self.joined = False

    async def leave_quietly(self) -> None:
        """leave(), a database error logged: the leases then expire on their own."""
        try:
            await self.leave()
        except DatabaseError as exc:
            logger.warning("leaving the fleet failed", extra={"instance": self.instance, "error": str(exc)})

    async def set_draining(self, draining: bool) -> bool:
        """Mark this instance (no longer) draining, here at once and then in its row, which the
        others read to choose where a draining instance's released sessions go."""
        self.draining = draining
        return await db.aset_draining(
            self.instance, incarnation=self.incarnation, draining=draining, using=self.database
        )

    async def owner_of(self, session_id: str) -> db.LeaseOwner | None:
        """The session's live owner and its URL (this instance included), or None."""
        return await db.aowner_of(session_id, using=self.database)

    def is_writable(self, session_id: str) -> bool:
        return self.held_epoch(session_id) is not None

    def held_epoch(self, session_id: str) -> int | None:
        """The epoch to stamp on a write, or None when the session is not ours to write:
        never acquired, lost, released, or not renewed for `lease_seconds - margin`."""
        held = self._held.get(session_id)
        if held is None or self._clock() >= held.deadline:
            return None
        return held.epoch

    def held_token(self, session_id: str) -> LeaseToken | None:
        """held_epoch() as the lease it names: the session, this instance, the epoch."""
        epoch = self.held_epoch(session_id)
        return LeaseToken(session_id, self.instance, epoch) if epoch is not None else None

    def fence_rows(self, session_ids: Iterable[str]) -> tuple[LeaseFence, set[str]]:
        """Rows are written only under the epoch still held; a lapsing lease's row waits."""
        epochs: dict[str, int] = {}
        lapsing: set[str] = set()
        for session_id in session_ids:
            epoch = self.held_epoch(session_id)
            if epoch is not None:
                epochs[session_id] = epoch
            elif self.holds(session_id):
                lapsing.add(session_id)
        return LeaseFence(self.instance, epochs, self.incarnation), lapsing

    def own_name_epoch(self, session_id: str) -> int | None:
        """The epoch a former process of this instance's name last held the session at, when
        the lease came to this process straight from it; else None. A copy in this instance's
        data directory written under that epoch is then the freshest there is."""
        held = self._held.get(session_id)
        return held.own_name_before if held is not None else None

    def holds(self, session_id: str) -> bool:
        """Whether this instance believes it holds the lease, writable or lapsing."""
        return session_id in self._held

    def _writable_count(self) -> int:
        return sum(1 for session_id in list(self._held) if self.held_epoch(session_id) is not None)

    def held(self) -> dict[str, int]:
        """Every lease this instance believes it holds (writable or lapsed), session -> epoch."""
        return {session_id: held.epoch for session_id, held in self._held.items()}

    async def run_renewals(self, on_lost: Callable[[frozenset[str]], None]) -> None:
        """Renew every `renew_interval` until cancelled; the owner of the task (the engine)
        unloads or stops writing the sessions `on_lost` names. A failed renewal is logged and
        retried next round: meanwhile deadlines lapse, and writes stop on their own."""
        while True:
            began = self._clock()
            try:
                renewal = await self.renew()
            except DatabaseError as exc:
                logger.warning("fleet lease renewal failed", extra={"instance": self.instance, "error": str(exc)})
            else:
                if renewal.lost:
                    on_lost(renewal.lost)
            await asyncio.sleep(max(0.0, self.renew_interval - (self._clock() - began)))
