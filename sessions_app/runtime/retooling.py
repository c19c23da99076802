"""The tool descriptors a session.configure that sets `tools` gives its session, for a change
sent now and for one a new owner takes from the input journal."""

from __future__ import annotations

from typing import Any

from foundation.errors import InvalidRequest
from sessions_app.records import SessionRecord
from tools_app.registry import ToolRegistry

from .ownership import JournalBacklog
from .session_host import ConfigChange

__all__ = ["CONFIGURE", "change_descriptors", "journaled_changes"]

CONFIGURE = "session.configure"


async def change_descriptors(registry: ToolRegistry, record: SessionRecord, tools: list[str]) -> list[Any] | None:
    """The session's descriptors with `tools` for its configured tools: its bindings' tools kept,
    a name of theirs refused (InvalidRequest); None when the tenant may not use one of `tools`."""
    configured = set(record.config.get("tools", ()))
    bound = [descriptor for descriptor in record.descriptors if descriptor["name"] not in configured]
    taken = sorted({descriptor["name"] for descriptor in bound} & set(tools))
    if taken:
        raise InvalidRequest(f"tool {taken[0]!r} is the name of one of the session's binding tools")
    descriptors = await registry.adescriptors_for(record.tenant, tools)
    if descriptors is None:
        return None
    return [*descriptors, *bound]


async def journaled_changes(
    registry: ToolRegistry, record: SessionRecord, backlog: JournalBacklog | None
) -> dict[str, ConfigChange | str]:
    """The changes a dead owner journaled that never applied, by input id, ready to queue again;
    a string for one that can no longer apply (why)."""
    changes: dict[str, ConfigChange | str] = {}
    for entry in backlog.requeue if backlog is not None else ():
        if entry.payload.get("type") != CONFIGURE:
            continue
        fields = entry.payload.get("config")
        if not isinstance(fields, dict) or not fields:
            changes[entry.input_id] = "its journal entry is damaged"
            continue
        descriptors = None
        if "tools" in fields:
            try:
                descriptors = await change_descriptors(registry, record, list(fields["tools"]))
            except InvalidRequest as exc:
                changes[entry.input_id] = exc.message
                continue
            if descriptors is None:
                changes[entry.input_id] = "a tool it names is no longer available to the tenant"
                continue
        key = entry.payload.get("key")
        changes[entry.input_id] = ConfigChange(fields, descriptors, key if isinstance(key, str) else None)
    return changes
