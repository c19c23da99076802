"""Bearer authentication: token -> Principal, from SHA-256 digests only, with a small cache."""

from __future__ import annotations

import secrets
import time

from django.http import HttpRequest
from ninja.security.base import AuthBase

from brainsite.errors import Forbidden, Unauthorized

from . import db
from .records import Principal

__all__ = [
    "BearerAuth",
    "authenticate_header",
    "forget_tokens",
    "principal_of",
    "grant_inspection",
    "require_manage",
    "require_write",
    "revoke_inspection",
]

MAX_AUTHORIZATION_CHARS = 1024  # spec: longer Authorization headers are 401
CACHE_SECONDS = 30.0  # admin changes clear the cache at once; this bounds other drift
CACHE_ENTRIES = 10_000  # bounded: an attacker's random tokens cannot grow memory

_cache: dict[str, tuple[Principal | None, float]] = {}
_inspections: dict[str, Principal] = {}  # digest -> grant, only while its tool call runs


def forget_tokens() -> None:
    """Drop cached grants (a token was created, changed or deleted in the admin)."""
    _cache.clear()


def grant_inspection(session_id: str, tenant: str) -> str:
    """A read-only token limited to one session, for an `inspect_session` tool call."""
    token = secrets.token_urlsafe(32)
    _inspections[db.digest_token(token)] = Principal(tenant=tenant, read_only=True, session=session_id)
    return token


def revoke_inspection(token: str) -> None:
    _inspections.pop(db.digest_token(token), None)


async def authenticate_header(header: str | None) -> Principal:
    if not header or len(header) > MAX_AUTHORIZATION_CHARS:
        raise Unauthorized("missing or invalid bearer token")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing or invalid bearer token")
    digest = db.digest_token(token.strip())
    inspection = _inspections.get(digest)
    if inspection is not None:
        return inspection
    now = time.monotonic()
    cached = _cache.get(digest)
    if cached is not None and cached[1] > now:
        principal = cached[0]
    else:
        principal = await db.afind_grant(digest)
        if len(_cache) >= CACHE_ENTRIES:
            _cache.clear()
        _cache[digest] = (principal, now + CACHE_SECONDS)
    if principal is None:
        raise Unauthorized("missing or invalid bearer token")
    return principal


class BearerAuth(AuthBase):
    """ninja auth callable; failures raise so the API renders the spec's envelope."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __init__(self) -> None:
        super().__init__()
        self.is_async = True

    async def __call__(self, request: HttpRequest) -> Principal:
        principal = await authenticate_header(request.headers.get("Authorization"))
        if principal.read_only and request.method not in ("GET", "HEAD"):
            raise Forbidden("token is read-only")
        return principal


def principal_of(request: HttpRequest) -> Principal:
    """The grant BearerAuth attached to the request."""
    principal: Principal = request.auth  # type: ignore[attr-defined]  # set by ninja's auth
    return principal


def require_write(principal: Principal) -> None:
    if principal.read_only:
        raise Forbidden("token is read-only")


def require_manage(principal: Principal) -> None:
    if principal.read_only or not principal.manage:
        raise Forbidden("token lacks manage permission")
