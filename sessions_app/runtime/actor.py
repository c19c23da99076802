"""One loaded session: its input queue, status, event fan-out and turns, on the server's loop.

Runs no ORM: state reaches the database through the host's write-behind. Every method that
changes state is synchronous up to its first await, so HTTP handlers see consistent state. Sees
the engine only as a SessionHost.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from foundation.errors import BrainError, Conflict, Overloaded
from foundation.logs import logger
from foundation.telemetry import Telemetry, TurnTrace
from sessions_app.eventlog import (
    LIVE_ONLY,
    MAX_RECORD_BYTES,
    Event,
    EventLog,
    LogWriteFailed,
    RecordTooLarge,
    new_id,
    now_rfc3339,
    public_message,
)
from sessions_app.harness.host import HostLost, RunnerError
from sessions_app.harness.pool import Attachment
from sessions_app.records import ApprovalRecord, SessionRecord, SessionStatus
from sessions_app.storage import CheckpointError, Recovered, SessionFiles
from tools_app.invocation import CallResult, error_result

from .approvals import Approvals, decided_event
from .idempotency import IdempotencyKeys
from .ownership import Journal, JournalBacklog
from .pubsub import Fanout, Subscriber
from .session_host import PendingInput, SessionHost, SpawnCount, TurnFailure, turn_failure
from .toolcalls import ToolCalls
from .turn_records import TurnRecords
from .turnslots import TurnSlot

__all__ = ["RESTART_MESSAGE", "SessionActor"]

INTERRUPT_GRACE_SECONDS = 5.0  # a runner that ignores `interrupt` this long loses its attachment
CHECKPOINT_TIMEOUT_SECONDS = 30.0
# Room kept in the log for the running turn's last events when a send is near session_bytes.
LOG_RESERVE_BYTES = MAX_RECORD_BYTES
QUEUED_INPUT_CANCELLED = "queued input interrupted before execution"
RESTART_MESSAGE = "turn interrupted: server restarted"
LOST_MESSAGE = "turn lost with the instance that ran it"


class SessionActor:
    def __init__(
        self,
        host: SessionHost[SessionActor],
        record: SessionRecord,
        *,
        files: SessionFiles,
        log: EventLog,
        tool_calls: ToolCalls,
        telemetry: Telemetry,
        journal: Journal | None = None,
    ) -> None:
        self._host = host
        self._journal = journal  # a fleet's input journal: turns mark their input started
        self._covered_seq = 0  # the journal seq the last checkpoint covers
        self.send_lock: asyncio.Lock | None = None  # a fleet's sends: journal and log in one order
        self.record = record
        self.files = files
        self.log = log
        self.checkpoints = TurnRecords(files, log, telemetry)
        self.queue: deque[PendingInput] = deque()
        self.current: PendingInput | None = None
        self.turn_id = ""
        self.subscribers = Fanout()
        self._keys = IdempotencyKeys(log)
        self.task: asyncio.Task[None] | None = None
        self._stop_reason = ""  # "interrupt", "close" or "shutdown" while a turn is being stopped
        self._failure: TurnFailure | None = None
        self._tool_calls = tool_calls
        self._telemetry = telemetry
        self._trace: TurnTrace | None = None  # the running turn's, while telemetry is on
        self._marked_running = False  # whether the running marker is on disk
        self._slot: TurnSlot | None = None  # the running turn's hold on a limits.active slot
        self._spawns = SpawnCount()  # sub-agent sessions the running turn started

    # -- state -------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def harness(self) -> str:
        return self.record.harness

    @property
    def tenant(self) -> str:
        return self.record.tenant

    @property
    def turn_running(self) -> bool:
        return self.task is not None

    @property
    def current_input_id(self) -> str | None:
        return self.current.id if self.current is not None and not self._stop_reason else None

    @property
    def busy(self) -> bool:
        """Whether unloading would lose work: a turn, queued input or open streams."""
        return self.task is not None or bool(self.queue) or bool(self.subscribers)

    def _set_status(self, status: SessionStatus, *, input_id: str | None = None) -> None:
        self.record.status = status
        self.record.updated_at = now_rfc3339()
        self._host.mark_dirty(self)
        # The database hears of statuses write-behind; the marker is on disk before the 202 of
        # the message that starts a turn, so a kill -9 right after it cannot hide the lost turn.
        if status == SessionStatus.RUNNING:
            self._mark_running(True)
        self.emit("session.status", {"status": status.value}, input_id=input_id)
        if status != SessionStatus.RUNNING:
            self._mark_running(False)
            self._host.mark_settled(self)
            self.log.close()  # settled sessions hold no descriptor: 1,024 loaded must not hit EMFILE
        if status == SessionStatus.CLOSED:
            self.subscribers.close_all()  # spec: streams end when the session is closed

    def _mark_running(self, running: bool) -> None:
        """Create or remove the running marker: two syscalls, and none when nothing changes."""
        if running == self._marked_running:
            return
        self.files.mark_running(running)
        self._marked_running = running

    # -- loading -----------------------------------------------------------------------------

    def settle_after_load(self, recovered: Recovered, backlog: JournalBacklog | None = None) -> None:
        """Adopt what recovery rebuilt from the log; a turn that was running when the server
        died comes back interrupted, and its queued inputs are cancelled. In a fleet, `backlog`
        holds the journaled inputs the last checkpoint does not cover: see _adopt_backlog."""
        self._keys.adopt(recovered.keys)
        status = SessionStatus(recovered.status)
        if recovered.last_checkpoint is not None:
            last = recovered.last_checkpoint
            self.record.checkpoint = {"id": last["id"], "offset": last["offset"], "time": last["time"]}
            self._covered_seq = last.get("covered_seq", 0)
        self.record.status = status
        unsettled = recovered.unsettled
        if backlog is not None:
            journaled = {entry.input_id for entry in (*backlog.lost, *backlog.requeue)}
            unsettled = [input_id for input_id in unsettled if input_id not in journaled]
        if unsettled and status != SessionStatus.CLOSED:
            first, *queued = unsettled
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
            self._adopt_backlog(recovered, backlog)

    def _adopt_backlog(self, recovered: Recovered, backlog: JournalBacklog) -> None:
        """Journaled inputs a dead owner acknowledged: those missing from the log are appended
        (same event id), those that never started are queued again, in order, to run once; a
        started one whose outcome is not in the log lost its turn: the session is interrupted
        with a session.error naming them (its queued inputs run after a resume)."""
        unsettled = set(recovered.unsettled)
        started = {entry.input_id for entry in backlog.lost}
        lost: list[str] = []
        for entry in sorted((*backlog.lost, *backlog.requeue), key=lambda entry: entry.seq):
            if entry.input_id in recovered.inputs and entry.input_id not in unsettled:
                continue  # its outcome is in the log already
            if entry.input_id not in recovered.inputs:
                event = self.emit("user.message", entry.payload, event_id=entry.input_id)
                key = entry.payload.get("key")
                if isinstance(key, str):
                    self._keys.remember(key, event.offset)
            if entry.input_id in started:
                lost.append(entry.input_id)
            else:
                text = str(entry.payload.get("text", ""))
                self.queue.append(PendingInput(entry.input_id, text, "", time.monotonic(), entry.seq))
        if lost:
            message = f"{LOST_MESSAGE}: input {', '.join(lost)}"
            self.emit("session.error", {"code": "conflict", "message": message}, input_id=lost[0])
            if self.status != SessionStatus.INTERRUPTED:
                self._set_status(SessionStatus.INTERRUPTED, input_id=lost[0])
            logger.warning("turn lost with its instance", extra={"session_id": self.id, "inputs": lost})
        elif self.queue and self.status == SessionStatus.IDLE:
            self._start_next()

    def record_abandoned_approval(self, approval: ApprovalRecord) -> None:
        """An approval whose call died with a previous server process, settled at load."""
        try:
            self.emit("approval.decided", decided_event(approval))
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})

    @property
    def approvals(self) -> Approvals | None:
        """Where this session's tool calls wait for a person's decision (None: none may wait)."""
        return self._tool_calls.approvals

    def settle_restored(self) -> None:
        """A session restored from the archive comes back interrupted (closed stays closed)."""
        if self.status not in (SessionStatus.INTERRUPTED, SessionStatus.CLOSED):
            self._set_status(SessionStatus.INTERRUPTED)

    # -- events ------------------------------------------------------------------------------

    def emit(self, type_: str, data: Any, *, input_id: str | None = None, event_id: str = "") -> Event:
        """Record (unless live-only) and publish one event. Raises OSError or RecordTooLarge."""
        event = Event.build(type_, data, input_id=input_id, event_id=event_id)
        if type_ not in LIVE_ONLY:
            self.log.append(event)
        if self.subscribers:
            self.subscribers.publish(event.sse_frame())
        return event

    def subscribe(self, subscriber: Subscriber) -> int:
        """Register a live subscriber; returns the log end it must replay up to (no await: no gap)."""
        self.subscribers.add(subscriber)
        return self.log.size

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    # -- inputs ------------------------------------------------------------------------------

    def send(self, text: str, *, key: str | None, traceparent: str = "", input_id: str = "", seq: int = 0) -> Event:
        """Accept a user.message: on disk before return, then queued. Raises Conflict/Overloaded.
        In a fleet, `input_id` and `seq` are its journal entry's."""
        data, previous = self.admit(text, key=key)
        if previous is not None:
            return previous
        try:
            event = self.emit("user.message", data, event_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
            detail = str(exc) if isinstance(exc, LogWriteFailed | RecordTooLarge) else "event log write failed"
            raise BrainError(f"the message was not accepted: {detail}") from exc
        if key is not None:
            self._keys.remember(key, event.offset)
        self.queue.append(PendingInput(event.id, text, traceparent, time.monotonic(), seq))
        if self.status == SessionStatus.IDLE:
            self._start_next()
        return event

    def admit(self, text: str, *, key: str | None) -> tuple[dict[str, Any], Event | None]:
        """The user.message's data, and the event a resent key names (else None); raises
        Conflict/Overloaded when the session cannot take it now."""
        if self.status == SessionStatus.CLOSED:
            raise Conflict("session is closed")
        if self.status in (SessionStatus.INTERRUPTED, SessionStatus.FAILED):
            raise Conflict("resume the interrupted session before sending input")
        data: dict[str, Any] = {"type": "user.message", "text": text, "delivery": "queue"}
        if key is not None:
            data["key"] = key
            previous = self._keys.previous(key, data)
            if previous is not None:
                return data, previous
        limits = self._host.limits
        if self._host.draining:
            raise Overloaded("server is shutting down")
        if len(self.queue) >= limits.queue:
            raise Overloaded("session input queue is full")
        if self.log.size + len(text) + LOG_RESERVE_BYTES > limits.session_bytes:
            raise Overloaded("session event log is near its session_bytes limit")
        return data, None

    def _start_next(self) -> None:
        pending = self.queue.popleft()
        self.current = pending
        self.turn_id = new_id()
        self._stop_reason = ""
        self._failure = None
        self._set_status(SessionStatus.RUNNING, input_id=pending.id)
        self.task = asyncio.get_running_loop().create_task(self._run_turn(pending), name=f"turn-{self.id}")
        self._host.track(self.task)

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
            self._set_status(SessionStatus.IDLE)
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
        self._spawns = SpawnCount()
        trace = self._trace = self._telemetry.start_turn(
            self.id, self.record.harness, traceparent=pending.traceparent, accepted=pending.accepted
        )
        try:
            if pending.seq and self._journal is not None:  # before anything reaches the harness
                await self._journal.mark_started(self.id, pending.seq)
            async with self._host.turn_slot() as self._slot:
                if trace is not None:
                    trace.started()
                attachment = await self._host.attach(self)
                async with attachment.host.turn_slots:
                    if self._stop_reason:
                        raise asyncio.CancelledError
                    result = await attachment.request("prompt", {"text": pending.text}, turn=self.turn_id)
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
                raise
            failure = self._stopped_failure()
        except Exception as exc:  # supervision boundary: an unexpected bug fails this turn only
            failure = turn_failure(exc, earlier=self._failure, session_id=self.id)
        finally:
            self.task = None
            self.current = None
            self._slot = None
            if trace is not None:
                self._trace = None
                trace.end(failure.code if failure is not None else "")
                self.checkpoints.count_log_growth()
        if failure is None:
            self._finish_turn(pending)
        else:
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
            elif self.queue and not stop_reason and not self._host.draining:
                self._start_next()
            else:
                self._cancel_queue()
                self._set_status(SessionStatus.IDLE, input_id=pending.id)
        except (OSError, RecordTooLarge) as exc:
            self._mark_failed_without_log(exc)

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
            self._cancel_queue()
            self._set_status(status, input_id=None if closing else pending.id)
        except (OSError, RecordTooLarge) as exc:
            self._mark_failed_without_log(exc)
        await self._host.detach(self)  # native state is reloaded from the checkpoint on resume

    def _cancel_queue(self) -> None:
        while self.queue:
            queued = self.queue.popleft()
            self.emit("session.error", {"code": "conflict", "message": QUEUED_INPUT_CANCELLED}, input_id=queued.id)

    def _mark_failed_without_log(self, exc: BaseException) -> None:
        logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
        self.queue.clear()
        self.record.status = SessionStatus.FAILED
        self.record.updated_at = now_rfc3339()
        self._host.mark_dirty(self)

    # -- harness callbacks (AttachmentHandler) -----------------------------------------------

    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None:
        if turn != self.turn_id or self.current is None or self._failure is not None:
            return
        if name == "assistant.delta" and not isinstance(data.get("text"), str):
            return
        try:
            self.emit(name, data, input_id=self.current.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_running_turn(TurnFailure("brain_error", public_message(exc)))
        if self._trace is not None:
            self._trace.output()

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> CallResult:
        if turn != self.turn_id or self.current is None or self._stop_reason:
            return error_result("the turn of this tool call is over")
        return await self._tool_calls.call(self, params, traceparent=self.current.traceparent, trace=self._trace)

    def record_event(self, type_: str, data: Any, *, input_id: str) -> None:
        """ToolCallTurn: one event of a tool call."""
        self.emit(type_, data, input_id=input_id)

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
