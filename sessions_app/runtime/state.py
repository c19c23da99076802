"""A loaded session's state, below its turns (actor.py): the record, the input queue, the running
turn's handles, the event sink, and the status transitions with the running marker.

A status is adopted only once its session.status event is in the log, or owed when the log
refuses a turn's closing events (see EventSink): a client never sees a status the history lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Any, Generic, TypeVar, cast

from foundation.errors import InvalidRequest
from foundation.logs import logger
from foundation.telemetry import Telemetry, TurnTrace
from runners.media import Media, MediaSupport, refusal
from sessions_app.eventlog import Event, EventLog, RecordTooLarge, now_rfc3339
from sessions_app.records import SessionConfig, SessionRecord, SessionStatus
from sessions_app.storage import SessionFiles

from .approvals import Approvals
from .idempotency import IdempotencyKeys
from .ownership import Journal
from .pubsub import Fanout, Subscriber
from .session_host import ConfigChange, PendingInput, SessionHost, SpawnCount, TurnFailure
from .sink import EventSink, write_failure_message
from .steering import TurnSteers
from .takeover import QUEUED_INPUT_CANCELLED
from .toolcalls import ToolCalls
from .turn_records import TurnRecords
from .turnslots import TurnSlot

__all__ = ["SessionState"]

Actor = TypeVar("Actor")  # the actor type its host serves (SessionActor)


class SessionState(Generic[Actor]):
    """A loaded session's state: its record, queue, running turn, status transitions and events."""

    def __init__(
        self,
        host: SessionHost[Actor],
        record: SessionRecord,
        *,
        files: SessionFiles,
        log: EventLog,
        tool_calls: ToolCalls,
        telemetry: Telemetry,
        journal: Journal,
    ) -> None:
        self._host = host
        self._journal = journal  # the input journal (none for one instance alone): turns mark their input started
        self._covered_seq = 0  # the journal seq the last checkpoint covers
        self.send_lock = asyncio.Lock()  # sends: journal and log in one order
        self.record = record
        self.files = files
        self.log = log
        self.checkpoints = TurnRecords(files, log, telemetry)
        self.queue: deque[PendingInput] = deque()
        self.current: PendingInput | None = None
        self.turn_id = ""
        self.subscribers = Fanout()
        self.events = EventSink(log, self.subscribers, host.delta_budget)  # the log's writer, with what it owes
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
        self._turn_steers: TurnSteers | None = None  # the running turn's steers (steering.py)
        # The images the session's model takes, as its harness said when it last opened the
        # session here (runners.media.MediaSupport; None: it declared none); unknown until then.
        self._media_support: MediaSupport | None = None
        self._media_known = False
        self._config_saved: asyncio.Task[None] | None = None  # the row write of the last change applied

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

    # -- configuration -----------------------------------------------------------------------

    def apply_config(self, change: ConfigChange, *, seq: int = 0) -> None:
        """A session.configure takes effect: the record (its row written at once), the tools a
        call may name; the harness gets it at the next turn's attach (residency re-opens a
        runner opened with another configuration). In a fleet its journal entry (`seq`) is marked
        started once the row has it: an owner that takes over never applies it again."""
        config = {**self.record.config, **change.fields}
        self.record.config = cast(SessionConfig, config)
        if change.descriptors is not None:
            self.record.descriptors = change.descriptors
            self._tool_calls.retool(tuple(config.get("tools", ())))
        if "model" in change.fields:  # what the new model takes is learned at its next open
            self._media_support, self._media_known = None, False
        self.record.updated_at = now_rfc3339()
        self._host.mark_dirty(self)
        self._config_saved = asyncio.get_running_loop().create_task(self._save_config(seq))
        self._host.track(self._config_saved)

    async def _save_config(self, seq: int) -> None:
        try:
            await self._host.save_config(self)
        except Exception:  # the database: the change holds here; the row is written at the next change
            logger.exception("session config write failed", extra={"session_id": self.id})
            return
        if seq:
            try:
                await self._journal.mark_started(self.id, seq)
            except Exception:  # the database: a new owner would apply it again, to the same effect
                logger.warning("journal mark failed", exc_info=True, extra={"session_id": self.id, "seq": seq})

    async def config_saved(self) -> None:
        """Wait for the row write of the change applied last (none: at once)."""
        if self._config_saved is not None:
            await asyncio.shield(self._config_saved)

    # -- images ------------------------------------------------------------------------------

    def learn_media_support(self, support: MediaSupport | None) -> None:
        """What the harness's open result said (forgotten when a change sets another model)."""
        self._media_support, self._media_known = support, True

    def check_media_taken(self, media: list[Media]) -> None:
        """400 at the send for images the harness already said the model cannot take."""
        reason = refusal(media, self._media_support, model=self.record.config["model"]) if self._media_known else ""
        if reason:
            raise InvalidRequest(reason)

    def refuse_untaken_media(self, media: list[Media]) -> None:
        """Before the prompt: images the model cannot take end the turn (no model call)."""
        reason = refusal(media, self._media_support, model=self.record.config["model"])
        if reason:
            raise TurnFailure("invalid_request", reason)

    def _set_status(self, status: SessionStatus, *, input_id: str | None = None) -> None:
        """Record, then adopt, a new status. Raises OSError or RecordTooLarge with the status
        unchanged when its event cannot be appended."""
        # The database hears of statuses write-behind; the marker is on disk before the 202 of
        # the message that starts a turn, so a kill -9 right after it cannot hide the lost turn.
        if status == SessionStatus.RUNNING:
            self._mark_running(True)
        try:
            self.emit("session.status", {"status": status.value}, input_id=input_id)
        except (OSError, RecordTooLarge):
            if status == SessionStatus.RUNNING:
                with contextlib.suppress(OSError):
                    self._mark_running(False)
            raise
        self._adopt_status(status)

    def _adopt_status(self, status: SessionStatus) -> None:
        self.record.status = status
        self.events.deltas.clear()  # a turn starts or ends: no message is in progress
        self.record.updated_at = now_rfc3339()
        self._host.mark_dirty(self)
        if status != SessionStatus.RUNNING:
            with contextlib.suppress(OSError):
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

    @property
    def approvals(self) -> Approvals | None:
        """Where this session's tool calls wait for a person's decision (None: none may wait)."""
        return self._tool_calls.approvals

    # -- events ------------------------------------------------------------------------------

    def emit(self, type_: str, data: Any, *, input_id: str | None = None, event_id: str = "") -> Event:
        """Record (unless live-only, after any owed events) and publish one event. Raises
        OSError or RecordTooLarge."""
        return self.events.emit(type_, data, input_id=input_id, event_id=event_id)

    def subscribe(self, subscriber: Subscriber) -> tuple[int, bytes]:
        """Register a live subscriber; returns the log end it must replay up to, then the text of
        the message in progress as one assistant.delta frame (b"": none). No await: no gap."""
        return self.events.subscribe(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)

    def _cancel_queue(self) -> None:
        cancelled: list[int] = []
        try:
            while self.queue:
                queued = self.queue[0]
                self.emit("session.error", {"code": "conflict", "message": QUEUED_INPUT_CANCELLED}, input_id=queued.id)
                self.queue.popleft()
                cancelled.append(queued.seq)
        finally:
            self._journal_cancelled(cancelled)

    def _journal_cancelled(self, seqs: list[int]) -> None:
        """In a fleet: queued inputs whose cancellation is in the log are marked cancelled in the
        journal too, so an owner that takes over after this one dies (before its next upload)
        reports them cancelled rather than running them."""
        journaled = [seq for seq in seqs if seq]
        if not journaled:
            return
        self._host.track(asyncio.get_running_loop().create_task(self._mark_cancelled(self._journal, journaled)))

    async def _mark_cancelled(self, journal: Journal, seqs: list[int]) -> None:
        try:
            await journal.cancel(self.id, seqs)
        except Exception:  # the database: a new owner would run them; nothing else is at stake here
            logger.warning("journal cancel failed", exc_info=True, extra={"session_id": self.id, "seqs": seqs})

    def _fail_without_log(self, exc: BaseException, input_id: str, *, error_recorded: bool = False) -> None:
        """The log refused a turn's closing events: its outcome (the turn's session.error unless
        `error_recorded`), the queued inputs' cancellations and the failed status are owed (see
        EventSink), and the session fails."""
        logger.error("event append failed", extra={"session_id": self.id, "error": str(exc)})
        if not error_recorded:
            self.events.owe(
                "session.error", {"code": "brain_error", "message": write_failure_message(exc)}, input_id=input_id
            )
        cancelled: list[int] = []
        while self.queue:
            queued = self.queue.popleft()
            self.events.owe(
                "session.error", {"code": "conflict", "message": QUEUED_INPUT_CANCELLED}, input_id=queued.id
            )
            cancelled.append(queued.seq)
        self._journal_cancelled(cancelled)
        self.events.owe("session.status", {"status": SessionStatus.FAILED.value}, input_id=input_id)
        self._adopt_status(SessionStatus.FAILED)
