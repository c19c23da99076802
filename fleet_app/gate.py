"""What a session request must show before a non-owner spends a database round trip on it.

The request's bearer token is checked with the app object's token cache (sessions_app.auth's,
reached through the narrow protocol below): a missing or unknown token is refused with the
owner's own 401 `forbidden` before any owner lookup, so a flood of bad tokens costs the fleet's
database nothing beyond what the token cache spends on any instance. A session inspection
token the owner holds (and this instance does not) passes when its seal names the session
(foundation.inspection), and so does an unexpired emit token sealed for one of the session's
calls (foundation.emit_tokens), which the owner checks again with the call it names. Owner
lookups in flight are bounded: past the bound a request is a retryable 503, never a queued
query. No Django.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from foundation.emit_tokens import EMIT_PREFIX, emit_key, open_emit_token
from foundation.errors import Unauthorized
from foundation.inspection import inspection_key, is_sealed_for

__all__ = ["MAX_OWNER_LOOKUPS", "BearerCheck", "LookupBound", "authenticate_caller"]

# Owner lookups this instance runs at once: a few times the threads its database work shares
# (the loop's default executor), so a burst of requests for sessions owned elsewhere is
# answered 503 at once instead of queueing queries behind other tenants' writes.
MAX_OWNER_LOOKUPS = 16
AUTHORIZATION = b"authorization"


class PrincipalView(Protocol):
    @property
    def tenant(self) -> str: ...


class BearerCheck(Protocol):
    """What the gate needs of sessions_app.auth.TokenCache."""

    async def authenticate(self, header: str | None, /) -> PrincipalView: ...


def _authorization(scope: Mapping[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == AUTHORIZATION:
            return bytes(value).decode("latin-1")
    return None


async def authenticate_caller(
    tokens: BearerCheck, scope: Mapping[str, Any], session_id: str, *, key: bytes
) -> tuple[str, str]:
    """("tenant", the tenant whose token the request carries), ("inspection", the session)
    for an inspection token another instance sealed for this session, or ("emit", the session)
    for an unexpired emit token sealed for one of its calls (checked by its seal alone, never
    looked up). Raises the token cache's BrainError (Unauthorized 401, Overloaded 429 while too
    many token lookups are in flight)."""
    header = _authorization(scope)
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip().startswith(EMIT_PREFIX + "."):
        if open_emit_token(emit_key(key), token.strip(), session_id, now=time.time()) is None:
            raise Unauthorized("missing or invalid emit token")
        return ("emit", session_id)
    try:
        return ("tenant", (await tokens.authenticate(header)).tenant)
    except Unauthorized:
        if scheme.lower() == "bearer" and is_sealed_for(inspection_key(key), token.strip(), session_id):
            return ("inspection", session_id)
        raise


class LookupBound:
    """Owner lookups in flight; `enter` says whether one more may start (then `leave` once)."""

    def __init__(self, limit: int = MAX_OWNER_LOOKUPS) -> None:
        self._limit = limit
        self.in_flight = 0

    def enter(self) -> bool:
        if self.in_flight >= self._limit:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1
