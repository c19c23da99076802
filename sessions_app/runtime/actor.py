"""One loaded session: its input queue, status, event fan-out and turns, on the server's loop.

Runs no ORM: state reaches the database through the engine's write-behind. Every method that
changes state is synchronous up to its first await, so HTTP handlers see consistent state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brainsite import telemetry
from brainsite.errors import BrainError, Conflict, Overloaded
from brainsite.logs import logger
from sessions_app.eventlog import LIVE_ONLY, MAX_RECORD_BYTES, Event, EventLog, RecordTooLarge, new_id, now_rfc3339
from sessions_app.harness.host import HostLost, RunnerError
from sessions_app.harness.pool import Attachment, HostUnavailable
from sessions_app.records import SessionRecord, SessionStatus
from tools_app import registry

from .checkpoints import CheckpointError, CheckpointStore
from .pubsub import Subscriber

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["RUNNING_MARKER", "PendingInput", "SessionActor", "TurnFailure"]

INTERRUPT_GRACE_SECONDS = 5.0  # a runner that ignores `interrupt` this long loses its attachment
CHECKPOINT_TIMEOUT_SECONDS = 30.0
# Room kept in the log for the running turn's last events when a send is near session_bytes.
LOG_RESERVE_BYTES = MAX_RECORD_BYTES
QUEUED_INPUT_CANCELLED = "queued input interrupted before execution"
RUNNING_MARKER = "running"  # in the session directory while a turn may run; restarts settle these


class TurnFailure(Exception):
    """Why a turn stopped early: a session.error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class PendingInput:
    id: str
    text: str
    traceparent: str = ""  # W3C trace context of the request that sent it
    accepted: float = 0.0  # time.monotonic() when it was accepted


