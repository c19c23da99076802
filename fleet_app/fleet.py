"""The fleet as one object: what a `cluster` block makes of an instance, built once by the
application object from `config.cluster`.

`Fleet` owns this instance's lease manager, the shared input journal, the router that sends
session requests to their owner (and its HTTP client, closed at stop), the fleet secret and the
executor relay, and runs the steps of membership: join (again while the name is taken or the
database is out of reach), renew until stopped, drop what another instance took or the archive
fenced, drain, hand the held sessions off, leave.

`SoloFleet` stands in for it without a `cluster` block (a null object): every session is
writable here at epoch 0, nothing is journaled or routed, nothing joins or leaves. The rest of
the server holds one or the other and never asks which.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from foundation.asgi import Receive, Scope, Send
from foundation.hostconfig import FleetSecret
from foundation.hostconfig.cluster import ClusterConfig
from foundation.logs import logger
from foundation.telemetry import Telemetry

from . import db
from .app_object import RoutedAppObject
from .journal import InputJournal
from .lease_token import Leases
from .leases import LeaseManager
from .ownership import LeasedOwnership, SessionCopies, SoloOwnership, TakeOver
from .routing import FleetRouter
from .solo import SoloJournal, SoloLeases

__all__ = [
    "CHANNEL_REDIS_ENV",
    "JOIN_RETRY_SECONDS",
    "ArchiveFencing",
    "Fleet",
    "Relay",
    "RelayMembership",
    "SoloFleet",
    "build_fleet",
]

# The Redis the executor relay of a fleet runs over (read here so the rest never asks for it).
CHANNEL_REDIS_ENV = "BRAIN_CHANNEL_REDIS"
# A fleet instance whose name a live process holds, or whose database is out of reach, tries again.
JOIN_RETRY_SECONDS = 1.0

Drop = Callable[[frozenset[str]], None]  # unload sessions this instance may no longer write
HandOff = Callable[[Leases], Awaitable[None]]  # upload, then release, each held session


class Relay(Protocol):
    """What the fleet needs of tools_app.relay.ExecutorRelay: to start and stop it."""

    def start(self) -> None: ...
    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RelayMembership:
    """What tools_app.relay.ExecutorRelay needs of the fleet: its Redis, this process's name
    and incarnation, the key its records are sealed with, and the live member's URL lookup."""

    redis_url: str
    instance: str
    incarnation: str
    secret: bytes
    member: Callable[[str, str], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class ArchiveFencing:
    """What the archive service needs of the fleet: the epoch a publish of `latest` is fenced
    with, what to do when a publish was fenced, what to do once a checkpoint is archived. All
    None for one instance alone (nothing fenced, nothing journaled)."""

    lease_epoch: Callable[[str], int | None] | None = None
    on_lease_lost: Callable[[str], None] | None = None
    on_published: Callable[[str, int], None] | None = None


class Fleet:
    """One instance of a fleet (a `cluster` block)."""

    def __init__(
        self,
        cluster: ClusterConfig,
        secret: FleetSecret,
        *,
        telemetry: Telemetry,
        drop: Drop,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        """`drop` unloads sessions another instance took (on the event loop)."""
        self.secret = secret
        self.leases = LeaseManager(
            instance=cluster.instance, url=cluster.url, lease_seconds=cluster.lease_seconds, telemetry=telemetry
        )
        self.journal = InputJournal()
        self.router = FleetRouter()
        self.relay: Relay | None = None  # runtime tools across the fleet (BRAIN_CHANNEL_REDIS)
        self._environ = environ
        self._drop = drop
        self._task: asyncio.Task[None] | None = None

    @property
    def is_fleet(self) -> bool:
        return True

    @property
    def instance(self) -> str:
        return self.leases.instance

    @property
    def ready(self) -> bool:
        """Joined: the others can see this instance as an owner."""
        return self.leases.joined

    def ownership(self, storage: SessionCopies, archive: TakeOver | None) -> LeasedOwnership:
        """The session runtime's leases, stale-copy check and journal (archive: the take-over)."""
        return LeasedOwnership(self.leases, storage, archive, self.journal)

    def archive_fencing(self) -> ArchiveFencing:
        return ArchiveFencing(
            lease_epoch=self.leases.held_epoch, on_lease_lost=self.lease_lost, on_published=self.journal.prune_published
        )

    def job_lease(self, session_id: str) -> tuple[int | None, ...]:
        """What a publish job sent to a sync worker carries: the lease epoch held now (None when none is)."""
        return (self.leases.held_epoch(session_id),)

    def relay_membership(self) -> RelayMembership | None:
        """Who this instance is to the executor relay (runtime tools across the fleet, over the
        Redis that BRAIN_CHANNEL_REDIS names, sealed under the fleet secret); None without that
        Redis: an executor then serves only sessions its own instance owns."""
        url = self._environ.get(CHANNEL_REDIS_ENV, "").strip()
        if not url:
            logger.warning(
                "no BRAIN_CHANNEL_REDIS: runtime tools serve only the sessions their executor's instance owns",
                extra={"instance": self.instance},
            )
            return None
        leases = self.leases

        async def member(instance: str, incarnation: str) -> str | None:
            return await db.amember_url(instance, incarnation=incarnation, using=leases.database)

        return RelayMembership(url, leases.instance, leases.incarnation, self.secret.key, member)

    def adopt_relay(self, relay: Relay) -> None:
        """The executor relay built for relay_membership(): started and stopped with the fleet."""
        self.relay = relay

    def start(self) -> None:
        """Join and renew in the background; the executor relay starts listening."""
        self._task = asyncio.get_running_loop().create_task(self._member(), name="brain-fleet")
        if self.relay is not None:
            self.relay.start()

    async def _member(self) -> None:
        """Join (again every JOIN_RETRY_SECONDS while the name is taken by a live process or the
        database is out of reach), then renew the leases until stopped; sessions another
        instance took are unloaded without writing."""
        leases = self.leases
        await leases.join_retrying(retry_seconds=JOIN_RETRY_SECONDS)
        logger.info("joined the fleet", extra={"instance": leases.instance, "url": leases.url})

        def on_lost(session_ids: frozenset[str]) -> None:
            logger.warning("sessions taken by another instance", extra={"sessions": sorted(session_ids)})
            self._drop(session_ids)

        await leases.run_renewals(on_lost)

    def lease_lost(self, session_id: str) -> None:
        """The archive refused a publish for a newer owner: stop writing the session and unload it."""
        logger.warning("session publish fenced; dropping it", extra={"session_id": session_id})
        self.leases.forget(session_id)
        self._drop(frozenset({session_id}))

    def begin_leaving(self) -> None:
        self.leases.draining = True  # at once: nothing more is acquired here

    async def mark_draining(self) -> None:
        """Tell the others this instance drains, so its released sessions go elsewhere."""
        try:
            await self.leases.set_draining(True)
        except Exception as exc:  # the database: the others then learn it when it leaves
            logger.warning("marking the instance draining failed", extra={"error": str(exc)})

    async def hand_off(self, release: HandOff) -> None:
        await release(self.leases)

    async def stop(self) -> None:
        """Stop the relay, stop renewing, release what is left and leave (so routing skips the
        instance at once), and close the router's connections to the others."""
        if self.relay is not None:
            await self.relay.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.leases.leave_quietly()
        await self.router.aclose()

    async def route(
        self, brain: RoutedAppObject, scope: Scope, receive: Receive, send: Send, *, limit: int
    ) -> Receive | None:
        """Session and executor requests go to their owner (fleet_app.routing): the receive to
        serve the request here with, or None when it was answered (forwarded or refused)."""
        return await self.router.route(brain, self.leases, scope, receive, send, limit=limit)


class SoloFleet:
    """No `cluster` block: one instance alone, owner of every session it serves."""

    def __init__(self) -> None:
        self.leases = SoloLeases()
        self.journal = SoloJournal()

    @property
    def is_fleet(self) -> bool:
        return False

    @property
    def instance(self) -> None:
        return None

    @property
    def relay(self) -> None:
        return None

    @property
    def ready(self) -> bool:
        return True

    def archive_fencing(self) -> ArchiveFencing:
        return ArchiveFencing()

    def ownership(self, storage: SessionCopies, archive: TakeOver | None) -> SoloOwnership:
        return SoloOwnership()

    def job_lease(self, session_id: str) -> tuple[int | None, ...]:
        return ()

    def relay_membership(self) -> None:
        return None

    def adopt_relay(self, relay: Relay) -> None:
        raise RuntimeError("one instance alone has no executor relay")

    def start(self) -> None:
        pass

    def begin_leaving(self) -> None:
        pass

    async def mark_draining(self) -> None:
        pass

    async def hand_off(self, release: HandOff) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def route(self, brain: RoutedAppObject, scope: Scope, receive: Receive, send: Send, *, limit: int) -> Receive:
        return receive


def build_fleet(
    cluster: ClusterConfig | None, secret: FleetSecret | None, *, telemetry: Telemetry, drop: Drop
) -> Fleet | SoloFleet:
    """The fleet a host config's `cluster` block describes, else the solo stand-in."""
    if cluster is None:
        return SoloFleet()
    if secret is None:  # never: check_cluster requires BRAIN_FLEET_SECRET with a `cluster` block
        raise RuntimeError("a fleet needs the fleet secret")
    return Fleet(cluster, secret, telemetry=telemetry, drop=drop)
