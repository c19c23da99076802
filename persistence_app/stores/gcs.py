"""The `gcs` provider through google-cloud-storage. Immutable puts carry `ifGenerationMatch=0`,
so the server refuses to overwrite; objects are at most 2 MiB, so every upload is a single
multipart request (preconditions are not checked on resumable uploads by every server).
Imports no Django.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping
from typing import Any

import requests
import urllib3
from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError, RetryError
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import GoogleAuthError
from google.auth.exceptions import TransportError as AuthTransportError
from google.cloud import storage
from google.cloud.storage.exceptions import DataCorruption, InvalidResponse
from google.cloud.storage.retry import DEFAULT_RETRY

from foundation.hostconfig import Persistence

from .base import (
    MAX_OBJECT_BYTES,
    REASON_CORRUPTED,
    REASON_CREDENTIALS,
    REASON_FAILED,
    REASON_NO_BUCKET,
    REASON_TIMEOUT,
    REASON_UNREACHABLE,
    ObjectMissing,
    StoreError,
    check_size,
    join_key,
    normalize_prefix,
    object_too_large,
    retryable_status,
    status_reason,
    write_fenced,
)

__all__ = ["GCSStore", "open_gcs_store"]

EMULATOR_VARIABLE = "STORAGE_EMULATOR_HOST"
EMULATOR_PROJECT = "brain"  # the emulator needs some project; GOOGLE_CLOUD_PROJECT overrides it
TIMEOUT_SECONDS = (5.0, 30.0)  # (connect, read) per request: a 2 MiB object on a slow link
# The library retries transient failures (its own predicate) within this budget; the archive
# retries whole operations with backoff, and a stopped server must fail within seconds.
RETRY = DEFAULT_RETRY.with_delay(initial=0.2, maximum=1.0).with_timeout(3.0)
CONTENT_TYPE = "application/octet-stream"
MISSING_BUCKET = "bucket does not exist"  # GCS's 404 message for a bucket, unlike "No such object"

_STORE_ERRORS = (
    GoogleAPIError,  # HTTP errors (GoogleAPICallError) and an exhausted retry budget (RetryError)
    GoogleAuthError,
    InvalidResponse,
    DataCorruption,
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
)
_RETRYABLE_TRANSPORT_ERRORS = (
    RetryError,  # every attempt failed in a way the library deemed transient
    AuthTransportError,  # the token endpoint was unreachable
    DataCorruption,  # checksum mismatch in transit
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    ConnectionError,
)


class GCSStore:
    def __init__(self, client: Any, *, bucket: str, prefix: str = "") -> None:
        self._client = client  # a google.cloud.storage.Client
        self._bucket = client.bucket(bucket)  # no request: a handle
        self._prefix = normalize_prefix(prefix)

    def put(self, key: str, data: bytes, *, immutable: bool) -> None:
        name = join_key(self._prefix, key)
        check_size(key, data)
        conditions = {"if_generation_match": 0} if immutable else {}
        try:
            self._bucket.blob(name).upload_from_string(
                data, content_type=CONTENT_TYPE, timeout=TIMEOUT_SECONDS, retry=RETRY, **conditions
            )
        except GoogleAPICallError as exc:
            if immutable and exc.code == http.client.PRECONDITION_FAILED:
                return  # an earlier attempt of the same upload stored it
            raise _store_error("put", self._bucket.name, key, exc) from exc
        except _STORE_ERRORS as exc:
            raise _store_error("put", self._bucket.name, key, exc) from exc

    def put_fenced(self, key: str, data: bytes, *, epoch: int) -> None:
        """if_generation_match on the generation read (0 when absent): GCS refuses with 412
        when another writer replaced the object in between, and the loop reads again. The
        content is read after the generation, so it is that generation's or a newer one's; a
        newer one's higher epoch is rightly refused, a lower one loses the precondition."""
        name = join_key(self._prefix, key)

        def read() -> tuple[bytes, object] | None:
            try:
                blob = self._bucket.get_blob(name, timeout=TIMEOUT_SECONDS, retry=RETRY)
            except GoogleAPICallError as exc:
                raise _store_error("get", self._bucket.name, key, exc) from exc
            except _STORE_ERRORS as exc:
                raise _store_error("get", self._bucket.name, key, exc) from exc
            if blob is None:
                return None
            try:
                return self.get(key), int(blob.generation)
            except ObjectMissing:
                return None

        def write(version: object | None) -> bool:
            generation = 0 if version is None else version
            try:
                self._bucket.blob(name).upload_from_string(
                    data,
                    content_type=CONTENT_TYPE,
                    timeout=TIMEOUT_SECONDS,
                    retry=RETRY,
                    if_generation_match=generation,
                )
            except GoogleAPICallError as exc:
                if exc.code == http.client.PRECONDITION_FAILED:
                    return False
                raise _store_error("put", self._bucket.name, key, exc) from exc
            except _STORE_ERRORS as exc:
                raise _store_error("put", self._bucket.name, key, exc) from exc
            return True

        write_fenced(key, data, epoch, read=read, write=write)

    def get(self, key: str) -> bytes:
        name = join_key(self._prefix, key)
        sink = _BoundedSink(key)
        try:
            # download_to_file (not download_as_bytes with a range) keeps the CRC32C check,
            # which the library skips for partial reads; the sink bounds memory instead.
            self._bucket.blob(name).download_to_file(sink, timeout=TIMEOUT_SECONDS, retry=RETRY)
        except GoogleAPICallError as exc:
            if exc.code == http.client.NOT_FOUND and MISSING_BUCKET not in str(exc):
                raise ObjectMissing(f"object {key!r} does not exist") from exc
            raise _store_error("get", self._bucket.name, key, exc) from exc
        except _STORE_ERRORS as exc:
            raise _store_error("get", self._bucket.name, key, exc) from exc
        return b"".join(sink.chunks)

    def delete(self, key: str) -> None:
        name = join_key(self._prefix, key)
        try:
            self._bucket.blob(name).delete(timeout=TIMEOUT_SECONDS, retry=RETRY)
        except GoogleAPICallError as exc:
            if exc.code == http.client.NOT_FOUND and MISSING_BUCKET not in str(exc):
                return
            raise _store_error("delete", self._bucket.name, key, exc) from exc
        except _STORE_ERRORS as exc:
            raise _store_error("delete", self._bucket.name, key, exc) from exc

    def delete_under(self, prefix: str, *, max_objects: int) -> int:
        name = join_key(self._prefix, prefix.rstrip("/")) + "/"
        try:
            blobs = list(self._client.list_blobs(self._bucket, prefix=name, max_results=max_objects))
        except _STORE_ERRORS as exc:
            raise _store_error("list", self._bucket.name, prefix, exc) from exc
        for blob in blobs:
            self.delete(blob.name[len(self._prefix) + 1 :] if self._prefix else blob.name)
        return len(blobs)

    def barrier(self) -> None:
        """Puts are durable when they return."""

    def close(self) -> None:
        self._client.close()


