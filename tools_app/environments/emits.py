"""Extension events from tool services: each placed call sent to an HTTP, SSE or MCP tool service
carries a capability to post that call's events (the HTTP headers `Brain-Emit-URL` and
`Brain-Emit-Token`, MCP `_meta["brain.dev/emit"]`). The URL is under the session's routes, so a
fleet forwards it to the owner; the token (foundation.emit_tokens) is bound to the session, the
call and an expiry. The owner holds the running calls' emitters here: a POST is answered after
the event is in the session's log, refused (409) once the call has ended, and checked like any
other emitter's event (events.py). Imports no runtime or API module."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from foundation.emit_tokens import open_emit_token, seal_emit_token
from foundation.errors import Conflict, InvalidRequest, Unauthorized

from .events import EmitRefused, Emitter

__all__ = ["EMIT_MARGIN_SECONDS", "EmitCapability", "EmitGrants", "emit_path"]

# A token outlives its call's deadline by this much (the owner refuses it once the call ended in
# any case): a service's emit that is in flight when the deadline passes is answered 409, not 401.
EMIT_MARGIN_SECONDS = 30


def emit_path(session_id: str, call_id: str) -> str:
    return f"/sessions/{session_id}/tool-calls/{call_id}/events"


@dataclass(frozen=True, slots=True)
class EmitCapability:
    url: str
    token: str

    def __repr__(self) -> str:  # the token is a credential: never logged
        return f"EmitCapability(url={self.url!r})"


@dataclass(frozen=True, slots=True)
class _Running:
    session_id: str
    emit: Emitter


class EmitGrants:
    """The emit capabilities of the calls running in this process. `key` is the fleet's emit key
    (foundation.emit_tokens.emit_key), or None on a single instance: a key of this process."""

    def __init__(self, key: bytes | None, *, public_url: str) -> None:
        self.key = key if key is not None else secrets.token_bytes(32)
        self._public_url = public_url.rstrip("/")
        self._running: dict[str, _Running] = {}  # call id -> its emitter, while the call runs

    def grant(self, session_id: str, call_id: str, emit: Emitter, *, seconds: float) -> EmitCapability:
        """The capability of a call that runs for at most `seconds`; `revoke` it when it ends."""
        expires = int(time.time() + seconds) + EMIT_MARGIN_SECONDS
        self._running[call_id] = _Running(session_id, emit)
        token = seal_emit_token(self.key, session_id, call_id, expires)
        return EmitCapability(self._public_url + emit_path(session_id, call_id), token)

    def revoke(self, call_id: str) -> None:
        self._running.pop(call_id, None)

    def check(self, session_id: str, call_id: str, authorization: str | None) -> None:
        """401 unless the bearer token was sealed for this session's call and has not expired."""
        scheme, _, token = (authorization or "").partition(" ")
        named = open_emit_token(self.key, token.strip(), session_id, now=time.time())
        if scheme.lower() != "bearer" or named is None or named != call_id:
            raise Unauthorized("missing or invalid emit token")

    async def emit(self, session_id: str, call_id: str, kind: object, data: object) -> None:
        """Append one event of a running call (its token checked): returns once it is committed;
        409 when the call is not running here, 400 when the event is refused."""
        running = self._running.get(call_id)
        if running is None or running.session_id != session_id:
            raise Conflict("the call is over: its events can no longer be recorded")
        if not isinstance(kind, str):
            raise InvalidRequest("an event kind is 1-64 of a-z 0-9 _ . - starting with a letter")
        try:
            await running.emit(kind, data)
        except EmitRefused as exc:
            if self._running.get(call_id) is None:
                raise Conflict(str(exc)) from None
            raise InvalidRequest(str(exc)) from None
