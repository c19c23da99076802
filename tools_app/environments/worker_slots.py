"""Slots for a brain environment's component calls on this instance: at most `workers` run at
once, at most `tenant_workers` of them for one tenant. A call waits for a slot (first its
tenant's, then the environment's, so a tenant's backlog queues behind its own calls, not in
front of other tenants') up to a bound, and runs nothing if none frees in time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["NoWorkerFree", "WorkerSlots"]


class NoWorkerFree(Exception):
    """No slot freed within the wait; the call did not run."""


class WorkerSlots:
    def __init__(self, *, workers: int, tenant_workers: int) -> None:
        self.workers = workers
        self.tenant_workers = tenant_workers
        self._all = asyncio.Semaphore(workers)
        self._tenants: dict[str, asyncio.Semaphore] = {}  # the environment's tenants: bounded by the config

    @contextlib.asynccontextmanager
    async def held(self, tenant: str, *, wait_s: float) -> AsyncIterator[None]:
        share = self._tenants.setdefault(tenant, asyncio.Semaphore(self.tenant_workers))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            async with asyncio.timeout_at(deadline):
                await share.acquire()
        except TimeoutError:
            raise NoWorkerFree(
                f"{self.tenant_workers} calls of this tenant are already running here; nothing ran"
            ) from None
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._all.acquire()
            except TimeoutError:
                raise NoWorkerFree(f"all {self.workers} workers are busy; nothing ran") from None
            try:
                yield
            finally:
                self._all.release()
        finally:
            share.release()
