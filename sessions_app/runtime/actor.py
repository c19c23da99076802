"""One loaded session: its input queue, status, event fan-out and turns, on the server's loop.

Runs no ORM: state reaches the database through the host's write-behind. Every method that
changes state is synchronous up to its first await, so HTTP handlers see consistent state. Sees
the engine only as a SessionHost.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from foundation.errors import BrainError, Conflict
from foundation.logs import logger
from runners.accounting import MODEL_REQUEST, RequestRecord, complete_request_record
from runners.media import Media
from sessions_app.eventlog import Event, LogWriteFailed, RecordTooLarge, new_id, public_message
from sessions_app.harness.host import HostLost, RunnerError
from sessions_app.harness.pool import Attachment
from sessions_app.records import ApprovalRecord, SessionStatus
from sessions_app.storage import CheckpointError, Recovered
from tools_app.invocation import CallResult, error_result

from .admission import check_capacity, check_status
from .approvals import decided_event
from .ownership import JournalBacklog
from .retooling import CONFIGURE
from .session_host import ConfigChange, PendingInput, SpawnCount, TurnFailure, turn_failure
from .sink import write_failure_message
from .state import SessionState
from .steering import TurnSteers
from .takeover import QUEUED_INPUT_CANCELLED, RESTART_MESSAGE, journaled_event, plan_adoption, unsettled

__all__ = ["RESTART_MESSAGE", "SessionActor"]

INTERRUPT_GRACE_SECONDS = 5.0  # a runner that ignores `interrupt` this long loses its attachment
CHECKPOINT_TIMEOUT_SECONDS = 30.0


class SessionActor(SessionState["SessionActor"]):
    """Loading, inputs, turns and the harness's callbacks of one session (its state: SessionState)."""

    # -- loading -----------------------------------------------------------------------------

    def settle_after_load(
        self,
        recovered: Recovered,
        backlog: JournalBacklog | None = None,
        changes: Mapping[str, ConfigChange | str] | None = None,
    ) -> None:
        """Adopt what recovery rebuilt from the log; a turn that was running when the server
        died comes back interrupted, and its queued inputs (changes too) are cancelled. In a
        fleet, `backlog` holds the journaled inputs the last checkpoint does not cover, and
        `changes` the journaled configuration changes ready to queue: see _adopt_backlog."""
        self._keys.adopt(recovered.keys)
        status = SessionStatus(recovered.status)
        if recovered.last_checkpoint is not None:
            last = recovered.last_checkpoint
            self.record.checkpoint = {"id": last["id"], "offset": last["offset"], "time": last["time"]}
            self._covered_seq = last.get("covered_seq", 0)
        self.record.status = status
        left_open = unsettled(recovered, backlog)
        if left_open and status != SessionStatus.CLOSED:
            first, *queued = left_open
            self.emit("session.error", {"code": "conflict", "message": RESTART_MESSAGE}, input_id=first)
            for input_id in queued:
                self.emit("session.error", {"code": "conflict", "message": QUEUED_INPUT_CANCELLED}, input_id=input_id)
            self._set_status(SessionStatus.INTERRUPTED, input_id=first)
            logger.info("session interrupted by restart", extra={"session_id": self.id})
        elif status == SessionStatus.RUNNING:
            self._set_status(SessionStatus.INTERRUPTED)
        self._marked_running = True  # whatever a dead server left: a loaded actor has no running turn yet
        self._mark_running(False)
        self._host.mark_dirty(self)
        if backlog is not None and self.status != SessionStatus.CLOSED:
            self._adopt_backlog(recovered, backlog, changes)

    def _adopt_backlog(
        self, recovered: Recovered, backlog: JournalBacklog, changes: Mapping[str, ConfigChange | str] | None
    ) -> None:
        """Journaled inputs a dead owner acknowledged, as takeover.plan_adoption sorts them: a
        lost turn interrupts the session (its queued inputs run after a resume)."""
        plan = plan_adoption(recovered, backlog, changes)
        for entry in plan.append:
            event = self.emit(*journaled_event(entry.payload), event_id=entry.input_id)
            if isinstance(key := entry.payload.get("key"), str):
                self._keys.remember(key, event.offset)
        self.queue.extend(plan.requeue)
        for input_id, message in plan.errors():
            self.emit("session.error", {"code": "conflict", "message": message}, input_id=input_id)
        if plan.lost:
            if self.status != SessionStatus.INTERRUPTED:
                self._set_status(SessionStatus.INTERRUPTED, input_id=plan.lost[0])
            logger.warning("turn lost with its instance", extra={"session_id": self.id, "inputs": plan.lost})
        elif self.queue and self.status == SessionStatus.IDLE:
            self._start_next()

    def record_abandoned_approval(self, approval: ApprovalRecord) -> None:
        """An approval whose call died with a previous server process, settled at load."""
        try:
            self.emit("approval.decided", decided_event(approval))
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})

    def settle_restored(self) -> None:
        """A session restored from the archive comes back interrupted (closed stays closed)."""
        if self.status not in (SessionStatus.INTERRUPTED, SessionStatus.CLOSED):
            self._set_status(SessionStatus.INTERRUPTED)

    # -- inputs ------------------------------------------------------------------------------

    def send(self, text: str, *, key: str | None, traceparent: str = "", input_id: str = "", seq: int = 0) -> Event:
        """Accept a user.message: on disk before return, then queued. Raises Conflict/Overloaded.
        In a fleet, `input_id` and `seq` are its journal entry's."""
        data, previous = self.admit(text, key=key, media=[])
        if previous is not None:
            return previous
        return self.accept(data, key=key, traceparent=traceparent, input_id=input_id, seq=seq)

    def accept(self, data: dict[str, Any], *, key: str | None, traceparent: str, input_id: str, seq: int) -> Event:
        """A user.message admit() let in: on disk before return, then queued; a steer while a
        turn takes steers is recorded into that turn (its input_id) and sent to its harness."""
        text, media = str(data["text"]), list(data.get("media", ()))
        steers = self._turn_steers if data.get("delivery") == "steer" and not self._stop_reason else None
        into = self.current.id if steers is not None and steers.open and self.current is not None else None
        try:
            event = self.emit("user.message", data, input_id=into, event_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
            detail = str(exc) if isinstance(exc, LogWriteFailed | RecordTooLarge) else "event log write failed"
            raise BrainError(f"the message was not accepted: {detail}") from exc
        if key is not None:
            self._keys.remember(key, event.offset)
        pending = PendingInput(event.id, text, traceparent, time.monotonic(), seq, media)
        if steers is not None and into is not None:
            steers.add(pending)
            return event
        self.queue.append(pending)
        if self.status == SessionStatus.IDLE:
            self._start_next()
        return event

    def admit(
        self, text: str, *, key: str | None, media: list[Media], delivery: str = "queue"
    ) -> tuple[dict[str, Any], Event | None]:
        """The user.message's data, and the event a resent key names (else None); raises
        Conflict/Overloaded when the session cannot take it now (steers held by the running
        turn count as queued: each may yet run as an input of its own)."""
        check_status(self.status)
        data: dict[str, Any] = {"type": "user.message", "text": text, "delivery": delivery}
        if media:
            data["media"] = media
        if key is not None:
            data["key"] = key
            previous = self._keys.previous(key, data)
            if previous is not None:
                return data, previous
        host, size = self._host, self.log.size
        size_of_input = len(text) + sum(len(item["url"]) for item in media)
        queued = len(self.queue) + (len(self._turn_steers) if self._turn_steers is not None else 0)
        check_capacity(
            limits=host.limits, draining=host.draining, queued=queued, log_size=size, input_size=size_of_input
        )
        return data, None

    def admit_change(self, change: ConfigChange) -> Event | None:
        """The event a resent key names (else None); Conflict/Overloaded when it cannot be taken."""
        check_status(self.status)
        if change.key is not None and (previous := self._keys.previous(change.key, change.data)) is not None:
            return previous
        host, size = self._host, len(json.dumps(change.fields))
        queued = len(self.queue) + (len(self._turn_steers) if self._turn_steers is not None else 0)
        check_capacity(
            limits=host.limits, draining=host.draining, queued=queued, log_size=self.log.size, input_size=size
        )
        return None

    def accept_change(self, change: ConfigChange, *, input_id: str, seq: int) -> tuple[Event, bool]:
        """A session.configure admit_change() let in: recorded (its data the fields it changes),
        then applied at once when no turn runs or waits (True), else queued behind them, applied
        in its turn. In a fleet, `input_id` and `seq` are its journal entry's."""
        try:
            event = self.emit(CONFIGURE, change.data, event_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
            raise BrainError(f"the change was not accepted: {write_failure_message(exc)}") from exc
        if change.key is not None:
            self._keys.remember(change.key, event.offset)
        if self.task is None and not self.queue:
            self.apply_config(change, seq=seq)
            return event, True
        self.queue.append(PendingInput(event.id, "", "", time.monotonic(), seq, change=change))
        return event, False

    def _start_next(self) -> bool:
        """Start the next queued turn, applying the changes queued before it; False when the
        queue held none."""
        while self.queue and (change := self.queue[0].change) is not None:
            self.apply_config(change, seq=self.queue.popleft().seq)
        if not self.queue:
            return False
        pending = self.queue.popleft()
        try:
            self._set_status(SessionStatus.RUNNING, input_id=pending.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_without_log(exc, pending.id)
            return True
        self.current = pending
        self.turn_id = new_id()
        self._turn_steers = TurnSteers(self.turn_id)
        self._stop_reason = ""
        self._failure = None
        self.task = asyncio.get_running_loop().create_task(self._run_turn(pending), name=f"turn-{self.id}")
        self._host.track(self.task)
        return True

    def interrupt(self) -> None:
        """user.interrupt: stop the running turn; a no-op without one."""
        if self.task is not None:
            self._stop("interrupt")

    def close(self) -> None:
        if self.status == SessionStatus.CLOSED:
            return
        if self.task is not None:
            self._stop("close")
            return
        self._cancel_queue()  # inputs an interrupted session kept for its resume
        self._set_status(SessionStatus.CLOSED)
        self._host.release(self)

    def stop_for_shutdown(self) -> None:
        if self.task is not None:
            self._stop("shutdown")

    def _stop(self, reason: str) -> None:
        if self._stop_reason == "close" or not reason:
            return
        first = not self._stop_reason
        self._stop_reason = reason
        if not first:
            return
        self._tool_calls.cancel_all()
        attachment = self._host.attachment_of(self)
        if attachment is not None and self.task is not None:
            self._host.track(asyncio.get_running_loop().create_task(self._request_interrupt(attachment, self.turn_id)))
        elif self.task is not None:
            self.task.cancel()  # still waiting for a turn slot or a host: nothing runs yet

    async def _request_interrupt(self, attachment: Attachment, turn: str) -> None:
        task = self.task
        try:
            await attachment.request("interrupt", None, turn=turn, timeout=INTERRUPT_GRACE_SECONDS)
            if task is not None:
                await asyncio.wait_for(asyncio.shield(task), INTERRUPT_GRACE_SECONDS)
        except (RunnerError, HostLost, TimeoutError):
            if task is not None and not task.done():
                task.cancel()

    async def resume(self) -> None:
        if self.status == SessionStatus.IDLE:
            return
        if self.status in (SessionStatus.RUNNING, SessionStatus.CLOSED) or self.task is not None:
            raise Conflict(f"cannot resume a {self.status} session")
        await self._host.detach(self)
        try:
            await asyncio.to_thread(self.checkpoints.restore_last)
        except (CheckpointError, OSError) as exc:
            logger.error("resume failed", extra={"session_id": self.id, "error": str(exc)})
            raise BrainError(f"cannot restore the last checkpoint: {exc}") from exc
        if self.status in (SessionStatus.INTERRUPTED, SessionStatus.FAILED):
            try:
                self._set_status(SessionStatus.IDLE)  # after the events a full disk left owed
            except (OSError, RecordTooLarge) as exc:
                logger.error("resume failed", extra={"session_id": self.id, "error": str(exc)})
                raise BrainError(f"cannot resume: {write_failure_message(exc)}") from exc
            if self.queue:  # journaled inputs a lost turn held back
                self._start_next()

    # -- the turn ----------------------------------------------------------------------------

    def lend_turn_slot(self) -> AbstractAsyncContextManager[None]:
        """For the block's duration the running turn gives its slot back (it waits on a sub-agent
        that needs one); see TurnSlot."""
        return self._slot.lent() if self._slot is not None else nullcontext()

    def claim_child_spawn(self, *, limit: int) -> bool:
        """Count one more sub-agent session started by the running turn; False (and nothing
        counted) when it has started `limit` already or no turn runs."""
        return self.task is not None and self._spawns.claim(limit)

    def unclaim_child_spawn(self) -> None:
        """A counted spawn that did not start a session."""
        self._spawns.unclaim()

    async def _run_turn(self, pending: PendingInput) -> None:
        failure: TurnFailure | None = None
        steers = self._turn_steers if self._turn_steers is not None else TurnSteers(self.turn_id)
        self._spawns = SpawnCount()
        trace = self._trace = self._telemetry.start_turn(
            self.id, self.record.harness, traceparent=pending.traceparent, accepted=pending.accepted
        )
        try:
            if pending.seq:  # journaled: marked started before anything reaches the harness
                await self._journal.mark_started(self.id, pending.seq)
            async with self._host.turn_slot() as self._slot:
                if trace is not None:
                    trace.started()
                await self.config_saved()  # a change applied before this turn is in the row first
                attachment = await self._host.attach(self)
                self.learn_media_support(attachment.media)
                self.refuse_untaken_media(pending.media)
                async with attachment.host.turn_slots:
                    if self._stop_reason:
                        raise asyncio.CancelledError
                    steers.prompted(attachment)
                    try:
                        result = await attachment.request("prompt", pending.prompt(), turn=self.turn_id)
                    finally:
                        steers.open = False  # later steers queue: the harness's turn is over
                if self._failure is not None:
                    raise self._failure
                if self._stop_reason or (isinstance(result, dict) and result.get("interrupted")):
                    failure = self._stopped_failure()
                else:
                    reported = await attachment.request("checkpoint", None, timeout=CHECKPOINT_TIMEOUT_SECONDS)
                    covered = self._covered_seq = max(self._covered_seq, pending.seq)
                    entry = await self.checkpoints.record(reported, measure=trace is not None, covered_seq=covered)
                    self.record.checkpoint = {"id": entry["id"], "offset": entry["offset"], "time": entry["time"]}
        except asyncio.CancelledError:
            if not self._stop_reason:
                steers.drop()  # the session moved or unloads: its new owner settles them
                raise
            failure = self._stopped_failure()
        except Exception as exc:  # supervision boundary: an unexpected bug fails this turn only
            failure = turn_failure(exc, earlier=self._failure, session_id=self.id)
        finally:
            self._turn_steers = None
            self.task = None
            self.current = None
            self._slot = None
            if trace is not None:
                self._trace = None
                trace.end(failure.code if failure is not None else "")
                self.checkpoints.count_log_growth()
        # Steers the harness did not take run next, in order; a turn that did not complete
        # takes its steers down with it (cancelled with the queue).
        if failure is None:
            self.queue.extendleft(reversed(steers.untaken()))
            self._finish_turn(pending)
        else:
            self.queue.extendleft(reversed(steers.drop()))
            await self._fail_turn(pending, failure)

    def _stopped_failure(self) -> TurnFailure:
        if self._failure is not None:
            return self._failure
        reason = {"close": "session closed", "shutdown": "server shutting down"}.get(self._stop_reason, "")
        return TurnFailure("conflict", f"turn interrupted: {reason}" if reason else "turn interrupted")

    def _finish_turn(self, pending: PendingInput) -> None:
        """The turn completed. A stop that arrived too late to cut it still ends the queue."""
        stop_reason, self._stop_reason = self._stop_reason, ""
        try:
            if stop_reason == "close":
                self._cancel_queue()
                self._set_status(SessionStatus.CLOSED)
                self._host.release(self)
            elif not stop_reason and not self._host.draining and self._start_next():
                pass  # the next turn runs
            else:
                self._cancel_queue()
                self._set_status(SessionStatus.IDLE, input_id=pending.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_without_log(exc, pending.id)

    async def _fail_turn(self, pending: PendingInput, failure: TurnFailure) -> None:
        logger.warning("turn stopped", extra={"session_id": self.id, "code": failure.code, "error": failure.message})
        closing = self._stop_reason == "close"
        status = SessionStatus.INTERRUPTED
        if failure.code == "brain_error":
            status = SessionStatus.FAILED
        if closing:
            status = SessionStatus.CLOSED
        # Settle the status before any await, so a close or resume arriving meanwhile sees it.
        self._stop_reason = ""
        try:
            self.emit("session.error", {"code": failure.code, "message": failure.message}, input_id=pending.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_without_log(exc, pending.id)
        else:
            try:
                self._cancel_queue()
                self._set_status(status, input_id=None if closing else pending.id)
            except (OSError, RecordTooLarge) as exc:
                self._fail_without_log(exc, pending.id, error_recorded=True)
        await self._host.detach(self)  # native state is reloaded from the checkpoint on resume

    # -- harness callbacks (AttachmentHandler) -----------------------------------------------

    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None:
        if turn != self.turn_id or self.current is None or self._failure is not None:
            return
        if name == "assistant.delta" and not isinstance(data.get("text"), str):
            return
        if name == MODEL_REQUEST:  # checked by the host; Brain names the harness and the turn
            record: RequestRecord = data  # type: ignore[assignment]  # check_request_record's value
            data = dict(complete_request_record(record, harness=self.record.harness, boundary=self.current.id))
        try:
            self.emit(name, data, input_id=self.current.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_running_turn(TurnFailure("brain_error", public_message(exc)))
        if self._trace is not None and name != MODEL_REQUEST:  # a record is no output of the model
            self._trace.output()

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> CallResult:
        if turn != self.turn_id or self.current is None or self._stop_reason:
            return error_result("the turn of this tool call is over")
        return await self._tool_calls.call(self, params, traceparent=self.current.traceparent, trace=self._trace)

    def record_event(self, type_: str, data: Any, *, input_id: str) -> int:
        """ToolCallTurn: one event of a tool call; its committed position in the log."""
        return self.emit(type_, data, input_id=input_id).offset

    def on_frame_error(self, reason: str) -> None:
        if self.task is not None:
            self._fail_running_turn(TurnFailure("brain_error", reason))

    def on_host_lost(self, reason: str) -> None:
        self._host.forget_attachment(self)
        if self.task is not None and self._failure is None and not self._stop_reason:
            self._failure = TurnFailure("brain_error", reason)

    def fail_running_turn(self, message: str) -> None:
        """ToolCallTurn: a tool call's events could not be recorded."""
        self._fail_running_turn(TurnFailure("brain_error", message))

    def _fail_running_turn(self, failure: TurnFailure) -> None:
        if self._failure is None:
            self._failure = failure
            self._stop("interrupt")
