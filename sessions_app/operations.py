"""The sessions API's operations (create, read, list, send, interrupt, resume, close, approve,
stream). Called by api.py, consumers.py and the admin; never sees a request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

from foundation.errors import Forbidden, InvalidRequest, NotFound, Unsupported
from foundation.hostconfig import MAX_REFERENCE_CHARS
from foundation.session_ids import canonical_session_id
from runners.media import Media, MediaError, is_data_url, read_media
from tools_app import db as tools_db
from tools_app.bindings import check_bindings
from tools_app.environments.checks import check_placement
from tools_app.vault import MODEL_CREDENTIAL_ALIAS, CredentialVault, SealedCredential, describe

from . import db
from .config_checks import MAX_KEY_BYTES, check_config, unavailable
from .eventlog import Event, EventLog, new_id
from .records import SEALED, ApprovalRecord, Principal, SessionConfig, SessionRecord
from .runtime.actor import SessionActor
from .runtime.approvals import MAX_REASON_CHARS
from .runtime.engine import Engine
from .runtime.ownership import Ownership
from .runtime.pubsub import Subscriber

__all__ = [
    "EventPage",
    "check_media",
    "check_session_id",
    "close_session",
    "close_stream",
    "create_session",
    "decide_approval",
    "get_session",
    "interrupt_session",
    "list_sessions",
    "open_stream",
    "read_events",
    "resume_session",
    "send_message",
]

# A provider key is a line (Bedrock's id:secret:session-token the longest, about 2 KiB); the
# bound keeps a hostile body from sealing megabytes into the vault and every checkpoint.
MAX_MODEL_KEY_BYTES = 8 << 10


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[Event]
    next_cursor: str


def check_session_id(principal: Principal, session_id: str) -> str:
    """The session id, lower-cased; 404 when malformed, 403 outside the token's session limit."""
    session = canonical_session_id(session_id)
    if session is None:
        raise NotFound("session not found")
    if principal.session and principal.session != session:
        raise Forbidden("token is limited to another session")
    return session


async def create_session(
    engine: Engine,
    principal: Principal,
    *,
    harness: str,
    config: dict[str, Any],
    credentials: list[Any] | None,
    model_credential: dict[str, Any] | None = None,
    parent: SessionRecord | None = None,
    parent_call: str = "",
) -> SessionRecord:
    """`parent`, `parent_call`: the session and tool call a sub-agent's session is created by;
    `model_credential`: {"api_key": KEY} or {"reference": NAME}, the key its model calls use."""
    if not principal.manage or principal.session:
        raise Forbidden("creating sessions needs a manage token without a session limit")
    if harness not in engine.config.harnesses:
        raise Unsupported(f"harness {harness!r} is not configured")
    provider = check_config(engine, config)
    tools = config["tools"]
    source, model_key = _model_credential(engine, model_credential, provider=provider)
    if credentials and engine.config.credential_keys is None:
        raise Unsupported("private binding credentials need credential_keys in the host config")
    bindings = await check_bindings(
        config.pop("bindings", None) or [],
        tenant=principal.tenant,
        tools=tools,
        hub=engine.executors,
        providers=engine.providers,
    )
    aliases = {binding["alias"] for binding in bindings.bindings}
    values = _credential_values(credentials or [], aliases=aliases)
    descriptors = await engine.registry.adescriptors_for(principal.tenant, tools)
    if descriptors is None:
        raise Forbidden(unavailable(await engine.registry.aunavailable_to(principal.tenant, tools)))
    placement = None
    if config.get("placement") is not None:
        taken = {*tools, *(descriptor["name"] for descriptor in bindings.descriptors)}
        placement = await check_placement(
            config.pop("placement"),
            tenant=principal.tenant,
            offered={environment.name: environment for environment in engine.config.environments},
            taken=taken,
            aliases=set(aliases),
            hub=engine.executors,
            exports=engine.tool_path.components.exports,
            service_schemas={binding.name: binding.descriptor()["input_schema"] for binding in engine.config.tools},
        )
        config["placement"] = placement.saved
    if bindings.bindings:
        config["bindings"] = bindings.bindings
    record = SessionRecord.new(
        id=new_id(),
        checkpoint=new_id(),
        tenant=principal.tenant,
        harness=harness,
        config=cast(SessionConfig, config),  # checked above and by the request's schema
        descriptors=[*descriptors, *bindings.descriptors, *(placement.descriptors if placement else ())],
    )
    if parent is not None:
        record.parent_session, record.parent_call, record.depth = parent.id, parent_call, parent.depth + 1
    record.model_credential = source
    if model_key is not None:
        values[MODEL_CREDENTIAL_ALIAS] = model_key
    if values:
        await _store_credentials(engine, record, values)
    else:
        await engine.create(record)
    for executor in [*bindings.executors, *(placement.executors if placement else ())]:
        engine.executors.bind(executor, record.id)
    return record


