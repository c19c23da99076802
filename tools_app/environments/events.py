"""Committed extension events: what a placed tool's implementation emits while it runs (a host
function's `ctx.emit` through its executor's replies, a component's host import).

Each is checked (its kind's shape, its data's encoded size, the call's count) and appended to the
session's log as a retained `tool.event` tied to the call before the emitter is answered, so an
emitter that continues knows the event is in the log; late subscribers replay it like any
retained event. Imports no runtime or API module.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import orjson

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
EVENT_KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")  # a kind is a short lowercase name
MAX_EVENT_BYTES = 16 * 1024  # of one event's data, encoded: events are records, not payloads
MAX_EVENTS_PER_CALL = 64  # per call: a loop that emits without end cannot fill the log

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
        if not isinstance(kind, str) or not EVENT_KIND.fullmatch(kind):
            raise EmitRefused("an event kind is 1-64 of a-z 0-9 _ . - starting with a letter")
        try:
            size = len(orjson.dumps(data))
        except TypeError as exc:
            raise EmitRefused(f"event data is not JSON: {exc}") from None
        if size > MAX_EVENT_BYTES:
            raise EmitRefused(f"event data of {size} bytes exceeds {MAX_EVENT_BYTES}")
        if self._count >= MAX_EVENTS_PER_CALL:
            raise EmitRefused(f"a call emits at most {MAX_EVENTS_PER_CALL} events")
        self._count += 1
        body = {"call_id": self._call_id, "environment": self._environment, "kind": kind, "data": data}
        try:
            self._record(TOOL_EVENT, body)
        except Exception as exc:  # OSError, RecordTooLarge: the turn fails; the emitter hears why
            raise EmitRefused(f"the event could not be recorded: {type(exc).__name__}") from None
