"""Child sessions of the `subagents` tool provider (tools_app's ChildSessions): created for the
caller's tenant through the create and send use-cases, linked to the parent session and call,
watched until their turn settles, interrupted with their parent's call. Wired by the application
object; nothing here sees a request."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import orjson

from foundation.errors import BrainError
from tools_app.providers.base import ProviderError
from tools_app.providers.subagents import ChildOutcome, ChildRefused, ChildSpec

from . import operations
from .eventlog import EventLog
from .records import Principal, SessionStatus
from .runtime.engine import Engine

__all__ = ["EngineChildSessions"]

READ_PAGE_EVENTS = 1000  # events read at a time when looking for the child's answer


def _settled_turn(log: EventLog, start: int, *, input_id: str) -> tuple[str | None, str]:
    """The last assistant.message text and the last session.error message of one input's turn,
    reading the log from its user.message on."""
    answer: str | None = None
    error = ""
    position, end = start, log.size
    while position < end:
        events = log.read(position, end=end, limit=READ_PAGE_EVENTS)
        if not events:
            break
        for event in events:
            if event.type not in ("assistant.message", "session.error"):
                continue
            envelope: dict[str, Any] = orjson.loads(event.line)
            if envelope.get("input_id") != input_id:
                continue
            data = envelope.get("data")
            if not isinstance(data, dict):
                continue
            if event.type == "assistant.message" and isinstance(data.get("text"), str):
                answer = data["text"]
            elif event.type == "session.error":
                error = f"{data.get('code', '')}: {data.get('message', '')}"
        position = events[-1].offset + len(events[-1].line) + 1
    return answer, error


@dataclass(frozen=True, slots=True)
class _Started:
    tenant: str
    parent: str  # the parent session, whose turn lends its slot while it waits
    offset: int  # of the child's first user.message
    input_id: str


class EngineChildSessions:
    """Runs sub-agents' sessions on this process's engine; each child is remembered, and counted
    as its tenant's live sub-agent, from its start until its wait ends."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._started: dict[str, _Started] = {}
        self._live: dict[str, int] = {}  # tenant -> children started whose wait has not ended

    async def depth(self, tenant: str, session_id: str) -> int:
        actor = await self._engine.get_actor(tenant, session_id)
        return actor.record.depth

    async def start(self, spec: ChildSpec) -> str:
        """The caps are checked and counted with no await in between, so parallel spawns of one
        turn or one tenant cannot all pass the same check."""
        engine = self._engine
        principal = Principal(tenant=spec.tenant, manage=True, label=f"sub-agent of session {spec.parent_session}")
        config: dict[str, Any] = {"model": spec.model, "tools": list(spec.tools)}
        if spec.instructions is not None:
            config["instructions"] = spec.instructions
        try:
            parent = await engine.get_actor(spec.tenant, spec.parent_session)
        except BrainError as exc:
            raise ProviderError(f"the sub-agent's session was not created: {exc.message}", reached=False) from exc
        live = self._live.get(spec.tenant, 0)
        if live >= spec.max_live:
            raise ChildRefused(
                f"tenant {spec.tenant!r} already has {spec.max_live} sub-agents at work "
                f"(max_live_per_tenant); try again when one has finished"
            )
        if not parent.claim_child_spawn(limit=spec.max_per_turn):
            raise ChildRefused(f"this turn has already started {spec.max_per_turn} sub-agents (max_children_per_turn)")
        self._live[spec.tenant] = live + 1
        try:
            record = await operations.create_session(
                engine,
                principal,
                harness=spec.harness,
                config=config,
                credentials=None,
                parent=parent.record,
                parent_call=spec.parent_call,
            )
        except BaseException as exc:
            self._uncount(spec.tenant)
            parent.unclaim_child_spawn()
            if isinstance(exc, BrainError):
                raise ProviderError(f"the sub-agent's session was not created: {exc.message}", reached=False) from exc
            raise
        try:
            event = await operations.send_message(engine, principal, record.id, text=spec.text, key=None, delivery=None)
        except BaseException as exc:
            self._uncount(spec.tenant)
            if isinstance(exc, BrainError):
                message = f"the sub-agent's session {record.id} did not accept the task: {exc.message}"
                raise ProviderError(message, reached=False) from exc
            raise
        self._started[record.id] = _Started(spec.tenant, spec.parent_session, event.offset, event.id)
        return record.id

    def _uncount(self, tenant: str) -> None:
        live = self._live.get(tenant, 0) - 1
        if live > 0:
            self._live[tenant] = live
        else:
            self._live.pop(tenant, None)

    async def wait(self, tenant: str, session_id: str) -> ChildOutcome:
        """While it waits, the parent's turn lends its `limits.active` slot to others (the child
        needs one): see TurnSlot."""
        started = self._started.get(session_id)
        try:
            actor = await self._engine.get_actor(tenant, session_id)
            if started is None:  # never started here; never misreport it
                return ChildOutcome(actor.status, None, "the sub-agent was not started by this server")
            parent = self._engine.actors.get(started.parent)
            async with parent.lend_turn_slot() if parent is not None else contextlib.nullcontext():
                while (task := actor.task) is not None:
                    await asyncio.wait({task})  # a cancelled wait leaves the child's turn running
            if actor.status == SessionStatus.RUNNING:  # cannot happen with one input; never misreport it
                return ChildOutcome(actor.status, None, "the turn did not settle")
            answer, error = await asyncio.to_thread(_settled_turn, actor.log, started.offset, input_id=started.input_id)
            return ChildOutcome(actor.status, answer, error)
        finally:
            if self._started.pop(session_id, None) is not None:
                self._uncount(tenant)

    def interrupt(self, tenant: str, session_id: str) -> None:
        actor = self._engine.actors.get(session_id)
        if actor is not None and actor.tenant == tenant:
            actor.interrupt()