def _model_credential(
    engine: Engine, value: dict[str, Any] | None, *, provider: str
) -> tuple[dict[str, str], str | None]:
    """The session's model key source (records.model_credential_source) and the key to seal,
    if any. 400 for a body that is not exactly one of api_key or reference, a reference the host
    config does not declare or one declared for another provider; 422 for an api_key on a server
    without credential_keys (nothing to seal it with)."""
    if value is None:
        return {}, None
    given = {name: item for name, item in value.items() if item is not None}
    if len(given) != 1:
        raise InvalidRequest("model_credential must have exactly one of api_key or reference")
    api_key, reference = given.get("api_key"), given.get("reference")
    if api_key is not None:
        if not 0 < len(api_key) <= MAX_MODEL_KEY_BYTES or not all("!" <= char <= "~" for char in api_key):
            raise InvalidRequest(
                f"model_credential.api_key must be 1-{MAX_MODEL_KEY_BYTES} printable ASCII characters without spaces"
            )
        if engine.config.credential_keys is None:
            raise Unsupported("a model_credential api_key needs credential_keys in the host config")
        return {"api_key": SEALED}, api_key
    assert isinstance(reference, str)  # the schema's type
    shown = reference[:MAX_REFERENCE_CHARS]
    declared = engine.config.model_credentials.get(reference)
    if declared is None:
        raise InvalidRequest(f"model_credential.reference {shown!r} is not declared in the host config")
    if declared.provider != provider:
        raise InvalidRequest(
            f"model_credential.reference {shown!r} is a key of provider {declared.provider!r},"
            f" not of the session's model provider {provider!r}"
        )
    return {"reference": reference}, None


def _credential_values(credentials: list[Any], *, aliases: set[str]) -> dict[str, Any]:
    """`credentials` of a create request by binding alias: each names one of the session's
    bindings, at most once, with a value (null is no credential at all)."""
    values: dict[str, Any] = {}
    for item in credentials:
        alias, value = (
            (item.get("binding"), item.get("value")) if isinstance(item, dict) else (item.binding, item.value)
        )
        if alias not in aliases:
            raise InvalidRequest(f"credential binding {alias!r} is not a binding of the session")
        if alias in values:
            raise InvalidRequest(f"credential binding {alias!r} is given twice")
        if value is None:
            raise InvalidRequest(f"credential of binding {alias!r} has no value")
        values[alias] = value
    return values


async def _store_credentials(engine: Engine, record: SessionRecord, values: dict[str, Any]) -> None:
    """Seal the credentials and store them before the session exists, so its first checkpoint
    carries them; a session that then fails to be created leaves none behind."""
    vault = CredentialVault.configured(engine.config.credential_keys, engine.secrets)
    assert vault is not None  # create_session refused credentials (and api_keys) without credential_keys
    sealed: dict[str, SealedCredential] = {}
    for alias, value in values.items():
        try:
            sealed[alias] = vault.seal(record.tenant, record.id, alias, value)
        except ValueError as exc:
            raise InvalidRequest(f"{describe(alias)}: {exc}") from None
    record.credential_bindings = sorted(alias for alias in sealed if alias != MODEL_CREDENTIAL_ALIAS)
    engine.check_writes()
    await tools_db.astore_credentials(record.tenant, record.id, sealed)
    try:
        await engine.create(record)
    except BaseException:
        await asyncio.shield(tools_db.adelete_credentials(record.id))
        raise


