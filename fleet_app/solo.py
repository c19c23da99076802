"""One instance alone (no `cluster` block): the leases and the input journal it stands in for.

Every session is this instance's, writable at SOLO_EPOCH, never acquired, released or lost;
nothing is journaled (an input is on disk in its session's log before its 202, and nobody
takes the session over). No Django.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .lease_token import SOLO_EPOCH, LeaseFence, LeaseToken
from .receipts import JournalReceipt

__all__ = ["NOT_JOURNALED", "SoloJournal", "SoloLeases"]

NOT_JOURNALED = 0  # the journal seq of an input no journal holds


class SoloLeases:
    """Always writable, at SOLO_EPOCH; holds nothing to release or hand off."""

    instance = ""
    incarnation = ""
    joined = True

    async def acquire(self, session_id: str) -> int:
        return SOLO_EPOCH

    def held_epoch(self, session_id: str) -> int:
        return SOLO_EPOCH

    def held_token(self, session_id: str) -> LeaseToken:
        return LeaseToken(session_id, self.instance, SOLO_EPOCH)

    def fence_rows(self, session_ids: Iterable[str]) -> tuple[LeaseFence | None, set[str]]:
        return None, set()  # the rows are this instance's alone

    def own_name_epoch(self, session_id: str) -> int | None:
        return None

    def holds(self, session_id: str) -> bool:
        return True

    def held(self) -> dict[str, int]:
        return {}

    def forget(self, session_id: str) -> None:
        pass

    async def release(self, session_id: str) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class SoloBacklog:
    requeue: tuple[Any, ...] = ()
    lost: tuple[Any, ...] = ()
    cancelled: tuple[Any, ...] = ()


class SoloJournal:
    """Records nothing: every input is new, and no backlog is ever left."""

    async def record(
        self, session_id: str, *, input_id: str, key: str | None, payload: Mapping[str, Any], token: LeaseToken
    ) -> JournalReceipt:
        return JournalReceipt(NOT_JOURNALED, input_id, created=True)

    async def mark_started(self, session_id: str, seq: int) -> bool:
        return False

    async def backlog(self, session_id: str, covered_seq: int) -> SoloBacklog:
        return SoloBacklog()

    async def cancel(self, session_id: str, seqs: list[int]) -> int:
        return 0

    async def discard(self, session_id: str, seq: int) -> bool:
        return False

    def prune_published(self, session_id: str, covered_seq: int) -> None:
        pass

    async def prune(self, session_id: str, covered_seq: int) -> int:
        return 0
