"""Bounded fan-out of ready-made SSE frames. Publishing never awaits a subscriber."""

from __future__ import annotations

import asyncio
from collections import deque

from foundation.errors import Overloaded

__all__ = ["EVENT_OVERHEAD_BYTES", "Fanout", "Subscriber", "SubscriberSlots"]

EVENT_OVERHEAD_BYTES = 256  # spec: each buffered event accounts for len(data) + 256 bytes


class Subscriber:
    """One SSE stream's live buffer. Overflow closes it; the client reconnects with a cursor."""

    __slots__ = ("_frames", "_buffered_bytes", "_max_events", "_max_bytes", "_wakeup", "closed", "overflowed")

    def __init__(self, *, max_events: int, max_bytes: int) -> None:
        self._frames: deque[tuple[bytes, int]] = deque()
        self._buffered_bytes = 0
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._wakeup = asyncio.Event()
        self.closed = False
        self.overflowed = False

    def offer(self, frame: bytes, data_bytes: int) -> None:
        if self.closed:
            return
        cost = data_bytes + EVENT_OVERHEAD_BYTES
        if len(self._frames) >= self._max_events or self._buffered_bytes + cost > self._max_bytes:
            self.overflowed = True
            self.close()
            return
        self._frames.append((frame, cost))
        self._buffered_bytes += cost
        self._wakeup.set()

    def close(self) -> None:
        self.closed = True
        self._wakeup.set()

    def drain(self) -> list[bytes]:
        """Everything buffered, in order."""
        frames = [frame for frame, _ in self._frames]
        self._frames.clear()
        self._buffered_bytes = 0
        self._wakeup.clear()
        return frames

    async def wait(self, timeout: float) -> bool:
        """Wait until frames arrive or the stream closes; False on timeout."""
        if self._frames or self.closed:
            return True
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Fanout:
    """One session's live subscribers: each frame is offered to all; an overflowed one leaves."""

    __slots__ = ("_subscribers",)

    def __init__(self) -> None:
        self._subscribers: set[Subscriber] = set()

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def add(self, subscriber: Subscriber) -> None:
        self._subscribers.add(subscriber)

    def discard(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def publish(self, frame: bytes) -> None:
        for subscriber in list(self._subscribers):
            subscriber.offer(frame, len(frame))
            if subscriber.closed:
                self._subscribers.discard(subscriber)

    def close_all(self) -> None:
        """End every stream (the session closed, is replaced, or the server stops)."""
        for subscriber in self._subscribers:
            subscriber.close()
        self._subscribers.clear()


class SubscriberSlots:
    """The server-wide `limits.subscribers` bound on open SSE streams."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def acquire(self) -> None:
        if self.open >= self.limit:
            raise Overloaded("too many open event streams")
        self.open += 1

    def release(self) -> None:
        self.open -= 1
