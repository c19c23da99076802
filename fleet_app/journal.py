"""The input journal: acknowledged inputs in PostgreSQL, so an instance's death loses none silently.

Contract with the session runtime (what makes "covered" a prefix of seq):
- a send records its input (one INSERT) before its 202, in the order its session queues inputs
  (under the session's send lock, with the events.jsonl append), so seq order is queue order;
- a turn marks its input started (one UPDATE) before anything reaches the harness;
- queued inputs an interrupt or a close cancels are marked cancelled (one UPDATE for them all),
  just after their cancellation is in the log;
- a checkpoint records `covered_seq`: every entry of the session up to it has its outcome in the
  log the checkpoint includes (its turn completed, or it was cancelled or reported lost);
- once the archive has that checkpoint, the entries it covers are pruned.
A new owner loads the archive's checkpoint and calls `backlog(session, covered_seq)`: entries that
never started run again, exactly once; started ones are reported as turns lost with the instance;
cancelled ones are reported cancelled again (their cancellation may have died with the instance).
No request objects; the database through db twins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import db
from .db import DEFAULT_DB_ALIAS, JournalState
from .lease_token import LeaseToken
from .receipts import JournalReceipt

__all__ = ["Backlog", "InputJournal"]


@dataclass(frozen=True, slots=True)
class Backlog:
    requeue: tuple[db.JournalRow, ...]  # never started: queue again, in this order
    lost: tuple[db.JournalRow, ...]  # started, not covered: their turns died with the instance
    cancelled: tuple[db.JournalRow, ...] = ()  # cancelled while queued: never run

    @property
    def empty(self) -> bool:
        return not self.requeue and not self.lost and not self.cancelled


class InputJournal:
    def __init__(self, *, database: str = DEFAULT_DB_ALIAS) -> None:
        self.database = database

    async def record(
        self, session_id: str, *, input_id: str, key: str | None, payload: Mapping[str, Any], token: LeaseToken
    ) -> JournalReceipt:
        """Journal an input before its 202. A resend of a journaled key returns the first
        send's entry (`created` False): answer with that input's event, record nothing. Fenced
        with `token`, the lease held on the session."""
        return await db.arecord_input(
            session_id, input_id=input_id, key=key, payload=payload, epoch=token.epoch, using=self.database
        )

    async def mark_started(self, session_id: str, seq: int) -> bool:
        return await db.amark_started(session_id, seq, using=self.database)

    async def backlog(self, session_id: str, covered_seq: int) -> Backlog:
        rows = await db.ajournal_after(session_id, covered_seq, using=self.database)
        return Backlog(
            requeue=tuple(row for row in rows if row.state is JournalState.QUEUED),
            lost=tuple(row for row in rows if row.state is JournalState.STARTED),
            cancelled=tuple(row for row in rows if row.state is JournalState.CANCELLED),
        )

    async def cancel(self, session_id: str, seqs: list[int]) -> int:
        """Queued entries cancelled before a turn took them: a new owner never runs them."""
        return await db.acancel_inputs(session_id, seqs, using=self.database)

    async def discard(self, session_id: str, seq: int) -> bool:
        """An entry whose send failed after it was journaled: no 202, so nothing to run."""
        return await db.adiscard_input(session_id, seq, using=self.database)

    def prune_published(self, session_id: str, covered_seq: int) -> None:
        """prune() for a publishing thread (not the event loop): the archive now has a
        checkpoint covering `covered_seq`."""
        db.prune_journal(session_id, covered_seq, using=self.database)

    async def prune(self, session_id: str, covered_seq: int) -> int:
        """After the archive has a checkpoint covering `covered_seq`: forget what it covers."""
        return await db.aprune_journal(session_id, covered_seq, using=self.database)
