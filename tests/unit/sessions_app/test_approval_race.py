"""A decision that lands while its call is being cancelled: the call never runs, and the row
must not say it was approved."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from foundation.errors import Conflict
from sessions_app import db
from sessions_app.eventlog import new_id
from sessions_app.records import ApprovalStatus, SessionRecord
from sessions_app.runtime.approvals import Approvals

pytestmark = pytest.mark.django_db(transaction=True)


class Turn:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def record_event(self, type_: str, data: Any, *, input_id: str) -> int:
        self.events.append((type_, data))
        return len(self.events) - 1

    def fail_running_turn(self, message: str) -> None:
        raise AssertionError(message)


def test_an_approval_landing_as_its_call_is_cancelled_leaves_the_row_cancelled(monkeypatch: Any) -> None:
    record = SessionRecord.new(
        id=new_id(),
        checkpoint=new_id(),
        tenant="acme",
        harness="instant",
        config={"model": "a/b", "tools": []},
        descriptors=[],
    )
    db.create_session(record)

    async def scenario() -> tuple[Any, str, asyncio.Task[Any]]:
        gate = Approvals(tenant="acme", session_id=record.id)
        turn = Turn()
        call = asyncio.get_running_loop().create_task(
            gate.request(turn, "echo", {"text": "hi"}, input_id="i" * 32, call_id="c" * 32, timeout_seconds=60)
        )
        while not turn.events:  # the approval is requested
            await asyncio.sleep(0.01)
        approval_id = turn.events[0][1]["approval_id"]
        stored = db.afinish_approval

        async def interrupted_meanwhile(*args: Any, **kwargs: Any) -> Any:
            call.cancel()  # the interrupt lands while the decision is being written
            await asyncio.sleep(0)
            return await stored(*args, **kwargs)

        monkeypatch.setattr(db, "afinish_approval", interrupted_meanwhile)
        with pytest.raises(Conflict):
            await gate.decide(approval_id, approve=True, decided_by="alice", reason="")
        monkeypatch.setattr(db, "afinish_approval", stored)
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.sleep(0.2)  # the cancelled wait's own row update
        return turn, approval_id, call

    turn, approval_id, _ = async_to_sync(scenario)()
    row = db.get_approval("acme", record.id, approval_id)
    assert row is not None and row.status == ApprovalStatus.CANCELLED
    assert [kind for kind, _ in turn.events] == ["approval.requested", "approval.decided"]
    assert turn.events[1][1]["decision"] == "cancelled"
