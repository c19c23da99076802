"""Committed extension events: what a placed tool's implementation emits while it runs (a host
function's `ctx.emit` through its executor's replies, a component's host import).

Each is checked by the one rule of extension events (toolkits.events: its kind's shape, its data's
encoded size, the call's count) and appended to the session's log as a retained `tool.event` tied
to the call before the emitter is answered, so an emitter that continues knows the event is in the
log; late subscribers replay it like any retained event. Imports no runtime or API module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from toolkits.events import EVENT_KIND, MAX_EVENT_BYTES, MAX_EVENTS_PER_CALL, event_refusal, too_many_events

__all__ = [
    "EVENT_KIND",
    "MAX_EVENT_BYTES",
    "MAX_EVENTS_PER_CALL",
    "TOOL_EVENT",
    "CallEvents",
    "EmitRefused",
    "Emitter",
]

TOOL_EVENT = "tool.event"  # the retained event type

# Appends one retained event of the running call's turn (raises OSError or RecordTooLarge).
Recorder = Callable[[str, object], None]
# What an implementation awaits: returns once the event is committed; raises EmitRefused.
Emitter = Callable[[str, object], Awaitable[None]]


class EmitRefused(Exception):
    """An event that is not appended: a bad kind, data too large, too many, or the call is over."""


class CallEvents:
    """The extension events of one call."""

    def __init__(self, record: Recorder, *, call_id: str, environment: str) -> None:
        self._record = record
        self._call_id = call_id
        self._environment = environment
        self._count = 0
        self._open = True

    def close(self) -> None:
        """The call ended: later emits are refused (its tool.result is already recorded)."""
        self._open = False

    async def emit(self, kind: str, data: object) -> None:
        if not self._open:
            raise EmitRefused("the call is over: its events can no longer be recorded")
        refusal = event_refusal(kind, data) or too_many_events(self._count)
        if refusal is not None:
            raise EmitRefused(refusal)
        self._count += 1
        body = {"call_id": self._call_id, "environment": self._environment, "kind": kind, "data": data}
        try:
            self._record(TOOL_EVENT, body)
        except Exception as exc:  # OSError, RecordTooLarge: the turn fails; the emitter hears why
            raise EmitRefused(f"the event could not be recorded: {type(exc).__name__}") from None
