"""The steers of one running turn: `delivery: "steer"` messages recorded while it runs, sent to
its harness with the protocol's `steer` request, in the order they were accepted, once the
turn's prompt is out.

A steer the harness took is part of its turn: it settles with it (README, "Steering a running
turn"). One it did not take (refused, or still on its way when the turn ended) runs as an
ordinary input right after the turn; the steers of a turn that does not complete are cancelled
with the queued inputs, as their turn's work is undone.
"""

from __future__ import annotations

import asyncio

from sessions_app.harness.host import HostLost, RunnerError
from sessions_app.harness.pool import Attachment

from .session_host import PendingInput

__all__ = ["STEER_TIMEOUT_SECONDS", "TurnSteers"]

# A runner answers a steer at once (it only queues the text for its next model request); one
# that has not answered in this long has not taken it, and the steer runs after the turn.
STEER_TIMEOUT_SECONDS = 30.0


class TurnSteers:
    """The steers recorded into one turn, each delivered after the one before it."""

    def __init__(self, turn: str) -> None:
        self.turn = turn
        self.open = True  # False once the harness's turn is over: later steers queue as inputs
        self._attachment: Attachment | None = None
        self._prompted = asyncio.Event()
        self._steers: list[tuple[PendingInput, asyncio.Task[bool]]] = []

    def __len__(self) -> int:
        return len(self._steers)

    def prompted(self, attachment: Attachment) -> None:
        """The turn's prompt is about to be written on `attachment`: steers may follow it (each
        waiting task runs after the prompt request's first step, which writes its frame)."""
        self._attachment = attachment
        self._prompted.set()

    def add(self, steer: PendingInput) -> None:
        previous = self._steers[-1][1] if self._steers else None
        task = asyncio.get_running_loop().create_task(self._deliver(steer, previous), name=f"steer-{steer.id}")
        self._steers.append((steer, task))

    async def _deliver(self, steer: PendingInput, previous: asyncio.Task[bool] | None) -> bool:
        """True once the harness took the steer; False when it refused it or never answered."""
        await self._prompted.wait()
        if previous is not None:
            await asyncio.wait([previous])  # in order; its outcome is its own
        assert self._attachment is not None
        try:
            await self._attachment.request("steer", {"text": steer.text}, turn=self.turn, timeout=STEER_TIMEOUT_SECONDS)
        except (RunnerError, HostLost, TimeoutError):
            return False
        return True

    def untaken(self) -> list[PendingInput]:
        """At the end of a completed turn: the steers its harness did not take, in order.

        Replies are read in the order the runner wrote them, so a steer it took before it ended
        the turn has its answer in before the prompt's, and its task finished first (each woken
        in turn). What is still on its way is stopped: a late reply is dropped by the host."""
        left = []
        for steer, task in self._steers:
            if task.done() and not task.cancelled() and task.exception() is None and task.result():
                continue
            task.cancel()
            left.append(steer)
        self._steers = []
        return left

    def drop(self) -> list[PendingInput]:
        """At the end of a turn that did not complete: every steer, none of them delivered any longer."""
        steers = [steer for steer, task in self._steers]
        for _, task in self._steers:
            task.cancel()
        self._steers = []
        return steers
