"""`limits.active`: the server's turn slots, and the one way a turn hands its slot back early (while
it waits on sub-agents). Knows nothing of sessions; imports no app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["TurnSlot", "TurnSlots"]


class TurnSlot:
    """One turn's hold on a slot.

    A turn that waits on child sessions (sub-agents) lends its slot back for as long as it waits:
    the children need slots of their own, and a parent holding one while it waits would, with
    `limits.active` parents each waiting on a child, leave every child queued forever. Lending is
    counted, so several children awaited in parallel release the slot once; when the last wait
    ends the turn takes a slot again (queued fairly behind other turns) before it goes on. While
    lent, the waiting turn runs nothing: its harness only waits for the tool result. This keeps
    `limits.active` a bound on turns doing work, with no capacity set aside for sub-agents that
    may never be spawned. A slot-holder never waits on a slot-less turn, so nothing can deadlock:
    every holder is a turn doing work, which ends or lends in turn.
    """

    __slots__ = ("_ended", "_held", "_lenders", "_semaphore")

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self._held = True
        self._lenders = 0
        self._ended = False  # the turn is over: a wait still lending never takes a slot again

    @property
    def held(self) -> bool:
        return self._held

    def end(self) -> None:
        self._ended = True
        self._give_back()

    def _give_back(self) -> None:
        if self._held:
            self._held = False
            self._semaphore.release()

    @contextlib.asynccontextmanager
    async def lent(self) -> AsyncIterator[None]:
        """Hand the slot back while the block runs; take one again once no block lends it."""
        self._lenders += 1
        self._give_back()
        try:
            yield
        finally:
            self._lenders -= 1
            if self._lenders == 0 and not self._held and not self._ended:
                # cancelled here, the turn ends without a slot: `hold` then has nothing to release
                await self._semaphore.acquire()
                if self._lenders or self._ended:  # a new wait lends it on, or the turn ended meanwhile
                    self._semaphore.release()
                else:
                    self._held = True


class TurnSlots:
    """At most `size` turns hold a slot; the others wait in arrival order."""

    def __init__(self, size: int) -> None:
        self._semaphore = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[TurnSlot]:
        await self._semaphore.acquire()
        slot = TurnSlot(self._semaphore)
        try:
            yield slot
        finally:
            slot.end()
