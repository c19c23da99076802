"""Instance-to-instance request authentication: HMAC-SHA256 over the request with BRAIN_FLEET_SECRET.

Pure functions (time and nonces are arguments) plus a bounded replay guard; no I/O, no Django.
A signature binds the sender, the receiving process (its instance name and incarnation, new
for every process start), the time, a nonce, the method, the exact request target, a SHA-256 of
the body and every forwarded header, so a captured request cannot be altered, sent to another
instance, or replayed: within the window the receiver remembers its nonce, and after a restart
the receiver is another incarnation, which refuses it. The receiver honours only the headers the
signature covers (`honoured_headers`).

A request forwarded to another instance is signed here once (`sign_forwarded`), after routing
chose the instance and before the forwarder sends it: what it carries is decided in one place.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from foundation.errors import Unauthorized

__all__ = [
    "CLIENT_HEADER",
    "FORWARDED_HEADERS",
    "SIGNATURE_HEADERS",
    "FleetAuthError",
    "ReplayGuard",
    "SignedRequest",
    "honoured_headers",
    "receiver_identity",
    "sign_forwarded",
    "sign_request",
    "verify_request",
]

VERSION = "v1"
INSTANCE_HEADER = "brain-fleet-instance"
TIME_HEADER = "brain-fleet-time"
NONCE_HEADER = "brain-fleet-nonce"
SIGNATURE_HEADER = "brain-fleet-signature"
SIGNATURE_HEADERS = (INSTANCE_HEADER, TIME_HEADER, NONCE_HEADER, SIGNATURE_HEADER)
COOKIE_HEADER = "cookie"
CLIENT_HEADER = "brain-fleet-client"  # the client's address as the forwarding instance saw it
# What a forwarded request carries beyond its method, target and body, every one signed: the
# client's credentials (a bearer token; the admin's cookies, passed on for the admin's console
# routes only: sign_forwarded) and
# stream position, the trace, and the client's address as the receiving instance saw it (for
# per-address limits on the owner). Anything else is not forwarded, so nothing unsigned reaches
# the owner.
FORWARDED_HEADERS = (
    "authorization",
    COOKIE_HEADER,
    "accept",
    "content-type",
    "last-event-id",
    "traceparent",
    "tracestate",
    CLIENT_HEADER,
)
# Clocks of a fleet's machines agree within NTP's milliseconds; the window allows for a
# forwarded request that waited in a queue. Older or newer requests are refused.
REPLAY_WINDOW_SECONDS = 30
# Nonces remembered for the window: past this many, new requests are refused (the forwarding
# instance gets a 503 and retries) rather than forgetting a nonce that could then be replayed.
MAX_REMEMBERED_NONCES = 200_000
NONCE = re.compile(r"[0-9a-f]{32}")
SIGNATURE = re.compile(r"v1=[0-9a-f]{64}")
MAX_TIME_DIGITS = 12


class FleetAuthError(Unauthorized):
    """A request that is not from a fleet instance, or not this instant's. `reason` is for the
    log; clients get the generic 401 of the message."""

    def __init__(self, reason: str) -> None:
        super().__init__("fleet request signature refused")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """A request on its way to another instance, signed for its receiving process."""

    receiver: str  # the receiving process, as receiver_identity names it
    url: str  # the receiving instance's base URL (its cluster.url)
    method: str
    target: bytes  # the URL's path, then the raw path and query as received: exactly as signed
    headers: dict[str, str]  # the forwarded headers, then the signature's
    body: bytes


def _message(
    *,
    sender: str,
    target_instance: str,
    timestamp: str,
    nonce: str,
    method: str,
    target: bytes,
    body: bytes,
    headers: Mapping[str, str],
) -> bytes:
    # A JSON array: unambiguous for any value, where joining with a separator is not.
    fields = [
        "brain-fleet",
        VERSION,
        sender,
        target_instance,
        timestamp,
        nonce,
        method.upper(),
        target.decode("latin-1"),
        hashlib.sha256(body).hexdigest(),
        *(headers.get(name, "") for name in FORWARDED_HEADERS),
    ]
    return orjson.dumps(fields)


def receiver_identity(instance: str, incarnation: str) -> str:
    """What a signature names as its receiver: one process of an instance. The sender learns
    the incarnation with the owner's URL (the instances table), so a request signed for a
    process is refused by any later process of the same name."""
    return f"{instance}/{incarnation}"


def honoured_headers(headers: Mapping[str, str], *, host: str, body: bytes) -> list[tuple[bytes, bytes]]:
    """The request's headers once its signature checked: exactly the signed ones (the values
    verified), plus `host` and the body's own length to frame it. Unsigned extras, and second
    copies of a signed header, are dropped, so nothing unsigned reaches the owner."""
    lowered = _lower(headers)
    honoured = [(b"host", host.encode("latin-1"))] if host else []
    if body:
        honoured.append((b"content-length", str(len(body)).encode()))
    honoured += [(name.encode(), lowered[name].encode("latin-1")) for name in FORWARDED_HEADERS if lowered.get(name)]
    return honoured


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _clean(value: str) -> bool:
    return "\r" not in value and "\n" not in value and "\0" not in value


def _path_prefix(url: str) -> bytes:
    """The path of an instance's URL, before the forwarded target (a URL that does not parse has
    none here; the transport refuses it)."""
    try:
        return urlsplit(url).path.rstrip("/").encode("latin-1")
    except (ValueError, UnicodeEncodeError):
        return b""


def sign_forwarded(
    secret: bytes,
    *,
    sender: str,
    receiver: str,
    url: str,
    method: str,
    target: bytes,
    headers: Mapping[str, str],
    body: bytes,
    client_address: str,
    now: float,
    nonce: str,
    cookies: bool = False,
) -> SignedRequest:
    """The request a client sent this instance, as forwarded to `receiver` at `url`: only
    FORWARDED_HEADERS (values that could split a header line dropped; the cookies only with
    `cookies`, for the admin's console routes), the client's address in CLIENT_HEADER, and the
    signature over all of it."""
    lowered = _lower(headers)
    if not cookies:
        lowered.pop(COOKIE_HEADER, None)
    forwarded = {name: lowered[name] for name in FORWARDED_HEADERS if lowered.get(name) and _clean(lowered[name])}
    forwarded[CLIENT_HEADER] = client_address if _clean(client_address) else ""
    path = _path_prefix(url) + target
    signature = sign_request(
        secret,
        sender=sender,
        target_instance=receiver,
        method=method,
        target=path,
        body=body,
        headers=forwarded,
        now=now,
        nonce=nonce,
    )
    return SignedRequest(receiver, url, method, path, {**forwarded, **signature}, body)


def sign_request(
    secret: bytes,
    *,
    sender: str,
    target_instance: str,
    method: str,
    target: bytes,
    body: bytes,
    headers: Mapping[str, str],
    now: float,
    nonce: str,
) -> dict[str, str]:
    """The signature headers for a request from `sender` to `target_instance`. `target` is the
    request target exactly as sent (raw path and query), `headers` the forwarded ones."""
    timestamp = str(int(now))
    message = _message(
        sender=sender,
        target_instance=target_instance,
        timestamp=timestamp,
        nonce=nonce,
        method=method,
        target=target,
        body=body,
        headers=_lower(headers),
    )
    digest = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return {
        INSTANCE_HEADER: sender,
        TIME_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: f"{VERSION}={digest}",
    }


class ReplayGuard:
    """Nonces seen within the replay window, oldest first. One per receiving instance."""

    def __init__(self, *, window_seconds: float = REPLAY_WINDOW_SECONDS, capacity: int = MAX_REMEMBERED_NONCES) -> None:
        self.window = window_seconds
        self.capacity = capacity
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> when it may be forgotten

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, nonce: str, *, now: float) -> None:
        """Remember `nonce`; FleetAuthError if it was seen or the guard is full."""
        while self._seen:
            oldest, forget_at = next(iter(self._seen.items()))
            if forget_at > now:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            raise FleetAuthError("replayed nonce")
        if len(self._seen) >= self.capacity:
            raise FleetAuthError("too many fleet requests in the replay window")
        # A request is accepted up to `window` after its timestamp, and its timestamp may be
        # up to `window` ahead: remember it long enough to cover both.
        self._seen[nonce] = now + 2 * self.window


def verify_request(
    secret: bytes,
    *,
    receiver: str,
    method: str,
    target: bytes,
    body: bytes,
    headers: Mapping[str, str],
    now: float,
    replay: ReplayGuard,
) -> str:
    """The sending instance's name when `headers` carry a valid, fresh, unseen signature for
    this request to `receiver`; FleetAuthError otherwise. The nonce is remembered only once
    the signature checks, so forged requests cannot fill the guard."""
    lowered = _lower(headers)
    sender = lowered.get(INSTANCE_HEADER, "")
    timestamp = lowered.get(TIME_HEADER, "")
    nonce = lowered.get(NONCE_HEADER, "")
    signature = lowered.get(SIGNATURE_HEADER, "")
    if not sender or not timestamp or not nonce or not signature:
        raise FleetAuthError("missing fleet signature headers")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > MAX_TIME_DIGITS:
        raise FleetAuthError("malformed fleet timestamp")
    if not NONCE.fullmatch(nonce) or not SIGNATURE.fullmatch(signature):
        raise FleetAuthError("malformed fleet signature")
    message = _message(
        sender=sender,
        target_instance=receiver,
        timestamp=timestamp,
        nonce=nonce,
        method=method,
        target=target,
        body=body,
        headers=lowered,
    )
    expected = f"{VERSION}={hmac.new(secret, message, hashlib.sha256).hexdigest()}"
    if not hmac.compare_digest(expected, signature):
        raise FleetAuthError("bad fleet signature")
    if abs(now - int(timestamp)) > replay.window:
        raise FleetAuthError("fleet request outside the replay window")
    replay.admit(nonce, now=now)
    return sender
