"""`session_reads`: authorized reads of the calling session, its public metadata (`status`) and
bounded pages of its retained events (`history`).

The call carries a SessionView of its own session only (the application injects it), so there is
no way to name another session; the binding takes no parameters. Neither operation returns
credentials or native files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson
from pydantic import Field

from runners.protocol import ToolDescriptor

from .base import ProviderCall, ProviderEnvironment, ProviderError, ToolProvider
from .options import CommonOptions, parse_parameterless_options, select_parameterless

__all__ = ["SessionReadsOptions", "SessionReadsProvider"]

MAX_CURSOR_CHARS = 512  # spec: cursors are at most 512 bytes
DEFAULT_PAGE_EVENTS = 50
MAX_PAGE_EVENTS = 1000  # spec: an event page holds at most 1,000 events
DEFAULT_READ_BYTES = 256 * 1024  # a history page the model reads stays small


class SessionReadsOptions(CommonOptions):
    max_events: int = Field(default=DEFAULT_PAGE_EVENTS, ge=1, le=MAX_PAGE_EVENTS)
    max_output_bytes: int = Field(default=DEFAULT_READ_BYTES, ge=1024, le=2 << 20)


def _operations(max_events: int) -> dict[str, ToolDescriptor]:
    return {
        "status": {
            "name": "status",
            "description": "Read this session's status and public metadata.",
            "input_schema": {"type": "object", "properties": {}, "additionalProperties": False},
        },
        "history": {
            "name": "history",
            "description": "Read this session's events in order, a page at a time. Pass the returned "
            "next_cursor as `after` to continue.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "after": {"type": "string", "maxLength": MAX_CURSOR_CHARS},
                    "limit": {"type": "integer", "minimum": 1, "maximum": max_events},
                },
                "additionalProperties": False,
            },
        },
    }


class SessionReadsProvider(ToolProvider):
    reads_session = True

    def __init__(
        self, name: str, options: Mapping[str, object], *, environment: ProviderEnvironment | None = None
    ) -> None:
        super().__init__(name, options, environment=environment)
        self.settings = parse_parameterless_options(SessionReadsOptions, options, kind="session_reads")
        self._served = _operations(self.settings.max_events)

    async def bind(self, *, tenant: str, operations: Sequence[str], parameters: object) -> list[ToolDescriptor]:
        return select_parameterless(self._served, operations, parameters, kind="session_reads")

    async def handle(self, call: ProviderCall) -> object:
        if call.session is None:
            raise ProviderError("the calling session is not readable here", reached=False)
        if call.operation == "status":
            return {"content": [], "structured_content": await call.session.status()}
        after = str(call.arguments.get("after", ""))  # a string and an integer: the descriptor's types
        limit = call.arguments.get("limit")
        limit = int(limit) if isinstance(limit, int | float) else self.settings.max_events  # 2.0 is an integer too
        try:
            events, next_cursor = await call.session.events(after=after, limit=limit)
        except ValueError as exc:
            return {"content": [{"type": "text", "text": str(exc)}], "is_error": True}
        return {"content": [], "structured_content": self._page(events, after=after, next_cursor=next_cursor)}

    def _page(self, events: list[dict[str, object]], *, after: str, next_cursor: str) -> dict[str, object]:
        """The page cut to max_output_bytes (the result is rendered twice: structured and as
        text), keeping whole events; next_cursor continues after the last one kept. An event
        larger than a page on its own comes without its data, marked `truncated`."""
        budget = self.settings.max_output_bytes // 2 - 256
        kept: list[dict[str, object]] = []
        used = 0
        for event in events:
            size = len(orjson.dumps(event)) + 1
            if size > budget and not kept:  # one event larger than a page: its envelope without data
                event = {key: event[key] for key in ("id", "type", "time", "input_id", "cursor") if key in event}
                event["truncated"] = True
                size = len(orjson.dumps(event)) + 1
            if used + size > budget:
                break
            kept.append(event)
            used += size
        if len(kept) < len(events):
            next_cursor = str(kept[-1].get("cursor", after)) if kept else after
        return {"events": kept, "next_cursor": next_cursor, "complete": len(kept) == len(events)}
