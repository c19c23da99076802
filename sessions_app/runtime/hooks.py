"""What the engine needs from persistence, as a protocol: persistence_app's ArchiveService
satisfies it and is handed to the engine when it is built. No imports of persistence_app."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from sessions_app.records import SessionRecord

__all__ = ["ArchiveHooks"]


class ArchiveHooks(Protocol):
    """External persistence as the engine sees it (persistence_app's ArchiveService), given to
    the engine when it is built."""

    def mark_dirty(self, session_id: str) -> None:
        """The session's state changed: it is due for background sync."""

    @property
    def backlog_full(self) -> bool: ...

    async def cold_load(self, tenant: str, session_id: str) -> bool:
        """Load a session that is not on local disk from the archive into it: True when it did."""

    async def remove(self, session_id: str, local: Callable[[], None]) -> None:
        """A deleted session: remove `latest` and its index entry, run `local` (its rows and
        files, blocking) under the same lock as a publish's `latest`, then its archived objects."""

    async def list_remote(self, tenant: str, after: str, limit: int) -> list[SessionRecord]:
        """Sessions other servers published, from the discovery index."""
