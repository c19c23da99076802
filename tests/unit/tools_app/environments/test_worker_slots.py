"""A brain environment's worker slots: a tenant's share, the environment's total, a bounded wait."""

from __future__ import annotations

import asyncio

import pytest

from tools_app.environments.worker_slots import NoWorkerFree, WorkerSlots


async def _hold(slots: WorkerSlots, tenant: str, release: asyncio.Event, started: list[str], wait_s: float = 5) -> None:
    async with slots.held(tenant, wait_s=wait_s):
        started.append(tenant)
        await release.wait()


async def test_a_tenant_beyond_its_share_waits_while_another_tenant_runs() -> None:
    # given: two workers, one per tenant, and acme already running one call
    slots = WorkerSlots(workers=2, tenant_workers=1)
    release, started = asyncio.Event(), list[str]()
    first = asyncio.create_task(_hold(slots, "acme", release, started))
    await asyncio.sleep(0)
    # when: acme asks again and globex asks once
    second = asyncio.create_task(_hold(slots, "acme", release, started))
    other = asyncio.create_task(_hold(slots, "globex", release, started))
    await asyncio.sleep(0.05)
    # then: globex runs beside acme's first call; acme's second waits for its own share
    assert started == ["acme", "globex"]
    release.set()
    await asyncio.gather(first, second, other)
    assert started == ["acme", "globex", "acme"]


async def test_no_slot_within_the_wait_runs_nothing_and_says_why() -> None:
    slots = WorkerSlots(workers=1, tenant_workers=1)
    release, started = asyncio.Event(), list[str]()
    holder = asyncio.create_task(_hold(slots, "acme", release, started))
    await asyncio.sleep(0)
    with pytest.raises(NoWorkerFree, match="1 calls of this tenant are already running here; nothing ran"):
        await _hold(slots, "acme", release, started, wait_s=0.05)
    with pytest.raises(NoWorkerFree, match="all 1 workers are busy; nothing ran"):
        await _hold(slots, "globex", release, started, wait_s=0.05)
    assert started == ["acme"]
    release.set()
    await holder


async def test_waits_that_end_by_cancellation_or_refusal_give_back_every_slot() -> None:
    # given: a full environment with waiters that give up
    slots = WorkerSlots(workers=2, tenant_workers=2)
    release, started = asyncio.Event(), list[str]()
    holders = [asyncio.create_task(_hold(slots, tenant, release, started)) for tenant in ("acme", "globex")]
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(_hold(slots, "acme", release, started))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    with pytest.raises(NoWorkerFree):
        await _hold(slots, "globex", release, started, wait_s=0.01)
    release.set()
    await asyncio.gather(*holders)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    # then: both tenants can again hold their whole share at once
    release.clear()
    full = [asyncio.create_task(_hold(slots, tenant, release, started)) for tenant in ("acme", "acme")]
    await asyncio.sleep(0.01)
    assert started[-2:] == ["acme", "acme"]
    release.set()
    await asyncio.gather(*full)