class SessionActor:
    def __init__(self, engine: Engine, record: SessionRecord, *, directory: Path, log: EventLog) -> None:
        self.engine = engine
        self.record = record
        self.directory = directory
        self.log = log
        self.checkpoints = CheckpointStore(directory)
        self.queue: deque[PendingInput] = deque()
        self.current: PendingInput | None = None
        self.turn_id = ""
        self.subscribers: set[Subscriber] = set()
        self.keys: dict[str, int] = {}  # idempotency key -> offset of its user.message
        self.attachment: Attachment | None = None
        self.task: asyncio.Task[None] | None = None
        self._stop_reason = ""  # "interrupt", "close" or "shutdown" while a turn is being stopped
        self._failure: TurnFailure | None = None
        self._tool_tasks: set[asyncio.Task[Any]] = set()
        self._trace: telemetry.TurnTrace | None = None  # the running turn's, while telemetry is on
        self._reported_log_size = log.size  # event log bytes already counted in brain.transcript.bytes
        self._native_sizes: dict[str, int] | None = None  # native file sizes of the last checkpoint

    # -- state -------------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def busy(self) -> bool:
        """Whether unloading would lose work: a turn, queued input or open streams."""
        return self.task is not None or bool(self.queue) or bool(self.subscribers)

    def _set_status(self, status: SessionStatus, *, input_id: str | None = None) -> None:
        self.record.status = status
        self.record.updated_at = now_rfc3339()
        self.engine.mark_dirty(self)
        # The database hears of statuses write-behind; the marker is on disk before the 202 of
        # the message that starts a turn, so a kill -9 right after it cannot hide the lost turn.
        if status == SessionStatus.RUNNING:
            (self.directory / RUNNING_MARKER).touch()
        self.emit("session.status", {"status": status.value}, input_id=input_id)
        if status != SessionStatus.RUNNING:
            (self.directory / RUNNING_MARKER).unlink(missing_ok=True)
            self.log.close()  # settled sessions hold no descriptor: 1,024 loaded must not hit EMFILE
        if status == SessionStatus.CLOSED:
            for subscriber in list(self.subscribers):
                subscriber.close()  # spec: streams end when the session is closed
            self.subscribers.clear()

    # -- events ------------------------------------------------------------------------------

    def emit(self, type_: str, data: Any, *, input_id: str | None = None) -> Event:
        """Record (unless live-only) and publish one event. Raises OSError or RecordTooLarge."""
        event = Event.build(type_, data, input_id=input_id)
        if type_ not in LIVE_ONLY:
            self.log.append(event)
        if self.subscribers:
            frame = event.sse_frame()
            for subscriber in list(self.subscribers):
                subscriber.offer(frame, len(frame))
                if subscriber.closed:
                    self.subscribers.discard(subscriber)
        return event

    def subscribe(self, subscriber: Subscriber) -> int:
        """Register a live subscriber; returns the log end it must replay up to (no await: no gap)."""
        self.subscribers.add(subscriber)
        return self.log.size

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    # -- inputs ------------------------------------------------------------------------------

    def send(self, text: str, *, key: str | None, traceparent: str = "") -> Event:
        """Accept a user.message: on disk before return, then queued. Raises Conflict/Overloaded."""
        if self.status == SessionStatus.CLOSED:
            raise Conflict("session is closed")
        if self.status in (SessionStatus.INTERRUPTED, SessionStatus.FAILED):
            raise Conflict("resume the interrupted session before sending input")
        data: dict[str, Any] = {"type": "user.message", "text": text, "delivery": "queue"}
        if key is not None:
            data["key"] = key
            previous = self._keyed_event(key)
            if previous is not None:
                if previous.as_dict()["data"] != data:
                    raise Conflict("idempotency key was used with a different message")
                return previous
        if self.engine.draining:
            raise Overloaded("server is shutting down")
        if len(self.queue) >= self.engine.limits.queue:
            raise Overloaded("session input queue is full")
        if self.log.size + len(text) + LOG_RESERVE_BYTES > self.engine.limits.session_bytes:
            raise Overloaded("session event log is near its session_bytes limit")
        try:
            event = self.emit("user.message", data)
        except (OSError, RecordTooLarge) as exc:
            logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
            raise BrainError() from exc
        if key is not None:
            self.keys[key] = event.offset
        self.queue.append(PendingInput(event.id, text, traceparent, time.monotonic()))
        if self.status == SessionStatus.IDLE:
            self._start_next()
        return event

    def _keyed_event(self, key: str) -> Event | None:
        offset = self.keys.get(key)
        if offset is None:
            return None
        events = self.log.read(offset, limit=1)
        return events[0] if events else None

    def _start_next(self) -> None:
        pending = self.queue.popleft()
        self.current = pending
        self.turn_id = new_id()
        self._stop_reason = ""
        self._failure = None
        self._set_status(SessionStatus.RUNNING, input_id=pending.id)
        self.task = asyncio.get_running_loop().create_task(self._run_turn(pending), name=f"turn-{self.id}")
        self.engine.track(self.task)

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
        self._set_status(SessionStatus.CLOSED)
        self.engine.release_attachment(self)

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
        for task in list(self._tool_tasks):
            task.cancel()
        attachment = self.attachment
        if attachment is not None and self.task is not None:
            self.engine.track(asyncio.get_running_loop().create_task(self._request_interrupt(attachment, self.turn_id)))
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
        await self.engine.adetach(self)
        checkpoint = self.checkpoints.last() or {"id": self.record.checkpoint["id"], "files": []}
        try:
            await asyncio.to_thread(self.checkpoints.restore, checkpoint)
        except (CheckpointError, OSError) as exc:
            logger.error("resume failed", extra={"session_id": self.id, "error": str(exc)})
            raise BrainError() from exc
        if self.status in (SessionStatus.INTERRUPTED, SessionStatus.FAILED):
            self._set_status(SessionStatus.IDLE)

    # -- the turn ----------------------------------------------------------------------------

    async def _run_turn(self, pending: PendingInput) -> None:
        failure: TurnFailure | None = None
        trace = self._trace = telemetry.start_turn(
            self.id, self.record.harness, traceparent=pending.traceparent, accepted=pending.accepted
        )
        try:
            async with self.engine.turn_slot():
                if trace is not None:
                    trace.started()
                attachment = await self.engine.attach(self)
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
                    await self._record_checkpoint(reported)
        except asyncio.CancelledError:
            if not self._stop_reason:
                raise
            failure = self._stopped_failure()
        except TurnFailure as exc:
            failure = exc
        except RunnerError as exc:
            code = "provider_error" if exc.code == "provider_error" else "brain_error"
            failure = self._failure or TurnFailure(code, exc.message or f"harness reported {exc.code}")
        except (HostLost, HostUnavailable, CheckpointError, OSError, RecordTooLarge, TimeoutError) as exc:
            failure = self._failure or TurnFailure("brain_error", str(exc) or type(exc).__name__)
        except Exception as exc:  # supervision boundary: an unexpected bug fails this turn only
            logger.exception("turn crashed", extra={"session_id": self.id})
            failure = TurnFailure("brain_error", f"internal error: {type(exc).__name__}")
        finally:
            self.task = None
            self.current = None
            if trace is not None:
                self._trace = None
                trace.end(failure.code if failure is not None else "")
                self._record_log_growth()
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
                self.engine.release_attachment(self)
            elif self.queue and not stop_reason and not self.engine.draining:
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
        await self.engine.adetach(self)  # native state is reloaded from the checkpoint on resume

    def _cancel_queue(self) -> None:
        while self.queue:
            queued = self.queue.popleft()
            self.emit("session.error", {"code": "conflict", "message": QUEUED_INPUT_CANCELLED}, input_id=queued.id)

    def _mark_failed_without_log(self, exc: BaseException) -> None:
        logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
        self.queue.clear()
        self.record.status = SessionStatus.FAILED
        self.record.updated_at = now_rfc3339()
        self.engine.mark_dirty(self)

    async def _record_checkpoint(self, reported: Any) -> None:
        if self._trace is not None and self._native_sizes is None:  # first checkpoint since loading
            last = await asyncio.to_thread(self.checkpoints.last)
            self._native_sizes = {item["path"]: item["size"] for item in last["files"]} if last else {}
        checkpoint_id, time = new_id(), now_rfc3339()
        if isinstance(reported, list) and all(isinstance(f, dict) and f.get("append_only") for f in reported):
            # append-only files need a stat each and one journal line: cheaper than a thread hop
            entry = self.checkpoints.record(checkpoint_id, offset=self.log.size, time=time, reported=reported)
        else:  # snapshot copies of rewritable files may be large
            entry = await asyncio.to_thread(
                self.checkpoints.record, checkpoint_id, offset=self.log.size, time=time, reported=reported
            )
        self.record.checkpoint = {"id": entry["id"], "offset": entry["offset"], "time": entry["time"]}
        if self._native_sizes is not None:
            self._record_native_growth(entry["files"])

    def _record_log_growth(self) -> None:
        size = self.log.size
        telemetry.record_transcript_bytes(size - self._reported_log_size)
        self._reported_log_size = size

    def _record_native_growth(self, files: list[dict[str, Any]]) -> None:
        """Count the bytes native files grew by since the previous checkpoint."""
        previous = self._native_sizes or {}
        sizes = {item["path"]: item["size"] for item in files}
        self._native_sizes = sizes
        telemetry.record_native_bytes(sum(max(0, size - previous.get(path, 0)) for path, size in sizes.items()))

    # -- harness callbacks (AttachmentHandler) -----------------------------------------------

    def on_runner_event(self, turn: str, name: str, data: dict[str, Any]) -> None:
        if turn != self.turn_id or self.current is None or self._failure is not None:
            return
        if name == "assistant.delta" and not isinstance(data.get("text"), str):
            return
        try:
            self.emit(name, data, input_id=self.current.id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_running_turn(TurnFailure("brain_error", str(exc)))
        if self._trace is not None:
            self._trace.output()

    async def on_tool_call(self, turn: str, params: dict[str, Any]) -> dict[str, Any]:
        if turn != self.turn_id or self.current is None or self._stop_reason:
            return registry.error_result("the turn of this tool call is over")
        input_id = self.current.id
        call_id = new_id()
        name = params.get("name", "")
        arguments = params.get("arguments")
        try:
            self.emit("tool.call", {"id": call_id, "name": name, "arguments": arguments}, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_running_turn(TurnFailure("brain_error", str(exc)))
            return registry.error_result("tool call could not be recorded")
        tools = tuple(self.record.config.get("tools", ()))
        trace = self._trace.tool_call(name) if self._trace is not None else None
        task = asyncio.get_running_loop().create_task(
            registry.invoke(
                registry.CallContext(
                    tenant=self.record.tenant,
                    session_id=self.id,
                    call_id=call_id,
                    tools=tools,
                    progress=lambda data: self._tool_progress(call_id, input_id, data),
                    traceparent=trace.traceparent if trace is not None else self.current.traceparent,
                ),
                name,
                arguments,
            )
        )
        self._tool_tasks.add(task)
        try:
            result = await task
        except asyncio.CancelledError:  # before the request was sent: nothing happened remotely
            result = registry.error_result("tool call cancelled before dispatch: turn interrupted")
        except registry.CallCancelled:
            result = registry.error_result(
                "tool call cancelled: turn interrupted; remote outcome may be unknown", unknown_outcome=True
            )
        finally:
            self._tool_tasks.discard(task)
        if trace is not None:  # an unknown name is the model's text: keep it out of metric labels
            trace.end(name if name in tools else "unknown", is_error=result.get("is_error") is True)
        try:
            self.emit("tool.result", {"call_id": call_id, "result": result}, input_id=input_id)
        except (OSError, RecordTooLarge) as exc:
            self._fail_running_turn(TurnFailure("brain_error", str(exc)))
        return result

    def _tool_progress(self, call_id: str, input_id: str, data: Any) -> None:
        if self.current is not None and self.current.id == input_id:
            self.emit("tool.progress", {"call_id": call_id, "data": data}, input_id=input_id)

    def on_host_lost(self, reason: str) -> None:
        self.attachment = None
        self.engine.forget_attachment(self)
        if self.task is not None and self._failure is None and not self._stop_reason:
            self._failure = TurnFailure("brain_error", reason)

    def _fail_running_turn(self, failure: TurnFailure) -> None:
        if self._failure is None:
            self._failure = failure
            self._stop("interrupt")

    def __repr__(self) -> str:
        return f"<SessionActor {self.id} {self.status}>"


def rebuild_from_log(records: list[dict[str, Any]]) -> tuple[dict[str, int], list[str], str]:
    """From parsed log records: idempotency keys, inputs accepted but never settled, last status."""
    keys: dict[str, int] = {}
    unsettled: list[str] = []
    running = ""
    status = SessionStatus.IDLE.value
    for record in records:
        kind, data = record.get("type"), record.get("data") or {}
        if kind == "user.message":
            if isinstance(data.get("key"), str):
                keys[data["key"]] = record["_offset"]
            unsettled.append(record["id"])
        elif kind == "session.status":
            status = data.get("status", status)
            input_id = record.get("input_id", "")
            if running and running != input_id:
                with contextlib.suppress(ValueError):
                    unsettled.remove(running)
            running = input_id if status == SessionStatus.RUNNING else ""
            if status != SessionStatus.RUNNING and input_id:
                with contextlib.suppress(ValueError):
                    unsettled.remove(input_id)
            if status == SessionStatus.RUNNING and input_id:
                # the running input stays unsettled until its turn ends
                pass
        elif kind == "session.error":
            with contextlib.suppress(ValueError):
                unsettled.remove(record.get("input_id", ""))
            if running == record.get("input_id"):
                running = ""
    return keys, unsettled, status
