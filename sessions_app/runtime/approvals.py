"""Approval gates (confirm before): a call of a tool that requires approval waits for a person.

Per waiting call: a durable Approval row and a retained `approval.requested` event. A decision
(the approvals route), the expiry or a cancellation (interrupt, close, shutdown) settles it
once, by a conditional UPDATE from pending, and `approval.decided` records how. The database is
reached through sessions_app.db's twins only; no request or Schema is seen here.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from foundation.errors import Conflict, NotFound
from foundation.logs import logger
from foundation.rfc3339 import format_time as _rfc3339
from sessions_app import db
from sessions_app.eventlog import RecordTooLarge, new_id, public_message
from sessions_app.records import ApprovalRecord, ApprovalStatus
from tools_app.invocation import Invocation, Outcome, error_result

__all__ = ["APPROVAL_ID", "MAX_REASON_CHARS", "ApprovalTurn", "Approvals"]

APPROVAL_ID = 32  # hex characters, like every id Brain assigns
MAX_REASON_CHARS = 1000  # a rejection's reason reaches the model's context: keep it short
SYSTEM = "brain"  # decided_by of the settlements nobody asked for (expiry, interrupt, restart)
CANCELLED_REASON = "turn interrupted"


class ApprovalTurn(Protocol):
    """What a waiting call needs of its turn (sessions_app.runtime.toolcalls.ToolCallTurn)."""

    def record_event(self, type_: str, data: Any, *, input_id: str) -> int:
        """Append and publish one event (its committed position); raises OSError or RecordTooLarge."""

    def fail_running_turn(self, message: str) -> None: ...


def decided_event(record: ApprovalRecord) -> dict[str, Any]:
    """The data of `approval.decided`."""
    return {
        "approval_id": record.id,
        "call_id": record.call_id,
        "tool": record.tool,
        "decision": record.status,
        "decided_by": record.decided_by,
        "decided_at": record.decided_at,
        "reason": record.reason,
    }


class Approvals:
    """The calls of one session that wait for a decision, by approval id."""

    def __init__(self, *, tenant: str, session_id: str) -> None:
        self._tenant = tenant
        self._session_id = session_id
        self._waiting: dict[str, asyncio.Future[ApprovalRecord]] = {}
        self._settling: set[asyncio.Task[None]] = set()  # rows of cancelled waits being updated

    async def request(
        self,
        turn: ApprovalTurn,
        tool: str,
        arguments: dict[str, Any],
        *,
        input_id: str,
        call_id: str,
        timeout_seconds: int,
    ) -> Invocation | None:
        """Wait for the decision on one call: None once approved, else the result the model
        sees instead of the tool's. Cancelled (interrupt, close), it settles the approval as
        cancelled and re-raises CancelledError: the call never reaches its tool."""
        created = datetime.now(UTC)
        record = ApprovalRecord(
            id=new_id(),
            session_id=self._session_id,
            tenant=self._tenant,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            status=ApprovalStatus.PENDING,
            created_at=_rfc3339(created),
            expires_at=_rfc3339(created + timedelta(seconds=timeout_seconds)),
        )
        # registered before the row exists, so a pending row always has a waiter in this process
        decided: asyncio.Future[ApprovalRecord] = asyncio.get_running_loop().create_future()
        self._waiting[record.id] = decided
        try:
            await db.acreate_approval(record)
            requested = {
                "approval_id": record.id,
                "call_id": call_id,
                "tool": tool,
                "arguments": arguments,
                "expires_at": record.expires_at,
            }
            try:
                turn.record_event("approval.requested", requested, input_id=input_id)
            except (OSError, RecordTooLarge) as exc:
                turn.fail_running_turn(public_message(exc))
                await self._settle(record, ApprovalStatus.CANCELLED, reason="approval could not be recorded")
                return Invocation.failed(f"tool {tool!r} requires approval, which could not be recorded")
            try:
                async with asyncio.timeout(timeout_seconds):
                    final = await decided
            except TimeoutError:
                final = await self._settle(record, ApprovalStatus.EXPIRED, reason="approval expired")
            except asyncio.CancelledError:
                # recorded at once, so the turn's events end before its status; the row follows
                cancelled = replace(
                    record,
                    status=ApprovalStatus.CANCELLED,
                    decided_by=SYSTEM,
                    decided_at=_rfc3339(datetime.now(UTC)),
                    reason=CANCELLED_REASON,
                )
                self._record_decided(turn, cancelled, input_id=input_id)
                self._settle_later(record.id)
                raise
        finally:
            self._waiting.pop(record.id, None)
        self._record_decided(turn, final, input_id=input_id)
        return _outcome_of(final)

    def _settle_later(self, approval_id: str) -> None:
        task = asyncio.get_running_loop().create_task(self._cancel_row(approval_id))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _cancel_row(self, approval_id: str) -> None:
        try:
            await db.afinish_approval(approval_id, ApprovalStatus.CANCELLED, decided_by=SYSTEM, reason=CANCELLED_REASON)
        except Exception as exc:  # supervision boundary: a row left pending is cancelled at the next load
            logger.error("approval could not be cancelled", extra={"session_id": self._session_id, "error": str(exc)})

    async def _settle(self, record: ApprovalRecord, status: ApprovalStatus, *, reason: str) -> ApprovalRecord:
        """Settle as `status` unless a decision got there first; the approval as it ends."""
        final: ApprovalRecord | None = await db.afinish_approval(record.id, status, decided_by=SYSTEM, reason=reason)
        if final is None:  # the row is gone: nobody can decide any more
            return replace(record, status=ApprovalStatus.CANCELLED, decided_by=SYSTEM, reason=reason)
        return final

    def _record_decided(self, turn: ApprovalTurn, record: ApprovalRecord, *, input_id: str) -> None:
        try:
            turn.record_event("approval.decided", decided_event(record), input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            turn.fail_running_turn(public_message(exc))

    async def decide(self, approval_id: str, *, approve: bool, decided_by: str, reason: str) -> ApprovalRecord:
        """A person's decision. NotFound for another session's or an unknown approval, Conflict
        once it is settled (decided, expired, cancelled) or its call no longer waits."""
        if len(approval_id) != APPROVAL_ID:
            raise NotFound("approval not found")
        record: ApprovalRecord | None = await db.aget_approval(self._tenant, self._session_id, approval_id)
        if record is None:
            raise NotFound("approval not found")
        if record.status != ApprovalStatus.PENDING:
            raise Conflict(f"approval is already {record.status}")
        waiting = self._waiting.get(approval_id)
        if waiting is None or waiting.done():  # its call died with a previous server process: it can never run
            await db.afinish_approval(
                approval_id, ApprovalStatus.CANCELLED, decided_by=SYSTEM, reason="its tool call is no longer waiting"
            )
            raise Conflict("approval is already cancelled")
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
        now = datetime.now(UTC)
        final: ApprovalRecord | None = await db.afinish_approval(
            approval_id, status, decided_by=decided_by, reason=reason, before=now
        )
        if final is None or final.status != status:
            state = final.status if final is not None else ApprovalStatus.CANCELLED
            raise Conflict("approval expired" if state == ApprovalStatus.PENDING else f"approval is already {state}")
        if waiting.done():  # its call was cancelled (an interrupt) while the decision was stored
            await db.awithdraw_decision(approval_id, decided=status, reason=CANCELLED_REASON)
            raise Conflict("approval is already cancelled")
        waiting.set_result(final)
        return final


def _outcome_of(record: ApprovalRecord) -> Invocation | None:
    if record.status == ApprovalStatus.APPROVED:
        return None
    if record.status == ApprovalStatus.REJECTED:
        because = f": {record.reason}" if record.reason else ""
        return Invocation.failed(f"tool {record.tool!r} was rejected by {record.decided_by}{because}")
    if record.status == ApprovalStatus.EXPIRED:
        return Invocation.failed(f"tool {record.tool!r} was not run: approval expired")
    return Invocation(error_result(f"tool {record.tool!r} was not run: approval {record.status}"), Outcome.CANCELLED)
