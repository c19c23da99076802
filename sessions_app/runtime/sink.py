"""Where a session's events go: appended to its log (unless live-only), then published to its
live subscribers; and the outcome events the log could not take (a full disk) kept as owed.

Owed events reach the subscribers at once, so a stream sees its turn end, and are appended before
anything else at the next write that succeeds, so the history stays complete and in order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from sessions_app.eventlog import LIVE_ONLY, Event, EventLog, LogWriteFailed, public_message

from .pubsub import Fanout, Subscriber

__all__ = ["EventSink", "write_failure_message"]


def write_failure_message(exc: BaseException) -> str:
    """The session.error message of a turn whose closing events could not be appended."""
    return str(exc) if isinstance(exc, LogWriteFailed) else f"event log write failed: {public_message(exc)}"


class EventSink:
    def __init__(self, log: EventLog, subscribers: Fanout) -> None:
        self.log = log
        self.subscribers = subscribers
        self._owed: deque[Event] = deque()

    @property
    def owes(self) -> bool:
        return bool(self._owed)

    def emit(self, type_: str, data: Any, *, input_id: str | None = None, event_id: str = "") -> Event:
        """Record (unless live-only, and after what is owed) and publish one event. Raises
        OSError or RecordTooLarge with nothing published."""
        event = Event.build(type_, data, input_id=input_id, event_id=event_id)
        if type_ not in LIVE_ONLY:
            self.pay_owed()
            self.log.append(event)
        if self.subscribers:
            self.subscribers.publish(event.sse_frame())
        return event

    def owe(self, type_: str, data: Any, *, input_id: str | None = None) -> Event:
        """An event the log cannot take now: published live at once, appended by the next write."""
        event = Event.build(type_, data, input_id=input_id)
        self._owed.append(event)
        if self.subscribers:
            self.subscribers.publish(event.sse_frame())
        return event

    def pay_owed(self) -> None:
        """Append the owed events in order; raises OSError or RecordTooLarge with the rest owed."""
        while self._owed:
            self.log.append(self._owed[0])
            self._owed.popleft()

    def subscribe(self, subscriber: Subscriber) -> int:
        """Register a live subscriber; returns the log end it must replay up to (no await: no gap).
        Owed events follow the replay as live frames."""
        self.subscribers.add(subscriber)
        for event in self._owed:
            frame = event.sse_frame()
            subscriber.offer(frame, len(frame))
        return self.log.size
