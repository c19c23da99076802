"""The one rule of a placed call's extension event (a `tool.event`), whoever emits it: a host
function through its executor, a tool service, a WebAssembly component. Brain's commit
(tools_app.environments.events) and the component runner (toolkits.wasm) both check it here, so
an event one accepts the other never refuses. Imports nothing of the server."""

from __future__ import annotations

import re

import orjson

__all__ = [
    "EVENT_KIND",
    "EVENT_KIND_PATTERN",
    "KIND_RULE",
    "MAX_EVENTS_PER_CALL",
    "MAX_EVENT_BYTES",
    "event_refusal",
    "too_many_events",
]

# A kind is a short lowercase name (the served ToolEvent schema publishes this pattern).
EVENT_KIND_PATTERN = r"^[a-z][a-z0-9_.-]{0,63}$"
EVENT_KIND = re.compile(EVENT_KIND_PATTERN)
KIND_RULE = "an event kind is 1-64 of a-z 0-9 _ . - starting with a letter"
MAX_EVENT_BYTES = 16 * 1024  # of one event's data, encoded: events are records, not payloads
MAX_EVENTS_PER_CALL = 64  # per call: a loop that emits without end cannot fill the log


def event_refusal(kind: object, data: object) -> str | None:
    """Why one event breaks the rule (its kind; its data, not JSON or over MAX_EVENT_BYTES
    encoded), or None. The count per call is the caller's (`too_many_events`)."""
    if not isinstance(kind, str) or not EVENT_KIND.fullmatch(kind):
        return KIND_RULE
    try:
        size = len(orjson.dumps(data))
    except TypeError as exc:
        return f"event data is not JSON: {exc}"
    if size > MAX_EVENT_BYTES:
        return f"event data of {size} bytes exceeds {MAX_EVENT_BYTES}"
    return None


def too_many_events(committed: int) -> str | None:
    """Why a call that committed `committed` events may not emit another, or None."""
    return f"a call emits at most {MAX_EVENTS_PER_CALL} events" if committed >= MAX_EVENTS_PER_CALL else None