async def _actor(engine: Engine, principal: Principal, session_id: str) -> SessionActor:
    return await engine.get_actor(principal.tenant, check_session_id(principal, session_id))


async def get_session(engine: Engine, principal: Principal, session_id: str) -> SessionRecord:
    return (await _actor(engine, principal, session_id)).record


async def list_sessions(engine: Engine, principal: Principal, *, after: str, limit: int) -> list[SessionRecord]:
    """The tenant's local sessions, merged with those the discovery index knows from other
    servers (local rows win), in id order."""
    records = await db.alist_sessions(principal.tenant, after=after, limit=limit, only=principal.session)
    merged = {record.id: engine.loaded_record(record.id) or record for record in records}
    for remote in await engine.remote_sessions(principal.tenant, after, limit):
        if remote.id not in merged and (not principal.session or remote.id == principal.session):
            merged[remote.id] = remote
    return [merged[session_id] for session_id in sorted(merged)[:limit]]


def _validate_message(
    text: str | None, key: str | None, delivery: str | None, media: list[Any] | None, *, input_bytes: int
) -> None:
    if delivery not in (None, "queue", "steer"):
        raise InvalidRequest("delivery must be queue or steer")
    if delivery == "steer" and media:
        raise InvalidRequest("a steer is text only: send media with delivery queue")
    if text is None or not text.strip():
        raise InvalidRequest("text must not be blank")
    if len(text.encode()) > input_bytes:
        raise InvalidRequest("text exceeds input_bytes")
    if media is not None and len(text.encode()) + sum(len(str(item.get("url", ""))) for item in media) > input_bytes:
        raise InvalidRequest("text and media urls together exceed input_bytes")
    if key is not None and len(key.encode()) > MAX_KEY_BYTES:
        raise InvalidRequest("key exceeds 128 bytes")


def _read_media(items: list[Any], *, decode: bool) -> list[Media]:
    try:
        return read_media(items, decode=decode)
    except MediaError as exc:
        raise InvalidRequest(str(exc)) from None


async def check_media(items: list[Any] | None) -> list[Media]:
    """A send's images, checked: the shape on the loop, then the data: URLs decoded in a worker
    thread (up to input_bytes, 1 MiB at most, of base64: about a millisecond of the loop each)."""
    if not items:
        if items is not None:
            raise InvalidRequest("media must not be empty when given")
        return []
    media = _read_media(items, decode=False)
    if any(is_data_url(item["url"]) for item in media):
        return await asyncio.to_thread(_read_media, items, decode=True)
    return media


async def send_message(
    engine: Engine,
    principal: Principal,
    session_id: str,
    *,
    text: str | None,
    key: str | None,
    delivery: str | None,
    media: list[Any] | None = None,
    traceparent: str = "",
) -> Event:
    """`media`: the images of the message (runners.media's rules), 400 naming the item that
    breaks them, or when the session's harness said its model takes no such image. `delivery`
    "steer": guidance for the running turn (README, "Steering a running turn"); 422
    `unsupported` when the session's harness does not take steers."""
    _validate_message(text, key, delivery, media, input_bytes=engine.limits.input_bytes)
    images = await check_media(media)
    actor = await _actor(engine, principal, session_id)
    if delivery == "steer":
        harness = engine.config.harnesses.get(actor.harness)
        if harness is None or not harness.steering:
            raise Unsupported(f"harness {actor.harness!r} does not take steers; send with delivery queue")
    actor.check_media_taken(images)
    engine.check_writes(session_id)
    assert text is not None
    return await _send(engine.ownership, actor, text, images, key or None, traceparent, delivery=delivery or "queue")


async def _send(
    ownership: Ownership,
    actor: SessionActor,
    text: str,
    media: list[Media],
    key: str | None,
    traceparent: str,
    *,
    delivery: str = "queue",
) -> Event:
    """The input is admitted once, then in the journal (under the lease held: in a fleet) before
    it is in the log and before the 202; the session's sends take its lock in turn, so journal
    order is queue order. A key another instance journaled answers with that input's event."""
    async with actor.send_lock:
        data, previous = actor.admit(text, key=key, media=media, delivery=delivery)
        if previous is not None:
            return previous
        token = ownership.require_writable(actor.id)
        journal = ownership.journal
        recorded = await journal.record(actor.id, input_id=new_id(), key=key, payload=data, token=token)
        if not recorded.created:
            return Event.build("user.message", data, event_id=recorded.input_id)
        try:
            return actor.accept(data, key=key, traceparent=traceparent, input_id=recorded.input_id, seq=recorded.seq)
        except BaseException:
            await asyncio.shield(journal.discard(actor.id, recorded.seq))
            raise


