"""Signed sandbox handles: what the model holds instead of a provider's sandbox id.

A handle is `sbx1.<base64url JSON>.<base64url HMAC-SHA256>` over the backend name, the provider's
sandbox id, the tenant, the session and the issue time (Unix seconds). The key comes from
configuration (at least 32 bytes), so a handle stays valid across restarts; a handle that was
altered, or that another tenant or session presents, is refused. No database is needed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EXEC_WINDOW_SECONDS", "MAX_HANDLE_CHARS", "MIN_KEY_BYTES", "Handle", "HandleRefused", "HandleSigner"]

MIN_KEY_BYTES = 32  # spec (tools/sandboxes): SANDBOX_SIGNING_KEY has at least 32 characters
EXEC_WINDOW_SECONDS = 300.0  # spec: a handle authorizes exec for 5 minutes; inspect/terminate after too
MAX_HANDLE_CHARS = 2048  # a handle is a few hundred characters; a longer one is not ours
PREFIX = "sbx1"


class HandleRefused(Exception):
    """A handle that does not authorize the call; the message is safe to show the model."""


@dataclass(frozen=True, slots=True)
class Handle:
    backend: str
    sandbox_id: str
    tenant: str
    session: str
    issued_at: int

    def exec_expires_at(self) -> float:
        return self.issued_at + EXEC_WINDOW_SECONDS


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class HandleSigner:
    def __init__(self, key: bytes, *, clock: Callable[[], float] = time.time) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the sandbox signing key must have at least {MIN_KEY_BYTES} bytes")
        self._key = key
        self._clock = clock

    def __repr__(self) -> str:  # never the key
        return "HandleSigner()"

    def now(self) -> float:
        return self._clock()

    def _mac(self, payload: str) -> str:
        return _encode(hmac.new(self._key, f"{PREFIX}.{payload}".encode(), hashlib.sha256).digest())

    def issue(self, *, backend: str, sandbox_id: str, tenant: str, session: str) -> tuple[str, Handle]:
        handle = Handle(backend, sandbox_id, tenant, session, int(self._clock()))
        body = {"b": backend, "i": sandbox_id, "t": tenant, "s": session, "at": handle.issued_at}
        payload = _encode(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
        return f"{PREFIX}.{payload}.{self._mac(payload)}", handle

    def open(self, text: object, *, tenant: str, session: str, for_exec: bool) -> Handle:
        """The handle `text` names, checked: signature, scope (tenant and session) and, for
        exec, the 5-minute window. HandleRefused says which check failed."""
        if not isinstance(text, str) or len(text) > MAX_HANDLE_CHARS:
            raise HandleRefused("not a sandbox handle")
        prefix, _, rest = text.partition(".")
        payload, _, mac = rest.partition(".")
        if prefix != PREFIX or not payload or not mac:
            raise HandleRefused("not a sandbox handle")
        if not hmac.compare_digest(mac.encode(), self._mac(payload).encode()):
            raise HandleRefused("the sandbox handle's signature does not match: it was altered or not issued here")
        try:
            body = json.loads(_decode(payload))
            handle = Handle(str(body["b"]), str(body["i"]), str(body["t"]), str(body["s"]), int(body["at"]))
        except (ValueError, KeyError, TypeError):  # signed by us, so only a different format gets here
            raise HandleRefused("not a sandbox handle") from None
        if handle.tenant != tenant or handle.session != session:
            raise HandleRefused("this sandbox handle belongs to another session")
        if for_exec and self._clock() >= handle.exec_expires_at():
            raise HandleRefused(
                f"this sandbox handle no longer authorizes exec ({EXEC_WINDOW_SECONDS:.0f} s after create); "
                "inspect or terminate it, or create a new sandbox"
            )
        return handle
