"""Errors with a spec code and HTTP status. Domain code raises them; only the API layer renders.

BrainError (500 brain_error)
├── InvalidRequest (400 invalid_request)
│   └── PayloadTooLarge (413 invalid_request)
├── Unauthorized (401 forbidden, WWW-Authenticate: Bearer)
│   └── fleet_app.signing.FleetAuthError (a request from another instance whose signature fails)
├── Forbidden (403 forbidden)
├── NotFound (404 not_found)
├── Conflict (409 conflict)
├── CursorUnavailable (409 cursor_unavailable)
├── Unsupported (422 unsupported)
├── Overloaded (429 overloaded, Retry-After: 1)
└── Unavailable (503 unavailable, Retry-After: 1)
    └── fleet_app.forwarding.OwnerUnreachable (the instance a request was forwarded to did not answer)
"""

from __future__ import annotations

import orjson

__all__ = [
    "error_envelope",
    "BrainError",
    "InvalidRequest",
    "PayloadTooLarge",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "CursorUnavailable",
    "Unsupported",
    "Overloaded",
    "Unavailable",
]


class BrainError(Exception):
    code = "brain_error"
    status = 500

    def __init__(self, message: str = "internal server error") -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(BrainError):
    code = "invalid_request"
    status = 400


class PayloadTooLarge(InvalidRequest):
    status = 413


class Unauthorized(BrainError):
    code = "forbidden"  # spec: 401 uses the code "forbidden"
    status = 401

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(BrainError):
    code = "forbidden"
    status = 403


class NotFound(BrainError):
    code = "not_found"
    status = 404


class Conflict(BrainError):
    code = "conflict"
    status = 409


class CursorUnavailable(BrainError):
    code = "cursor_unavailable"
    status = 409


class Unsupported(BrainError):
    code = "unsupported"
    status = 422


class Overloaded(BrainError):
    code = "overloaded"
    status = 429

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class Unavailable(BrainError):
    """A fleet instance that cannot serve a session now (its lease is lapsing, moving, or held
    elsewhere; its owner is not answering, or cannot be found while the fleet's database or
    Redis is out of reach): the same request succeeds shortly, through any instance."""

    code = "unavailable"
    status = 503

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


def error_envelope(error: BrainError, request_id: str) -> bytes:
    """The spec's error body, shared by the API, the ASGI layer and the SSE consumer."""
    body = {"error": {"code": error.code, "message": error.message}, "request_id": request_id}
    return orjson.dumps(body)
