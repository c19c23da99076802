"""Bearer authentication: token -> Principal, from SHA-256 digests only, with a small cache."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, cast

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from ninja.security.base import AuthBase

from foundation.app_object import SCOPE_KEY
from foundation.errors import Forbidden, Overloaded, Unauthorized
from foundation.inspection import seal_inspection
from foundation.principal import Principal

from . import db

__all__ = ["BearerAuth", "TokenCache", "tokens_of"]

MAX_AUTHORIZATION_CHARS = 1024  # spec: longer Authorization headers are 401
CACHE_SECONDS = 30.0  # admin changes clear the cache at once; this bounds other drift
GRANT_ENTRIES = 10_000  # cached valid tokens; unknown tokens never take these places
UNKNOWN_ENTRIES = 10_000  # negative cache, its own cap: a flood of random tokens evicts only itself
MAX_PENDING_LOOKUPS = 64  # database lookups in flight at once; beyond it a new token is 429


class TokenCache:
    """Bearer token -> Principal for this process: cached database grants, a bounded negative
    cache, and live inspection grants. Owned by the application object; the admin clears it
    when tokens change.

    A token is looked up in the database at most once per CACHE_SECONDS, concurrent requests
    with the same token share one lookup, and at most MAX_PENDING_LOOKUPS run at once.
    """

    def __init__(self, *, inspection_key: bytes | None = None) -> None:
        # in a fleet, inspection tokens are sealed so the other instances pass them on to the
        # owner (foundation.inspection) instead of refusing a token they do not hold
        self._inspection_key = inspection_key
        self._grants: dict[str, tuple[Principal, float]] = {}
        self._unknown: OrderedDict[str, float] = OrderedDict()  # digest -> expiry, oldest first
        self._lookups: dict[str, asyncio.Future[Principal | None]] = {}
        self._inspections: dict[str, Principal] = {}  # digest -> grant, only while its tool call runs
        self._streams: dict[str, set[Callable[[], None]]] = {}  # digest -> closers of streams it opened
        self._rechecks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def forget(self) -> None:
        """Drop cached grants (a token was created, changed or deleted in the admin), and close
        the streams of every token the database no longer grants. Safe from any thread."""
        self._grants.clear()
        self._unknown.clear()
        if self._streams and self._loop is not None:
            self._loop.call_soon_threadsafe(self._recheck_streams)

    def _recheck_streams(self) -> None:
        task = asyncio.get_running_loop().create_task(self._close_revoked_streams())
        self._rechecks.add(task)
        task.add_done_callback(self._rechecks.discard)

    async def _close_revoked_streams(self) -> None:
        for digest in [digest for digest in self._streams if digest not in self._inspections]:
            if await self._grant(digest) is None:
                self._close_streams(digest)

    def _close_streams(self, digest: str) -> None:
        for close in self._streams.pop(digest, set()):
            close()

    def track_stream(self, header: str | None, close: Callable[[], None]) -> Callable[[], None]:
        """Close this stream when the token that opened it is revoked; returns the untracker.
        Call after `authenticate` accepted the same header."""
        digest = db.digest_token((header or "").partition(" ")[2].strip())
        self._loop = asyncio.get_running_loop()
        self._streams.setdefault(digest, set()).add(close)

        def untrack() -> None:
            closers = self._streams.get(digest)
            if closers is not None:
                closers.discard(close)
                if not closers:
                    del self._streams[digest]

        return untrack

    def grant_inspection(self, session_id: str, tenant: str) -> str:
        """A read-only token limited to one session, for an `inspect_session` tool call."""
        token = secrets.token_urlsafe(32)
        if self._inspection_key is not None:
            token = seal_inspection(self._inspection_key, session_id, token)
        self._inspections[db.digest_token(token)] = Principal(tenant=tenant, read_only=True, session=session_id)
        return token

    def revoke_inspection(self, token: str) -> None:
        """The tool call ended: the token stops working and the streams it opened end."""
        digest = db.digest_token(token)
        self._inspections.pop(digest, None)
        self._close_streams(digest)

    async def authenticate(self, header: str | None) -> Principal:
        if not header or len(header) > MAX_AUTHORIZATION_CHARS:
            raise Unauthorized("missing or invalid bearer token")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("missing or invalid bearer token")
        digest = db.digest_token(token.strip())
        inspection = self._inspections.get(digest)
        if inspection is not None:
            return inspection
        principal = await self._grant(digest)
        if principal is None:
            raise Unauthorized("missing or invalid bearer token")
        return principal

    async def _grant(self, digest: str) -> Principal | None:
        now = time.monotonic()
        cached = self._grants.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        unknown_until = self._unknown.get(digest)
        if unknown_until is not None and unknown_until > now:
            return None
        pending = self._lookups.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        if len(self._lookups) >= MAX_PENDING_LOOKUPS:
            raise Overloaded("too many token lookups in flight")
        pending = asyncio.get_running_loop().create_future()
        self._lookups[digest] = pending
        try:
            principal: Principal | None = await db.afind_grant(digest)
        except BaseException as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._lookups[digest]
        self._remember(digest, principal, expires=time.monotonic() + CACHE_SECONDS)
        pending.set_result(principal)
        return principal

    def _remember(self, digest: str, principal: Principal | None, *, expires: float) -> None:
        if principal is None:
            self._unknown[digest] = expires
            self._unknown.move_to_end(digest)
            while len(self._unknown) > UNKNOWN_ENTRIES:
                self._unknown.popitem(last=False)
            return
        self._unknown.pop(digest, None)
        if len(self._grants) >= GRANT_ENTRIES:
            now = time.monotonic()
            self._grants = {key: value for key, value in self._grants.items() if value[1] > now}
            if len(self._grants) >= GRANT_ENTRIES:
                self._grants.clear()
        self._grants[digest] = (principal, expires)


def tokens_of(scope: Mapping[str, Any]) -> TokenCache:
    """The token cache of the application object the ASGI entry attached to this scope."""
    tokens: TokenCache = scope[SCOPE_KEY].tokens
    return tokens


class BearerAuth(AuthBase):
    """ninja auth callable; failures raise so the API renders the spec's envelope."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __init__(self) -> None:
        super().__init__()
        self.is_async = True

    async def __call__(self, request: HttpRequest) -> Principal:
        scope: Mapping[str, Any] = cast(ASGIRequest, request).scope
        principal = await tokens_of(scope).authenticate(request.headers.get("Authorization"))
        if principal.read_only and request.method not in ("GET", "HEAD"):
            raise Forbidden("token is read-only")
        return principal
