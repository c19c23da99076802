"""session.configure: a change of a running session's model, instructions, reasoning effort or
tools, checked as `POST /sessions` checks a configuration, then queued with its messages and
applied between the turns around it (README, "Changing a session's configuration")."""

from __future__ import annotations

import asyncio
from typing import Any

from foundation.errors import Forbidden, InvalidRequest

from .config_checks import MAX_KEY_BYTES, check_config, unavailable
from .eventlog import Event, new_id
from .operations import check_session_id
from .records import Principal, SessionRecord
from .runtime.engine import Engine
from .runtime.retooling import CONFIGURE, change_descriptors
from .runtime.session_host import ConfigChange

__all__ = ["CONFIGURABLE", "configure_session"]

# The fields a change may set; bindings and the model credential are fixed at create.
CONFIGURABLE = ("model", "instructions", "reasoning_effort", "tools")


async def configure_session(
    engine: Engine, principal: Principal, session_id: str, fields: dict[str, Any], *, key: str | None = None
) -> Event:
    """Record the change and queue it (applied at once when no turn runs or waits); the
    session.configure event. 400 for a change create would refuse in its configuration, 403 for
    tools the tenant may not use, 409 for a closed or interrupted session, nothing queued. A
    resent `key` answers with the change it first recorded (a key of another input: 409)."""
    if key is not None and len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequest(f"key exceeds {MAX_KEY_BYTES} bytes")
    if not fields:
        raise InvalidRequest("config must set at least one of " + ", ".join(CONFIGURABLE))
    extra = sorted(set(fields) - set(CONFIGURABLE))
    if extra:
        raise InvalidRequest(f"config.{extra[0]} cannot change; a change sets " + ", ".join(CONFIGURABLE))
    actor = await engine.get_actor(principal.tenant, check_session_id(principal, session_id))
    record = actor.record
    provider = check_config(engine, {**record.config, **fields})
    _check_model_credential(record, provider)
    descriptors = None
    if "tools" in fields:
        tools = list(fields["tools"])
        descriptors = await change_descriptors(engine.registry, record, tools)
        if descriptors is None:
            raise Forbidden(unavailable(await engine.registry.aunavailable_to(record.tenant, tools)))
    engine.check_writes(actor.id)
    change = ConfigChange(fields, descriptors, key)
    async with actor.send_lock:  # in order with the session's sends: journal order is queue order
        previous = actor.admit_change(change)
        if previous is not None:
            return previous
        token = engine.ownership.require_writable(actor.id)
        journal = engine.ownership.journal
        payload = {"type": CONFIGURE, "config": fields, **({"key": key} if key else {})}
        recorded = await journal.record(actor.id, input_id=new_id(), key=key, payload=payload, token=token)
        if not recorded.created:  # another instance journaled this key
            return Event.build(CONFIGURE, change.data, event_id=recorded.input_id)
        try:
            event, applied = actor.accept_change(change, input_id=recorded.input_id, seq=recorded.seq)
        except BaseException:
            await asyncio.shield(journal.discard(actor.id, recorded.seq))
            raise
    if applied:
        await actor.config_saved()  # the row has it before the 202
    return event


def _check_model_credential(record: SessionRecord, provider: str) -> None:
    """A session's own key or named key is its model provider's: another provider is refused."""
    source = record.model_credential
    current = record.config["model"].split("/", 1)[0]
    if source and provider != current:
        kind = "api_key" if "api_key" in source else "reference"
        raise InvalidRequest(
            f"the session's model_credential {kind} is a key of provider {current!r}: its model cannot"
            f" change to provider {provider!r}"
        )