def _require_writable(engine: Engine, actor: SessionActor) -> None:
    """In a fleet, every write to a session (send, interrupt, close, resume, an approval's
    decision) is made under this instance's live lease on it, else 503 unavailable (retryable):
    an owner paused or cut off past its lease changes nothing, whatever it still has loaded.
    Requests for a session another instance owns never get here: routing forwards them."""
    engine.ownership.require_writable(actor.id)


async def interrupt_session(engine: Engine, principal: Principal, session_id: str) -> None:
    actor = await _actor(engine, principal, session_id)
    _require_writable(engine, actor)
    actor.interrupt()


async def decide_approval(
    engine: Engine, principal: Principal, session_id: str, approval_id: str, *, decision: str, reason: str | None
) -> ApprovalRecord:
    """Approve or reject a tool call waiting for a decision: a non-read-only token of the
    session's tenant; 404 for another tenant's, 409 once settled."""
    if principal.read_only:
        raise Forbidden("token is read-only")
    if decision not in ("approve", "reject"):
        raise InvalidRequest("decision must be approve or reject")
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest(f"reason exceeds {MAX_REASON_CHARS} characters")
    actor = await _actor(engine, principal, session_id)
    _require_writable(engine, actor)
    approvals = actor.approvals
    if approvals is None:
        raise NotFound("approval not found")
    return await approvals.decide(
        approval_id.lower(),
        approve=decision == "approve",
        decided_by=principal.label or f"a token of tenant {principal.tenant}",
        reason=(reason or "").strip(),
    )


async def resume_session(engine: Engine, principal: Principal, session_id: str) -> SessionRecord:
    actor = await _actor(engine, principal, session_id)
    _require_writable(engine, actor)
    await actor.resume()
    return actor.record


async def close_session(engine: Engine, principal: Principal, session_id: str) -> None:
    actor = await _actor(engine, principal, session_id)
    _require_writable(engine, actor)
    actor.close()
    engine.executors.revoke_session(actor.id)  # spec: closing a session revokes its executor tokens


def _page(log: EventLog, after: str, *, end: int, limit: int) -> EventPage:
    events = log.read(log.position_after(after), end=end, limit=limit)
    return EventPage(events, events[-1].cursor if events else after)


async def read_events(engine: Engine, principal: Principal, session_id: str, *, after: str, limit: int) -> EventPage:
    """A page of retained events after a cursor, read in a worker thread: a page may hold up to
    1,000 records of up to 4 MiB, too much to read on the event loop."""
    actor = await _actor(engine, principal, session_id)
    # the end is fixed on the loop: the page holds only records appended before the request
    return await asyncio.to_thread(_page, actor.log, after, end=actor.log.size, limit=limit)


async def open_stream(
    engine: Engine, principal: Principal, session_id: str, *, after: str
) -> tuple[SessionActor, Subscriber, int, int, bytes]:
    """Register a live subscriber, then return what to replay: log bytes [start, end), then the
    text of the message in progress (an assistant.delta frame, or b"")."""
    actor = await _actor(engine, principal, session_id)
    start = await asyncio.to_thread(actor.log.position_after, after) if after else 0  # a cursor reads a line
    engine.subscriber_slots.acquire()
    subscriber = Subscriber(max_events=engine.limits.subscriber_events, max_bytes=engine.limits.subscriber_bytes)
    end, partial = actor.subscribe(subscriber)
    if engine.draining:  # stopping: the stream replays what there is and ends (reconnect elsewhere)
        subscriber.close()
    return actor, subscriber, start, end, partial


def close_stream(engine: Engine, actor: SessionActor, subscriber: Subscriber) -> None:
    actor.unsubscribe(subscriber)
    subscriber.close()
    engine.subscriber_slots.release()
