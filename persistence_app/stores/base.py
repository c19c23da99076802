"""The object store contract of the checkpoint archive: the Protocol, its errors, key rules.

Synchronous (worker threads and Celery workers, never the event loop). Imports no Django.
Exception tree::

    StoreError (.retryable, .reason)
     ├── ObjectMissing (get of an absent key; never retryable)
     └── Fenced (a fenced write of an older epoch than the stored object's; never retryable)

Fenced writes (`put_fenced`, for `latest`): the object is a JSON object recording the lease
epoch of its writer; a write is refused when the stored object records a higher epoch, and it
is conditional on the version read (S3 If-Match on the ETag, GCS if_generation_match, a rename
under an advisory lock), so a former owner that lost its lease can never replace its
successor's object, and `latest` never goes back. Epoch 0 (one instance, no fleet) is refused
only by an object a fleet wrote.

An error's message is for the log: it may name endpoints, buckets, hosts, users and paths. Its
`reason` is what clients see (GET /sync, API errors): one of the stable REASON_* sentences,
which name no part of the infrastructure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import orjson

__all__ = [
    "MAX_OBJECT_BYTES",
    "REASON_CORRUPTED",
    "REASON_CREDENTIALS",
    "REASON_DENIED",
    "REASON_FAILED",
    "REASON_FENCED",
    "REASON_INDEX",
    "REASON_NO_BUCKET",
    "REASON_TIMEOUT",
    "REASON_TOO_LARGE",
    "REASON_UNREACHABLE",
    "Fenced",
    "ObjectMissing",
    "ObjectStore",
    "StoreError",
    "check_size",
    "recorded_epoch",
    "write_fenced",
    "join_key",
    "normalize_prefix",
    "object_too_large",
    "reason_status",
    "retryable_status",
    "status_reason",
    "validate_key",
]

MAX_OBJECT_BYTES = 2 << 20  # spec: MaxObjectBytes, the largest block, tail or manifest the archive writes


# What clients are told of a store failure (never the SDK's text: it names endpoints and buckets)
REASON_UNREACHABLE = "the archive cannot be reached"
REASON_TIMEOUT = "the archive did not answer in time"
REASON_CREDENTIALS = "the archive refused the server's credentials"
REASON_DENIED = "the archive denied access"
REASON_NO_BUCKET = "the archive's bucket does not exist"
REASON_CORRUPTED = "an archive transfer was corrupted"
REASON_TOO_LARGE = "an archive object is over the size limit"
REASON_FAILED = "the archive request failed"
REASON_INDEX = "the discovery index is unavailable"
REASON_FENCED = "another instance owns the session now"
# A fenced write re-reads after losing a race; past this many races it is a retryable failure.
FENCE_ATTEMPTS = 8


RETRYABLE_STATUSES = frozenset({408, 429})  # request timeout, throttled: a later attempt may pass


def reason_status(status: int) -> str:
    return f"the archive answered HTTP {status}" if status else REASON_FAILED


def status_reason(status: int) -> str:
    """What clients are told of an HTTP error status from a store."""
    if status == 401:
        return REASON_CREDENTIALS
    if status == 403:
        return REASON_DENIED
    return reason_status(status)


def retryable_status(status: int) -> bool:
    """Whether a later attempt can get past an HTTP error status (server trouble, throttling)."""
    return status >= 500 or status in RETRYABLE_STATUSES


def object_too_large(provider: str, key: str) -> StoreError:
    """The error of a get whose object turned out larger than MAX_OBJECT_BYTES."""
    message = f"{provider} get {key!r}: over the {MAX_OBJECT_BYTES} byte limit"
    return StoreError(message, retryable=False, reason=REASON_TOO_LARGE)


class StoreError(Exception):
    """A store operation failed; `retryable` says whether the same call may succeed later
    (network, 5xx, throttling) or never will (credentials, permissions, bucket, key, size).
    `reason` is the client-visible sentence; it defaults to the message, so errors built from
    a foreign library's text must pass one."""

    def __init__(self, message: str, *, retryable: bool, reason: str = "") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reason = reason or message


class ObjectMissing(StoreError):
    """`get` of a key that does not exist: a missing checkpoint, never a transient failure."""

    def __init__(self, message: str, *, retryable: Literal[False] = False, reason: str = "") -> None:
        super().__init__(message, retryable=retryable, reason=reason)


