"""Emit tokens: the capability a tool service is given with one placed call to post that call's
extension events (tools_app.environments.emits). A token names the call and its expiry and
carries a MAC of the session, the call and the expiry under a key derived from the fleet secret
(a key of the process's own on a single instance), so any instance of a fleet checks it with no
database and passes the request on to the session's owner; only the owner knows whether the
call still runs."""

from __future__ import annotations

import hashlib
import hmac
import re

__all__ = ["EMIT_PREFIX", "emit_key", "open_emit_token", "seal_emit_token"]

_PURPOSE = b"brain emit tokens v1"  # keeps this key apart from request signatures and inspections
EMIT_PREFIX = "bemit"  # tells an emit token from an API token without a lookup
MAC_CHARS = 32  # 128 bits of HMAC-SHA256, hex
MAX_TOKEN_CHARS = 160  # longer than any sealed token: a longer one is not checked at all
_SHAPE = re.compile(r"^bemit\.([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{32})$")


def emit_key(fleet_key: bytes) -> bytes:
    return hmac.new(fleet_key, _PURPOSE, hashlib.sha256).digest()


def _mac(key: bytes, session_id: str, call_id: str, expires: int) -> str:
    message = f"{session_id}\n{call_id}\n{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:MAC_CHARS]


def seal_emit_token(key: bytes, session_id: str, call_id: str, expires: int) -> str:
    """The token of one call (`call_id`: 32 hex) of `session_id`, good until `expires` (Unix s)."""
    return f"{EMIT_PREFIX}.{call_id}.{expires}.{_mac(key, session_id, call_id, expires)}"


def open_emit_token(key: bytes, token: str, session_id: str, *, now: float) -> str | None:
    """The call id a token sealed for `session_id` names, while it has not expired; else None."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    shape = _SHAPE.fullmatch(token)
    if shape is None:
        return None
    call_id, expires, mac = shape.group(1), int(shape.group(2)), shape.group(3)
    if not hmac.compare_digest(mac.encode(), _mac(key, session_id, call_id, expires).encode()):
        return None
    return call_id if expires > now else None
