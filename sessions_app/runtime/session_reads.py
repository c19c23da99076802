"""The calling session as installed tool providers may read it (tools_app's SessionView): its
public metadata and pages of its retained events. One view per loaded session, bound to it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from foundation.errors import CursorUnavailable
from sessions_app.eventlog import EventLog
from sessions_app.records import SessionRecord

__all__ = ["OwnSession"]


def _page(log: EventLog, after: str, *, end: int, limit: int) -> tuple[list[dict[str, Any]], str]:
    try:
        start = log.position_after(after)
    except CursorUnavailable as exc:
        raise ValueError(exc.message) from None
    events = log.read(start, end=end, limit=limit)
    return [event.as_dict() for event in events], events[-1].cursor if events else after


class OwnSession:
    """`record` and `log` give the session's current record and event log (None once it is no
    longer loaded here); nothing else is reachable from it."""

    def __init__(self, record: Callable[[], SessionRecord | None], log: Callable[[], EventLog | None]) -> None:
        self._record = record
        self._log = log

    async def status(self) -> dict[str, Any]:
        record = self._record()
        if record is None:
            raise ValueError("the session is not loaded")
        # the model has the descriptors already; they can be large
        return {key: value for key, value in record.as_wire().items() if key != "descriptors"}

    async def events(self, *, after: str, limit: int) -> tuple[list[dict[str, Any]], str]:
        log = self._log()
        if log is None:
            raise ValueError("the session is not loaded")
        # the end is fixed on the loop, as for GET /sessions/{id}/events
        return await asyncio.to_thread(_page, log, after, end=log.size, limit=limit)