class Fenced(StoreError):
    """A fenced write carrying an older epoch than the stored object's: the writer lost its
    lease, and nothing it writes may replace its successor's."""

    def __init__(self, message: str, *, stored: int, epoch: int) -> None:
        super().__init__(message, retryable=False, reason=REASON_FENCED)
        self.stored = stored
        self.epoch = epoch


class ObjectStore(Protocol):
    def put(self, key: str, data: bytes, *, immutable: bool) -> None:
        """Store `data` under `key`. `immutable=True` never overwrites: when the key exists the
        call returns without error (keys are generation- or checkpoint-scoped, so an existing
        object is an earlier attempt of the same upload). `immutable=False` replaces."""
        ...

    def get(self, key: str) -> bytes:
        """The object's bytes; ObjectMissing when absent, StoreError otherwise."""
        ...

    def put_fenced(self, key: str, data: bytes, *, epoch: int) -> None:
        """Replace `key` with `data`, a JSON object whose "epoch" is `epoch`, unless the stored
        object records a higher epoch (Fenced); conditional on the version read, so a writer
        that slipped in between is seen on the re-read."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object under `key` (and, for a fenced one, what fences it); an absent key
        is not an error."""
        ...

    def delete_under(self, prefix: str, *, max_objects: int) -> int:
        """Remove up to `max_objects` objects whose keys start with `prefix` (which ends in
        "/"); returns how many it removed (fewer than `max_objects`: none are left)."""
        ...

    def barrier(self) -> None:
        """Make every object put so far durable. Remote stores' puts are durable when they
        return; a store that defers durability of immutable puts (the filesystem) settles it
        here. The archive calls it before writing a manifest, and a mutable put implies it."""
        ...

    def close(self) -> None: ...


def validate_key(key: str) -> str:
    """Return `key` when it is a relative '/'-separated name the archive may use; raise a
    non-retryable StoreError for an empty key, a leading '/', a backslash, NUL, or an empty,
    '.' or '..' segment (every store maps keys 1:1, so no two spellings may name one object)."""
    if not key:
        raise StoreError("invalid object key: empty", retryable=False)
    if "\\" in key or "\x00" in key:
        raise StoreError(f"invalid object key {key!r}: backslash or NUL", retryable=False)
    if key.startswith("/"):
        raise StoreError(f"invalid object key {key!r}: leading '/'", retryable=False)
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise StoreError(f"invalid object key {key!r}: empty, '.' or '..' segment", retryable=False)
    return key


def normalize_prefix(prefix: str) -> str:
    """The configured key prefix without trailing '/' ("" for none), validated as a key."""
    prefix = prefix.rstrip("/")
    return validate_key(prefix) if prefix else ""


def join_key(prefix: str, key: str) -> str:
    """The provider key of archive key `key` under a prefix from `normalize_prefix`."""
    validate_key(key)
    return f"{prefix}/{key}" if prefix else key


def check_size(key: str, data: bytes) -> None:
    """Refuse an object over MAX_OBJECT_BYTES before any I/O."""
    if len(data) > MAX_OBJECT_BYTES:
        message = f"object {key!r} is {len(data)} bytes, over the {MAX_OBJECT_BYTES} byte limit"
        raise StoreError(message, retryable=False, reason=REASON_TOO_LARGE)


def recorded_epoch(data: bytes) -> int:
    """The epoch a fenced object records: 0 for an object written without one (one instance,
    or before the fleet), or that is not a JSON object with a non-negative integer "epoch"."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return 0
    epoch = value.get("epoch") if isinstance(value, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > 0 else 0


def write_fenced(
    key: str,
    data: bytes,
    epoch: int,
    *,
    read: Callable[[], tuple[bytes, object] | None],
    write: Callable[[object | None], bool],
) -> None:
    """The fenced write every store shares: `read` gives the stored object and its version
    (None when absent), `write(version)` replaces it only if it is still that version (None:
    only if still absent) and says whether it did. Fenced when the stored epoch is higher."""
    if epoch < 0 or recorded_epoch(data) != epoch:
        raise StoreError(f"fenced object {key!r} must record epoch {epoch}", retryable=False)
    check_size(key, data)
    for _ in range(FENCE_ATTEMPTS):
        current = read()
        version = None
        if current is not None:
            stored = recorded_epoch(current[0])
            if stored > epoch:
                raise Fenced(
                    f"{key!r} records epoch {stored}, refusing a write of epoch {epoch}", stored=stored, epoch=epoch
                )
            version = current[1]
        if write(version):
            return
    raise StoreError(f"fenced write of {key!r} lost {FENCE_ATTEMPTS} races in a row", retryable=True)