def open_gcs_store(settings: Persistence, environ: Mapping[str, str]) -> GCSStore:
    """A GCSStore on Application Default Credentials, or on the emulator named by
    STORAGE_EMULATOR_HOST (anonymous, no project lookup)."""
    project = environ.get("GOOGLE_CLOUD_PROJECT", "")
    emulator = environ.get(EMULATOR_VARIABLE, "")
    try:
        if emulator:
            endpoint = emulator if "://" in emulator else f"http://{emulator}"
            client = storage.Client(
                project=project or EMULATOR_PROJECT,
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # google-auth leaves it unannotated
                client_options={"api_endpoint": endpoint},
            )
        else:
            client = storage.Client(**({"project": project} if project else {}))
    except (GoogleAuthError, ValueError) as exc:
        # no Application Default Credentials, or unusable ones: a configuration problem
        raise StoreError(f"gcs client: {exc}", retryable=False, reason=REASON_CREDENTIALS) from exc
    return GCSStore(client, bucket=settings.bucket, prefix=settings.prefix)


class _BoundedSink:
    """A write-only file for download_to_file that refuses more than MAX_OBJECT_BYTES."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.chunks: list[bytes] = []
        self.total = 0

    def write(self, data: bytes) -> int:
        self.total += len(data)
        if self.total > MAX_OBJECT_BYTES:
            raise object_too_large("gcs", self.key)
        self.chunks.append(bytes(data))
        return len(data)


def _store_error(operation: str, bucket: str, key: str, exc: BaseException) -> StoreError:
    message = f"gcs {operation} {bucket}/{key}: {type(exc).__name__}: {exc}"
    if isinstance(exc, GoogleAPICallError):
        # Forbidden, Unauthorized, NotFound (bucket), BadRequest never clear by themselves
        status = int(exc.code or 0)
        return StoreError(message, retryable=retryable_status(status), reason=_status_reason(status, str(exc)))
    if isinstance(exc, InvalidResponse):
        status = int(getattr(exc.response, "status_code", 0) or 0)
        return StoreError(message, retryable=retryable_status(status), reason=_status_reason(status, ""))
    if isinstance(exc, GoogleAuthError) and not isinstance(exc, AuthTransportError):
        return StoreError(message, retryable=bool(exc.retryable), reason=REASON_CREDENTIALS)
    retryable = isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS)
    return StoreError(message, retryable=retryable, reason=_transport_reason(exc))


def _status_reason(status: int, text: str) -> str:
    if status == http.client.NOT_FOUND and MISSING_BUCKET in text:
        return REASON_NO_BUCKET
    return status_reason(status)


def _transport_reason(exc: BaseException) -> str:
    cause = exc.cause if isinstance(exc, RetryError) and exc.cause is not None else exc  # the last attempt's
    if isinstance(cause, GoogleAPICallError):
        return _status_reason(int(cause.code or 0), str(cause))
    if isinstance(cause, (requests.Timeout, TimeoutError, urllib3.exceptions.TimeoutError, RetryError)):
        return REASON_TIMEOUT  # a RetryError without a cause: the retry budget ran out
    if isinstance(cause, (requests.ConnectionError, ConnectionError, AuthTransportError, urllib3.exceptions.HTTPError)):
        return REASON_UNREACHABLE
    if isinstance(cause, DataCorruption):
        return REASON_CORRUPTED
    return REASON_FAILED
