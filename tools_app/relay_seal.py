"""What the executor relay trusts from Redis: only what carries its MAC (tools_app.relay).

Anyone who can write to the relay's Redis could otherwise redirect an executor's routes or hand
an executor a call. Every record (an alias's route, an executor's holder and registration) and
every message between instances carries an HMAC-SHA256 under a key derived from the fleet
secret for this purpose alone, so it differs from the key that signs forwarded requests. A
record is sealed with the Redis key (and hash field) it is stored under, so one copied to
another place does not verify; a message names its recipient's channel, its time and a nonce,
so it is refused on another channel, late, or a second time. Anything that does not verify is
treated as absent (a record) or dropped (a message), and logged once per kind. No I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict

import orjson

from foundation.logs import logger

__all__ = ["MESSAGE_WINDOW_SECONDS", "RelaySeal", "ReplayMemory", "relay_key"]

PURPOSE = b"brain executor relay v1"
MAC_CHARS = 64  # hex of an HMAC-SHA256
SEPARATOR = b":"
# A message is refused when its time is further than this from the receiver's clock, either
# way: the channel layer drops a message nobody received within 30 s, and a fleet's clocks agree
# within NTP's milliseconds.
MESSAGE_WINDOW_SECONDS = 60.0
# Nonces of messages received within the window. Past this many the oldest is forgotten, and
# every message no newer than it is refused from then on (as stale), so a forgotten nonce can
# never be replayed; the channel layer holds at most 1000 messages per channel.
MAX_REMEMBERED_NONCES = 100_000
NONCE_BYTES = 16


def relay_key(secret: bytes) -> bytes:
    """The relay's own key: HMAC(fleet secret, "brain executor relay v1")."""
    return hmac.new(secret, PURPOSE, hashlib.sha256).digest()


class ReplayMemory:
    """The nonces of messages seen within the window, bounded (MAX_REMEMBERED_NONCES)."""

    def __init__(self, *, window: float = MESSAGE_WINDOW_SECONDS, capacity: int = MAX_REMEMBERED_NONCES) -> None:
        self._window = window
        self._capacity = capacity
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> its message's time, by arrival
        self._floor = float("-inf")  # messages no newer than this are refused (a nonce was forgotten)

    def admit(self, nonce: str, at: float, now: float) -> str | None:
        """None for a fresh message (its nonce now remembered); else why it is refused."""
        if abs(now - at) > self._window or at <= self._floor:
            return "stale"
        while self._seen:  # forget nonces whose messages are past the window anyway
            oldest, when = next(iter(self._seen.items()))
            if when >= now - self._window:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            return "replayed"
        if len(self._seen) >= self._capacity:
            _, forgotten = self._seen.popitem(last=False)
            self._floor = max(self._floor, forgotten)
        self._seen[nonce] = at
        return None


class RelaySeal:
    """Seals and opens the relay's records and messages under the relay key."""

    def __init__(self, secret: bytes) -> None:
        self._key = relay_key(secret)
        self._replays = ReplayMemory()
        self._logged: set[tuple[str, str]] = set()

    def _mac(self, *parts: bytes) -> bytes:
        # length-prefixed parts: unambiguous whatever bytes each holds
        framed = b"".join(len(part).to_bytes(8, "big") + part for part in parts)
        return hmac.new(self._key, framed, hashlib.sha256).hexdigest().encode()

    def refuse(self, kind: str, reason: str) -> None:
        """Log a refused record or message once per kind and reason (never its content)."""
        if (kind, reason) in self._logged:
            return
        self._logged.add((kind, reason))  # a handful of kinds and reasons: bounded
        logger.warning("executor relay refused what Redis held", extra={"kind": kind, "reason": reason})

    # -- records ---------------------------------------------------------------------------

    def seal(self, where: str, payload: bytes) -> bytes:
        """`payload` as stored under `where` (its Redis key, and field for a hash)."""
        return self._mac(b"record", where.encode(), payload) + SEPARATOR + payload

    def open(self, kind: str, where: str, raw: bytes | str | None) -> bytes | None:
        """The payload of a record sealed for `where`; None when absent or not verified."""
        if raw is None:
            return None
        value = raw.encode() if isinstance(raw, str) else raw
        mac, separator, payload = value[:MAC_CHARS], value[MAC_CHARS : MAC_CHARS + 1], value[MAC_CHARS + 1 :]
        if separator != SEPARATOR or not hmac.compare_digest(mac, self._mac(b"record", where.encode(), payload)):
            self.refuse(kind, "no valid MAC")
            return None
        return payload

    # -- messages --------------------------------------------------------------------------

    def message(self, to: str, kind: str, body: dict[str, object], *, now: float) -> dict[str, object]:
        """A channel-layer message of `kind` to the channel `to`, sealed."""
        payload = orjson.dumps({**body, "to": to, "at": now, "nonce": secrets.token_hex(NONCE_BYTES)})
        return {"type": f"relay.{kind}", "body": payload, "mac": self._mac(b"message", kind.encode(), payload)}

    def open_message(self, channel: str, message: object, *, now: float) -> tuple[str, dict[str, object]] | None:
        """(kind, body) of a message sealed for `channel`, fresh and not seen before; None
        otherwise (dropped)."""
        opened = self._opened(channel, message, now)
        if isinstance(opened, str):
            self.refuse("message", opened)
            return None
        return opened

    def _opened(self, channel: str, message: object, now: float) -> tuple[str, dict[str, object]] | str:
        """The message's kind and body, or why it is refused."""
        if not isinstance(message, dict):
            return "malformed"
        kind, payload, mac = (
            str(message.get("type", "")).removeprefix("relay."),
            message.get("body"),
            message.get("mac"),
        )
        if not isinstance(payload, bytes) or not isinstance(mac, bytes | str):
            return "malformed"
        expected = self._mac(b"message", kind.encode(), payload)
        if not hmac.compare_digest(mac.encode() if isinstance(mac, str) else mac, expected):
            return "no valid MAC"
        try:
            body: object = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return "malformed"
        if not isinstance(body, dict):
            return "malformed"
        at, nonce = body.get("at"), body.get("nonce")
        if body.get("to") != channel:
            return "another channel's"
        if not isinstance(at, int | float) or not isinstance(nonce, str):
            return "malformed"
        return self._replays.admit(nonce, float(at), now) or (kind, body)
