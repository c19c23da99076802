"""Use-cases of the sessions API. Called by api.py and consumers.py; never sees a request."""

from __future__ import annotations

import re
from typing import Any

from brainsite.errors import Forbidden, InvalidRequest, NotFound, Unsupported
from tools_app import registry

from . import db
from .eventlog import Event, EventLog
from .records import Principal, SessionRecord
from .runtime import current_engine
from .runtime.actor import SessionActor
from .runtime.engine import new_session_record
from .runtime.pubsub import Subscriber

__all__ = [
    "close_session",
    "create_session",
    "get_session",
    "interrupt_session",
    "list_sessions",
    "open_stream",
    "read_events",
    "resume_session",
    "send_message",
]

MAX_MODEL_CHARS = 256  # spec: config.model up to 256 characters
MAX_TOOLS = 128  # spec: up to 128 tools per session
MAX_KEY_BYTES = 128  # spec: idempotency keys up to 128 bytes
REASONING_EFFORTS = frozenset({"off", "minimal", "low", "medium", "high", "xhigh", "max"})
SESSION_ID = re.compile(r"^[0-9a-fA-F]{32}$")


def _session_id(principal: Principal, session_id: str) -> str:
    if not SESSION_ID.fullmatch(session_id):
        raise NotFound("session not found")
    session_id = session_id.lower()
    if principal.session and principal.session != session_id:
        raise Forbidden("token is limited to another session")
    return session_id


async def create_session(
    principal: Principal, *, harness: str, config: dict[str, Any], credentials: list[Any] | None
) -> dict[str, Any]:
    if not principal.manage or principal.session:
        raise Forbidden("creating sessions needs a manage token without a session limit")
    engine = current_engine()
    if harness not in engine.config.harnesses:
        raise Unsupported(f"harness {harness!r} is not configured")
    model = config["model"]
    provider, _, model_name = model.partition("/")
    if not provider or not model_name or len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest("config.model must be provider/model, up to 256 characters")
    if provider not in engine.config.providers:
        raise InvalidRequest(f"model provider {provider!r} is not configured")
    effort = config.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise InvalidRequest("config.reasoning_effort must be one of " + ", ".join(sorted(REASONING_EFFORTS)))
    tools = config["tools"]
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest("config.tools allows at most 128 tools")
    if len(set(tools)) != len(tools):
        raise InvalidRequest("config.tools lists a tool twice")
    instructions = config.get("instructions")
    if instructions is not None and len(instructions.encode()) > engine.limits.input_bytes:
        raise InvalidRequest("config.instructions exceeds input_bytes")
    if config.get("bindings") or credentials:
        raise Unsupported("tool bindings and credentials are not enabled on this server")
    config.pop("bindings", None)
    descriptors = await registry.adescriptors_for(principal.tenant, tools)
    if descriptors is None:
        raise Forbidden("a requested tool is not available to this tenant")
    record = new_session_record(tenant=principal.tenant, harness=harness, config=config, descriptors=descriptors)
    await engine.create(record)
    return record.as_wire()


async def _actor(principal: Principal, session_id: str) -> SessionActor:
    return await current_engine().get_actor(principal.tenant, _session_id(principal, session_id))


async def get_session(principal: Principal, session_id: str) -> dict[str, Any]:
    return (await _actor(principal, session_id)).record.as_wire()


async def list_sessions(principal: Principal, *, after: str, limit: int) -> dict[str, Any]:
    engine = current_engine()
    records = await db.alist_sessions(principal.tenant, after=after, limit=limit, only=principal.session)
    merged: list[SessionRecord] = [engine.loaded_record(record.id) or record for record in records]
    return {"sessions": [record.as_wire() for record in merged]}


def _validate_message(text: str | None, key: str | None, delivery: str | None, *, input_bytes: int) -> None:
    if delivery == "steer":
        raise Unsupported("delivery steer is not supported")
    if delivery not in (None, "queue"):
        raise InvalidRequest("delivery must be queue")
    if text is None or not text.strip():
        raise InvalidRequest("text must not be blank")
    if len(text.encode()) > input_bytes:
        raise InvalidRequest("text exceeds input_bytes")
    if key is not None and len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequest("key exceeds 128 bytes")


async def send_message(
    principal: Principal,
    session_id: str,
    *,
    text: str | None,
    key: str | None,
    delivery: str | None,
    traceparent: str = "",
) -> dict[str, Any]:
    _validate_message(text, key, delivery, input_bytes=current_engine().limits.input_bytes)
    actor = await _actor(principal, session_id)
    assert text is not None
    return actor.send(text, key=key or None, traceparent=traceparent).as_dict()


async def interrupt_session(principal: Principal, session_id: str) -> dict[str, str]:
    (await _actor(principal, session_id)).interrupt()
    return {"status": "interrupt_requested"}


async def resume_session(principal: Principal, session_id: str) -> dict[str, Any]:
    actor = await _actor(principal, session_id)
    await actor.resume()
    return actor.record.as_wire()


async def close_session(principal: Principal, session_id: str) -> dict[str, str]:
    (await _actor(principal, session_id)).close()
    return {"status": "close_requested"}


async def read_events(principal: Principal, session_id: str, *, after: str, limit: int) -> dict[str, Any]:
    actor = await _actor(principal, session_id)
    log: EventLog = actor.log
    start = log.position_after(after)
    events: list[Event] = log.read(start, limit=limit)
    next_cursor = events[-1].cursor if events else after
    return {"events": [event.as_dict() for event in events], "next_cursor": next_cursor}


async def open_stream(
    principal: Principal, session_id: str, *, after: str
) -> tuple[SessionActor, Subscriber, int, int]:
    """Register a live subscriber, then return what to replay: log bytes [start, end)."""
    engine = current_engine()
    actor = await _actor(principal, session_id)
    start = actor.log.position_after(after)
    engine.subscriber_slots.acquire()
    subscriber = Subscriber(max_events=engine.limits.subscriber_events, max_bytes=engine.limits.subscriber_bytes)
    end = actor.subscribe(subscriber)
    return actor, subscriber, start, end


def close_stream(actor: SessionActor, subscriber: Subscriber) -> None:
    actor.unsubscribe(subscriber)
    subscriber.close()
    current_engine().subscriber_slots.release()
