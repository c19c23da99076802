"""Cross-origin access for browser clients (the host config's `cors` block), in front of the rest
of the HTTP stack: a preflight of the API and its streams is answered here, before the body
limit, authentication and fleet forwarding; every other response of theirs names a listed Origin.

The admin, its static files and the executor routes (backend processes; the spec refuses browser
origins there) are never opened to another origin. Without a `cors` block nothing here runs.
Imports no app: the origins come in as a callable, read once, on the first request.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from foundation.asgi import Message, Receive, Scope, Send
from foundation.errors import Forbidden, error_envelope

__all__ = ["ALLOWED_HEADERS", "ALLOWED_METHODS", "EXPOSED_HEADERS", "PREFLIGHT_MAX_AGE_SECONDS", "CorsMiddleware"]

logger = logging.getLogger("brain")

App = Callable[[Any, Any, Any], Awaitable[None]]  # an ASGI app, whatever its own annotations

# Every method and request header of the API (openapi.json): the bearer token, JSON bodies, the
# SSE stream's Accept and resume position, and the W3C trace context the API joins.
ALLOWED_METHODS = b"GET, POST, DELETE"
ALLOWED_HEADERS = b"Authorization, Content-Type, Accept, Last-Event-ID, traceparent, tracestate"
# Response headers a page may read beyond the CORS-safelisted ones (Content-Type among them): the
# request id every response carries, the retry delay of 429/503, the scheme of a 401.
EXPOSED_HEADERS = b"X-Request-ID, Retry-After, WWW-Authenticate"
# Browsers cache a preflight this long (Chromium caps it at 2 h): a removed origin stops working
# in open pages within 10 minutes of the restart that removed it.
PREFLIGHT_MAX_AGE_SECONDS = 600
CLOSED_PREFIXES = ("/admin", "/static/", "/executors")
MAX_LOGGED_CHARS = 256  # an Origin and a path from the client, quoted in a log line
_OWN_HEADERS = frozenset(
    {
        b"access-control-allow-origin",
        b"access-control-allow-credentials",
        b"access-control-allow-methods",
        b"access-control-allow-headers",
        b"access-control-expose-headers",
        b"access-control-max-age",
    }
)


class CorsMiddleware:
    """`origins_of` returns the listed origins, or None without a `cors` block."""

    def __init__(self, app: App, *, origins_of: Callable[[], Collection[str] | None]) -> None:
        self.app = app
        self._origins_of = origins_of
        self._origins: frozenset[str] | None = None
        self._read = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = self._listed()
        path = str(scope.get("path", ""))
        if origins is None or scope.get("type") != "http" or path.startswith(CLOSED_PREFIXES):
            await self.app(scope, receive, send)
            return
        origin = _single_header(scope, b"origin")
        if (
            scope.get("method") == "OPTIONS"
            and origin is not None
            and _single_header(scope, b"access-control-request-method")
        ):
            await _answer_preflight(scope, send, origin, allowed=origin in origins)
            return
        await self.app(scope, receive, _cors_send(send, origin if origin in origins else None))

    def _listed(self) -> frozenset[str] | None:
        if not self._read:
            origins = self._origins_of()
            self._origins = None if origins is None else frozenset(origins)
            self._read = True
        return self._origins


def _single_header(scope: Scope, name: bytes) -> str | None:
    """The header's value when it is sent exactly once (a repeated Origin matches nothing)."""
    values = [value for key, value in scope.get("headers", ()) if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


async def _answer_preflight(scope: Scope, send: Send, origin: str, *, allowed: bool) -> None:
    """204 with what the API accepts for a listed origin; 403 and no CORS header for another
    (the browser then refuses the request it asked about, which is never sent)."""
    request_id = secrets.token_hex(16)
    headers = [(b"vary", b"Origin"), (b"x-request-id", request_id.encode()), (b"x-content-type-options", b"nosniff")]
    if allowed:
        headers += [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", ALLOWED_METHODS),
            (b"access-control-allow-headers", ALLOWED_HEADERS),
            (b"access-control-max-age", str(PREFLIGHT_MAX_AGE_SECONDS).encode()),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    logger.info(
        "cors origin refused",
        extra={
            "origin": origin[:MAX_LOGGED_CHARS],
            "path": str(scope.get("path", ""))[:MAX_LOGGED_CHARS],
            "requested_method": (_single_header(scope, b"access-control-request-method") or "")[:MAX_LOGGED_CHARS],
        },
    )
    error = Forbidden("origin not allowed")
    body = error_envelope(error, request_id)
    headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _cors_send(send: Send, origin: str | None) -> Send:
    """`send` whose response start says it varies by Origin and, for a listed `origin`, names it.
    CORS headers already there (a forwarded owner's answer) are replaced, never doubled."""

    async def cors_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [header for header in message.get("headers", ()) if header[0].lower() not in _OWN_HEADERS]
            if not any(key.lower() == b"vary" and _names_origin(value) for key, value in headers):
                headers.append((b"vary", b"Origin"))
            if origin is not None:
                headers += [
                    (b"access-control-allow-origin", origin.encode("latin-1")),
                    (b"access-control-expose-headers", EXPOSED_HEADERS),
                ]
            message = {**message, "headers": headers}
        await send(message)

    return cors_send


def _names_origin(vary: bytes) -> bool:
    return any(part.strip().lower() in (b"origin", b"*") for part in vary.split(b","))
