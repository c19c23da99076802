"""Where a session's events go: appended to its log (unless live-only), then published to its
live subscribers; and the outcome events the log could not take (a full disk) kept as owed.

Owed events reach the subscribers at once, so a stream sees its turn end, and are appended before
anything else at the next write that succeeds, so the history stays complete and in order.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from sessions_app.eventlog import LIVE_ONLY, Event, EventLog, LogWriteFailed, public_message

from .deltas import DeltaBudget, DeltaBuffer
from .pubsub import Fanout, Subscriber

__all__ = ["EventSink", "write_failure_message"]


def write_failure_message(exc: BaseException) -> str:
    """The session.error message of a turn whose closing events could not be appended."""
    return str(exc) if isinstance(exc, LogWriteFailed) else f"event log write failed: {public_message(exc)}"


class EventSink:
    def __init__(self, log: EventLog, subscribers: Fanout, deltas: DeltaBudget) -> None:
        self.log = log
        self.subscribers = subscribers
        self._owed: deque[Event] = deque()
        self.deltas = DeltaBuffer(deltas)  # the message in progress, for streams opened mid-message

    @property
    def owes(self) -> bool:
        return bool(self._owed)

    def emit(self, type_: str, data: Any, *, input_id: str | None = None, event_id: str = "") -> Event:
        """Record (unless live-only, and after what is owed) and publish one event. Raises
        OSError or RecordTooLarge with nothing published. An assistant.delta gets its `offset`
        and is kept for replay until its message is retained."""
        delta = type_ == "assistant.delta"
        if delta:
            data = {**data, "offset": self.deltas.streamed}
        event = Event.build(type_, data, input_id=input_id, event_id=event_id)
        if delta:
            self.deltas.add(str(data["text"]), input_id=input_id or "")
        if type_ not in LIVE_ONLY:
            self.pay_owed()
            self.log.append(event)
            if type_ == "assistant.message":
                self.deltas.clear()
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

    def subscribe(self, subscriber: Subscriber) -> tuple[int, bytes]:
        """Register a live subscriber; returns the log end it must replay up to and the text of
        the message in progress (an assistant.delta frame, or b""), to send after that replay.
        No await: every delta is in that frame or reaches the subscriber live, never both.
        Owed events follow the replay as live frames."""
        self.subscribers.add(subscriber)
        for event in self._owed:
            frame = event.sse_frame()
            subscriber.offer(frame, len(frame))
        return self.log.size, self.deltas.replay()
