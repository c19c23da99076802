"""A session's idempotency keys: each names the offset of the user.message that used it, so a
retried send finds its event with one seek and one line read (cheap on the loop)."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from foundation.errors import Conflict
from sessions_app.eventlog import Event, EventLog

__all__ = ["IdempotencyKeys"]


class IdempotencyKeys:
    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._offsets: dict[str, int] = {}

    def adopt(self, offsets: Mapping[str, int]) -> None:
        """The keys recovery rebuilt from the log."""
        self._offsets = dict(offsets)

    def remember(self, key: str, offset: int) -> None:
        self._offsets[key] = offset

    def previous(self, key: str, data: object) -> Event | None:
        """The user.message that used `key`, when it carried `data`; Conflict when it carried
        another message; None for a new key."""
        offset = self._offsets.get(key)
        if offset is None:
            return None
        events = self._log.read(offset, limit=1)
        if not events:
            return None
        if orjson.loads(events[0].line)["data"] != data:
            raise Conflict("idempotency key was used with a different message")
        return events[0]
