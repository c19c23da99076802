"""Session inspection grants any instance of a fleet can recognise: the token an `inspect_session`
tool call is given carries a MAC of the session it is limited to under a key derived from the
fleet secret. Only the instance running the call holds the grant (sessions_app.auth); another
instance that receives the token checks the MAC, with no database, and passes the request on to
the session's owner instead of refusing it. A token without a valid MAC is an unknown token."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["inspection_key", "is_sealed_for", "seal_inspection"]

_PURPOSE = b"brain inspection grants v1"  # keeps this key apart from request signatures
MAC_CHARS = 32  # 128 bits of HMAC-SHA256, hex
MAX_TOKEN_CHARS = 256  # a token longer than any sealed one is not checked at all


def inspection_key(fleet_key: bytes) -> bytes:
    return hmac.new(fleet_key, _PURPOSE, hashlib.sha256).digest()


def _mac(key: bytes, session_id: str, nonce: str) -> str:
    return hmac.new(key, f"{session_id}\n{nonce}".encode(), hashlib.sha256).hexdigest()[:MAC_CHARS]


def seal_inspection(key: bytes, session_id: str, nonce: str) -> str:
    """The token for a grant limited to `session_id`, `nonce` its random part (no dots)."""
    return f"{nonce}.{_mac(key, session_id, nonce)}"


def is_sealed_for(key: bytes, token: str, session_id: str) -> bool:
    """Whether `token` was sealed by an instance of this fleet for `session_id` (it may have been
    revoked since: only the instance that granted it can tell)."""
    if len(token) > MAX_TOKEN_CHARS:
        return False
    nonce, dot, mac = token.rpartition(".")
    return bool(dot and nonce) and hmac.compare_digest(mac.encode(), _mac(key, session_id, nonce).encode())
