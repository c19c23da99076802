"""Child sessions of the `subagents` tool provider (tools_app's ChildSessions): created for the
caller's tenant through the create and send use-cases, linked to the parent session and call,
watched until their turn settles, interrupted with their parent's call. Wired by the application
object; nothing here sees a request."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from brainsite.errors import BrainError
from tools_app.providers.base import ProviderError
from tools_app.providers.subagents import ChildOutcome, ChildSpec

from . import services
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


class EngineChildSessions:
    """Runs sub-agents' sessions on this process's engine; each child is remembered from its
    start until its wait ends (by its first input's offset and id)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._inputs: dict[str, tuple[int, str]] = {}

    async def depth(self, tenant: str, session_id: str) -> int:
        actor = await self._engine.get_actor(tenant, session_id)
        return actor.record.depth

    async def start(self, spec: ChildSpec) -> str:
        engine = self._engine
        principal = Principal(tenant=spec.tenant, manage=True, label=f"sub-agent of session {spec.parent_session}")
        config: dict[str, Any] = {"model": spec.model, "tools": list(spec.tools)}
        if spec.instructions is not None:
            config["instructions"] = spec.instructions
        try:
            parent = (await engine.get_actor(spec.tenant, spec.parent_session)).record
            record = await services.create_session(
                engine,
                principal,
                harness=spec.harness,
                config=config,
                credentials=None,
                parent=parent,
                parent_call=spec.parent_call,
            )
        except BrainError as exc:
            raise ProviderError(f"the sub-agent's session was not created: {exc.message}", reached=False) from exc
        try:
            event = await services.send_message(engine, principal, record.id, text=spec.text, key=None, delivery=None)
        except BrainError as exc:
            message = f"the sub-agent's session {record.id} did not accept the task: {exc.message}"
            raise ProviderError(message, reached=False) from exc
        self._inputs[record.id] = (event.offset, event.id)
        return record.id

    async def wait(self, tenant: str, session_id: str) -> ChildOutcome:
        try:
            actor = await self._engine.get_actor(tenant, session_id)
            while (task := actor.task) is not None:
                await asyncio.wait({task})  # a cancelled wait leaves the child's turn running
            start, input_id = self._inputs[session_id]
            if actor.status == SessionStatus.RUNNING:  # cannot happen with one input; never misreport it
                return ChildOutcome(actor.status, None, "the turn did not settle")
            answer, error = await asyncio.to_thread(_settled_turn, actor.log, start, input_id=input_id)
            return ChildOutcome(actor.status, answer, error)
        finally:
            self._inputs.pop(session_id, None)

    def interrupt(self, tenant: str, session_id: str) -> None:
        actor = self._engine.actors.get(session_id)
        if actor is not None and actor.tenant == tenant:
            actor.interrupt()
