"""Bearer authentication: token -> Principal, from SHA-256 digests only, with a small cache."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any, cast

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from ninja.security.base import AuthBase

from brainsite.errors import Forbidden, Unauthorized
from brainsite.principal import Principal

from . import db

__all__ = ["BearerAuth", "TokenCache", "tokens_of"]

MAX_AUTHORIZATION_CHARS = 1024  # spec: longer Authorization headers are 401
CACHE_SECONDS = 30.0  # admin changes clear the cache at once; this bounds other drift
CACHE_ENTRIES = 10_000  # bounded: an attacker's random tokens cannot grow memory


class TokenCache:
    """Bearer token -> Principal for this process: cached database grants and live inspection
    grants. Owned by the application object; the admin clears it when tokens change."""

    def __init__(self) -> None:
        self._grants: dict[str, tuple[Principal | None, float]] = {}
        self._inspections: dict[str, Principal] = {}  # digest -> grant, only while its tool call runs

    def forget(self) -> None:
        """Drop cached grants (a token was created, changed or deleted in the admin)."""
        self._grants.clear()

    def grant_inspection(self, session_id: str, tenant: str) -> str:
        """A read-only token limited to one session, for an `inspect_session` tool call."""
        token = secrets.token_urlsafe(32)
        self._inspections[db.digest_token(token)] = Principal(tenant=tenant, read_only=True, session=session_id)
        return token

    def revoke_inspection(self, token: str) -> None:
        self._inspections.pop(db.digest_token(token), None)

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
        now = time.monotonic()
        cached = self._grants.get(digest)
        if cached is not None and cached[1] > now:
            principal = cached[0]
        else:
            principal = await db.afind_grant(digest)
            if len(self._grants) >= CACHE_ENTRIES:
                self._grants.clear()
            self._grants[digest] = (principal, now + CACHE_SECONDS)
        if principal is None:
            raise Unauthorized("missing or invalid bearer token")
        return principal


def tokens_of(scope: Mapping[str, Any]) -> TokenCache:
    """The token cache of the application object the ASGI entry attached to this scope."""
    tokens: TokenCache = scope["brain"].tokens
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
