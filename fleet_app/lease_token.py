"""A held lease as a value, and the one view of a lease manager the rest of the server uses.

A write to a shared row, the input journal or the archive's `latest` is fenced with the lease it
is made under: the session, the instance holding it and the epoch (the database refuses a write
under an older epoch or another owner). No Django; fleet_app.leases.LeaseManager and the solo
stand-in (fleet_app.solo) satisfy `Leases`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["SOLO_EPOCH", "LeaseFence", "LeaseToken", "Leases"]

SOLO_EPOCH = 0  # one instance alone: every session is its own, never fenced


@dataclass(frozen=True, slots=True)
class LeaseToken:
    session: str
    owner: str  # the instance name; "" for one instance alone
    epoch: int


@dataclass(frozen=True, slots=True)
class LeaseFence:
    """Rows written under leases: this instance's name, this process's incarnation under it, and
    the epoch of each session it still holds (a row of any other session is not written)."""

    owner: str
    epochs: Mapping[str, int]
    incarnation: str


class Leases(Protocol):
    """What the session runtime, the write-behind and the handoff need of an instance's leases."""

    @property
    def instance(self) -> str: ...

    @property
    def incarnation(self) -> str: ...

    @property
    def joined(self) -> bool: ...

    async def acquire(self, session_id: str) -> int | None: ...

    def held_epoch(self, session_id: str) -> int | None: ...

    def held_token(self, session_id: str) -> LeaseToken | None: ...

    def own_name_epoch(self, session_id: str) -> int | None: ...

    def holds(self, session_id: str) -> bool: ...

    def held(self) -> dict[str, int]: ...

    def forget(self, session_id: str) -> None: ...

    async def release(self, session_id: str) -> bool: ...

    def fence_rows(self, session_ids: Iterable[str]) -> tuple[LeaseFence | None, set[str]]:
        """The fence to write these sessions' rows under (None: unfenced), and those whose
        lease is lapsing (written later, if the renewal comes back)."""
