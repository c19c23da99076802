"""Hosts of one harness: share them between sessions within max_shared, max_hosts, max_starting."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.hostconfig import Harness
from foundation.telemetry import Telemetry
from runners.media import MediaSupport, media_support
from runners.protocol import OpenParams

from .host import AttachmentHandler, HarnessHost, HostLost, RunnerError

__all__ = ["Attachment", "HostPool", "HostUnavailable"]

OPEN_TIMEOUT_SECONDS = 30.0  # spec: the initial `open` request has a 30-second timeout
DETACH_TIMEOUT_SECONDS = 10.0  # a settled attachment that does not detach in time is dropped
CAPACITY_WAIT_SECONDS = 30.0  # how long an attach waits for a host slot before failing the turn


class HostUnavailable(Exception):
    """No host could take the attachment (spawn failure, or every host stayed full)."""


@dataclass(slots=True)
class Attachment:
    id: str
    host: HarnessHost
    media: MediaSupport | None = None  # the images its open result says the model takes (None: none)

    async def request(self, method: str, params: Any, *, turn: str = "", timeout: float | None = None) -> Any:
        return await self.host.request(self.id, method, params, turn=turn, timeout=timeout)


class HostPool:
    def __init__(self, name: str, config: Harness, *, workroot: Path, telemetry: Telemetry) -> None:
        self.name = name
        self._telemetry = telemetry
        self.config = config
        self.workroot = workroot
        self.hosts: list[HarnessHost] = []
        self._starting = asyncio.Semaphore(config.max_starting)
        self._starts: dict[HarnessHost, asyncio.Task[None]] = {}  # hosts still starting, already in self.hosts
        self._capacity_changed = asyncio.Event()

    def _choose(self, tenant: str) -> HarnessHost | None:
        candidates = [
            h for h in self.hosts if h.tenant == tenant and not h.lost and len(h.attachments) < self.config.max_shared
        ]
        return min(candidates, key=lambda h: len(h.attachments), default=None)

    async def attach(self, handler: AttachmentHandler, open_params: OpenParams, *, tenant: str) -> Attachment:
        """Open a session on a host of its tenant with room, starting a host when allowed.
        Hosts are never shared across tenants: one tenant's runner never sees another's sessions."""
        host = await self._reserve_host(tenant)
        attachment = Attachment(secrets.token_hex(8), host)
        host.attachments[attachment.id] = handler
        try:
            await self._started(host)
            opened = await attachment.request("open", open_params, timeout=OPEN_TIMEOUT_SECONDS)
        except BaseException:
            host.forget(attachment.id)
            await self._release_if_empty(host)
            raise
        attachment.media = media_support(opened.get("media")) if isinstance(opened, dict) else None
        if host.spawned_at:  # the host's first reply: it has started
            self._telemetry.record_runner_startup(self.name, time.monotonic() - host.spawned_at)
            host.spawned_at = 0.0
        return attachment

    async def _reserve_host(self, tenant: str) -> HarnessHost:
        """A host of the tenant with a free slot: a running one, one still starting (its slot is
        taken at once, so sessions arriving together share it), or a new one within max_hosts."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CAPACITY_WAIT_SECONDS
        while True:
            host = self._choose(tenant)
            if host is not None:
                return host
            if len(self.hosts) < self.config.max_hosts:
                return self._spawn(tenant)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise HostUnavailable(f"every {self.name} host is full")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._capacity_changed.wait(), remaining)

    def _spawn(self, tenant: str) -> HarnessHost:
        host = HarnessHost(
            harness=self.name,
            tenant=tenant,
            command=self.config.command,
            workdir=self.workroot / f"{self.name}-{secrets.token_hex(4)}",
            max_shared=self.config.max_shared,
            max_active_turns=self.config.active_turns,
            on_exit=self._on_host_exit,
        )
        self.hosts.append(host)
        self._starts[host] = asyncio.get_running_loop().create_task(self._start(host), name=f"{self.name}-host-start")
        return host

    async def _start(self, host: HarnessHost) -> None:
        try:
            async with self._starting:
                await host.start()
        except OSError as exc:
            if host in self.hosts:
                self.hosts.remove(host)
            raise HostUnavailable(f"cannot start harness {self.name}: {exc.strerror or exc}") from exc
        finally:
            self._starts.pop(host, None)
            self._notify_capacity()  # waiters see the new host's free slots, or may spawn again

    async def _started(self, host: HarnessHost) -> None:
        """Wait for a starting host; shielded, so one waiter's cancellation leaves the start to the others."""
        start = self._starts.get(host)
        if start is not None:
            await asyncio.shield(start)

    def _on_host_exit(self, host: HarnessHost) -> None:
        if host in self.hosts:
            self.hosts.remove(host)
        self._notify_capacity()

    def _notify_capacity(self) -> None:
        changed, self._capacity_changed = self._capacity_changed, asyncio.Event()
        changed.set()

    async def detach(self, attachment: Attachment) -> None:
        """Release a settled attachment; the last detach closes the host."""
        host = attachment.host
        if attachment.id in host.attachments and not host.lost:
            with contextlib.suppress(RunnerError, HostLost, TimeoutError):
                await attachment.request("detach", None, timeout=DETACH_TIMEOUT_SECONDS)
        host.forget(attachment.id)
        await self._release_if_empty(host)

    async def _release_if_empty(self, host: HarnessHost) -> None:
        if not host.attachments:
            with contextlib.suppress(Exception):
                await self._started(host)  # a host stopped while it starts would leave its process behind
            if host in self.hosts:
                self.hosts.remove(host)
            await host.stop()
        self._notify_capacity()

    async def close(self) -> None:
        await asyncio.gather(*self._starts.values(), return_exceptions=True)
        hosts, self.hosts = list(self.hosts), []
        await asyncio.gather(*(host.stop() for host in hosts), return_exceptions=True)
