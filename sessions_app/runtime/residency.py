"""Where loaded sessions run: the harness host pools, the LRU of resident attachments, and each
session's attachment. Knows sessions only as AttachmentHandlers with an id and a harness.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from foundation.hostconfig import Harness
from foundation.hostconfig.provider_keys import ProviderKeys, credential_fingerprint
from foundation.telemetry import Telemetry
from runners.protocol import OpenParams
from sessions_app.harness.host import AttachmentHandler
from sessions_app.harness.pool import Attachment, HostPool

__all__ = ["Resident", "Residency"]


class Resident(AttachmentHandler, Protocol):
    """A session as residency sees it."""

    @property
    def id(self) -> str: ...

    @property
    def harness(self) -> str: ...

    @property
    def tenant(self) -> str: ...

    @property
    def turn_running(self) -> bool: ...


@dataclass(slots=True)
class _Residence:
    resident: Resident
    attachment: Attachment
    open_params: Callable[[], OpenParams]
    credential: str  # fingerprint of the provider options and configuration the runner was opened with


def _credential(params: OpenParams) -> str:
    """The provider options' fingerprint, and the configuration's: a key rotated or a
    session.configure applied since the runner opened makes it stale."""
    configured = json.dumps([params["config"], params["tools"]], sort_keys=True, default=str)
    return credential_fingerprint(params["provider"]) + hashlib.sha256(configured.encode()).hexdigest()


def _stale(residence: _Residence) -> bool:
    """Opened with provider options (a key) or a configuration other than the current ones."""
    return residence.credential != _credential(residence.open_params())


class Residency:
    """At most `max_resident` sessions stay attached; the least recently used idle one makes room."""

    def __init__(
        self,
        harnesses: Mapping[str, Harness],
        *,
        workroot: Path,
        max_resident: int,
        telemetry: Telemetry,
        track: Callable[[asyncio.Task[None]], None],
    ) -> None:
        self.pools = {
            name: HostPool(name, harness, workroot=workroot, telemetry=telemetry) for name, harness in harnesses.items()
        }
        self._max_resident = max_resident
        self._residences: OrderedDict[str, _Residence] = OrderedDict()  # least recently used first
        self._track = track

    @property
    def attached(self) -> int:
        return len(self._residences)

    @property
    def hosts(self) -> int:
        return sum(len(pool.hosts) for pool in self.pools.values())

    def attachment_of(self, resident: Resident) -> Attachment | None:
        residence = self._residences.get(resident.id)
        if residence is None or residence.attachment.host.lost:
            return None
        return residence.attachment

    async def attach(self, resident: Resident, open_params: Callable[[], OpenParams]) -> Attachment:
        """The session's attachment, opening one (passively, from native/) when needed. One
        opened with a provider key or a configuration (session.configure) that has changed
        since is recycled: detached, then opened
        again with the current key (spec: "recycles any idle runner using the old credential
        before the next turn")."""
        current = self.attachment_of(resident)
        params = open_params()
        if current is not None:
            if self._residences[resident.id].credential == _credential(params):
                self._residences.move_to_end(resident.id)
                return current
            await self.detach(resident)
        self._residences.pop(resident.id, None)
        while len(self._residences) >= self._max_resident:
            victim = next((r.resident for r in self._residences.values() if not r.resident.turn_running), None)
            if victim is None:
                break
            await self.detach(victim)
        attachment = await self.pools[resident.harness].attach(resident, params, tenant=resident.tenant)
        self._residences[resident.id] = _Residence(resident, attachment, open_params, _credential(params))
        return attachment

    async def follow_provider_keys(self, keys: ProviderKeys) -> None:
        """Until cancelled: when a provider key file changes, recycle the idle runners holding
        the old key at once, and the busy ones at the first check after their turn ends."""
        busy = 0

        async def on_tick(changed: frozenset[str]) -> None:
            nonlocal busy
            if changed or busy:
                busy = await self.recycle_stale()

        await keys.watch(on_tick)

    async def recycle_stale(self) -> int:
        """Detach every idle session whose runner holds a provider key that has changed (its
        host exits with its last session; the next turn opens one with the current key).
        Returns how many stale ones are still running a turn: they finish it with the key they
        have, and a later call (or their next turn's attach) recycles them."""
        busy = 0
        for session_id in [key for key, residence in self._residences.items() if _stale(residence)]:
            residence = self._residences.get(session_id)  # re-read: an earlier detach awaited
            if residence is None or not _stale(residence):
                continue
            if residence.resident.turn_running:
                busy += 1
            else:
                await self.detach(residence.resident)  # out of _residences before its first await
        return busy

    async def detach(self, resident: Resident) -> None:
        residence = self._residences.pop(resident.id, None)
        if residence is not None:
            await self.pools[resident.harness].detach(residence.attachment)

    def release(self, resident: Resident) -> None:
        """Detach in the background (a closed session)."""
        if resident.id in self._residences:
            self._track(asyncio.get_running_loop().create_task(self.detach(resident)))

    def forget(self, resident: Resident) -> None:
        """The host of the session's attachment is gone: nothing to detach."""
        self._residences.pop(resident.id, None)

    async def close(self) -> None:
        self._residences.clear()
        await asyncio.gather(*(pool.close() for pool in self.pools.values()), return_exceptions=True)
