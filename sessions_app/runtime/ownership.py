"""What the session runtime sees of its instance's ownership of sessions (fleet_app.ownership):
the lease taken when a session is created or loaded, the check before every write, the leases
that fence its rows and the input journal. One instance alone has a stand-in that owns every
session; the runtime never asks which it has.

Sees fleet_app only through the protocols below, fleet_app.lease_token and fleet_app.receipts; no Django, no
request objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fleet_app.lease_token import Leases, LeaseToken
from fleet_app.receipts import JournalReceipt

__all__ = ["Journal", "JournalBacklog", "JournaledInput", "Ownership"]


class JournaledInput(Protocol):
    """An input read back from the journal (fleet_app.db.JournalRow): its place, id and body."""

    @property
    def seq(self) -> int: ...
    @property
    def input_id(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...


class JournalBacklog(Protocol):
    @property
    def requeue(self) -> Sequence[JournaledInput]: ...
    @property
    def lost(self) -> Sequence[JournaledInput]: ...
    @property
    def cancelled(self) -> Sequence[JournaledInput]: ...


class Journal(Protocol):
    """fleet_app.journal.InputJournal (acknowledged inputs in the fleet's database), or its solo stand-in."""

    async def record(
        self, session_id: str, *, input_id: str, key: str | None, payload: Mapping[str, Any], token: LeaseToken
    ) -> JournalReceipt: ...

    async def mark_started(self, session_id: str, seq: int) -> bool: ...

    async def cancel(self, session_id: str, seqs: list[int]) -> int: ...

    async def backlog(self, session_id: str, covered_seq: int) -> JournalBacklog: ...

    async def discard(self, session_id: str, seq: int) -> bool: ...

    async def prune(self, session_id: str, covered_seq: int) -> int: ...


class Ownership(Protocol):
    """fleet_app.ownership.LeasedOwnership, or SoloOwnership for one instance alone."""

    @property
    def leases(self) -> Leases: ...

    @property
    def journal(self) -> Journal: ...

    async def claim_new(self, session_id: str) -> None:
        """A session created here: its lease, recorded in its new directory."""

    async def claim(self, tenant: str, session_id: str) -> bool:
        """Take the lease of a session about to load here; True when the local copy was replaced."""

    def require_writable(self, session_id: str) -> LeaseToken:
        """The lease to write under; 503 unavailable while it is not (or no longer) ours."""
