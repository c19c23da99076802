"""One attached session inside the host: its settings, native state and running turn."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from runners.protocol import Frame

from .settings import SessionSettings
from .state import NativeState

__all__ = ["AttachedSession"]


@dataclass(slots=True)
class AttachedSession:
    attachment_id: str
    settings: SessionSettings
    state: NativeState
    turn_id: str | None = None
    turn_task: asyncio.Task[None] | None = None
    prompt_frame: Frame | None = None
    steers: list[str] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.turn_task is not None and not self.turn_task.done()

    def take_steers(self) -> list[str]:
        steers, self.steers = self.steers, []
        return steers

    async def stop_turn(self) -> bool:
        """Cancel the running turn (stream and pending tool calls) and wait until it settled.

        True when the task died before it could send its own prompt reply.
        """
        task = self.turn_task
        if task is None or task.done():
            return False
        task.cancel(msg="interrupted")
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled()
