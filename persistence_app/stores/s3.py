"""The `s3` and `r2` providers through boto3. Immutable puts are conditional writes
(`If-None-Match: *`), so the server, not a racy existence check, refuses to overwrite.
Imports no Django.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ChecksumError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    FlexibleChecksumError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from foundation.hostconfig import Persistence

from .base import (
    MAX_OBJECT_BYTES,
    REASON_CORRUPTED,
    REASON_CREDENTIALS,
    REASON_DENIED,
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

__all__ = ["S3Store", "open_s3_store"]

CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 30  # a 2 MiB object on a slow link
# One quick retry inside a call for a dropped connection; the archive retries whole operations
# with backoff, and a stopped server must fail the call within seconds, not minutes.
MAX_ATTEMPTS = 2
MAX_POOL_CONNECTIONS = 16  # concurrent block uploads from worker threads share one client
READ_CHUNK_BYTES = 1 << 20

PRECONDITION_FAILED = 412  # If-None-Match: the object already exists
MISSING_OBJECT_CODES = frozenset({"NoSuchKey", "NotFound", "404"})  # HEAD-style 404s carry no code
# Failures a later attempt can get past (throttling, server trouble, a concurrent conditional
# write to the same key). Codes not listed here follow the status: 5xx, 408 and 429 retry.
RETRYABLE_CODES = frozenset(
    {
        "ConditionalRequestConflict",  # 409: another conditional write to the key is in flight
        "InternalError",
        "OperationAborted",
        "RequestTimeout",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
    }
)
# Error codes by what clients are told (the code itself, with the bucket and key, is logged)
CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}
)
DENIED_CODES = frozenset({"AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidObjectState"})
_RETRYABLE_TRANSPORT_ERRORS = (
    BotoConnectionError,  # refused, connect timeout, TLS, proxy
    HTTPClientError,  # read timeout, connection closed, body stream broken
    IncompleteReadError,
    ChecksumError,  # corrupted in transit
    FlexibleChecksumError,
)


class S3Store:
    def __init__(self, client: Any, *, bucket: str, prefix: str = "") -> None:
        self._client = client  # a boto3 S3 client (thread-safe; boto3 ships no type stubs)
        self._bucket = bucket
        self._prefix = normalize_prefix(prefix)

    def put(self, key: str, data: bytes, *, immutable: bool) -> None:
        name = join_key(self._prefix, key)
        check_size(key, data)
        conditions = {"IfNoneMatch": "*"} if immutable else {}
        try:
            self._client.put_object(Bucket=self._bucket, Key=name, Body=data, ContentMD5=_md5(data), **conditions)
        except ClientError as exc:
            if immutable and _status(exc) == PRECONDITION_FAILED:
                return  # an earlier attempt of the same upload stored it
            raise _client_error("put", self._bucket, key, exc) from exc
        except BotoCoreError as exc:
            raise _transport_error("put", self._bucket, key, exc) from exc

    def put_fenced(self, key: str, data: bytes, *, epoch: int) -> None:
        """If-Match on the ETag read (If-None-Match: * when absent): S3 refuses with 412 when
        another writer replaced the object in between, and the loop reads again."""
        name = join_key(self._prefix, key)

        def read() -> tuple[bytes, object] | None:
            try:
                response = self._client.get_object(Bucket=self._bucket, Key=name)
                body = response["Body"]
                try:
                    return _read_bounded(body, key), response["ETag"]
                finally:
                    body.close()
            except ClientError as exc:
                if _code(exc) in MISSING_OBJECT_CODES:
                    return None
                raise _client_error("get", self._bucket, key, exc) from exc
            except BotoCoreError as exc:
                raise _transport_error("get", self._bucket, key, exc) from exc

        def write(version: object | None) -> bool:
            conditions = {"IfNoneMatch": "*"} if version is None else {"IfMatch": str(version)}
            try:
                self._client.put_object(Bucket=self._bucket, Key=name, Body=data, ContentMD5=_md5(data), **conditions)
            except ClientError as exc:
                if _status(exc) == PRECONDITION_FAILED or _code(exc) == "ConditionalRequestConflict":
                    return False
                raise _client_error("put", self._bucket, key, exc) from exc
            except BotoCoreError as exc:
                raise _transport_error("put", self._bucket, key, exc) from exc
            return True

        write_fenced(key, data, epoch, read=read, write=write)

    def get(self, key: str) -> bytes:
        name = join_key(self._prefix, key)
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=name)
            body = response["Body"]
            try:
                if int(response.get("ContentLength") or 0) > MAX_OBJECT_BYTES:
                    raise object_too_large("s3", key)
                return _read_bounded(body, key)
            finally:
                body.close()
        except ClientError as exc:
            if _code(exc) in MISSING_OBJECT_CODES:
                raise ObjectMissing(f"object {key!r} does not exist") from exc
            raise _client_error("get", self._bucket, key, exc) from exc
        except BotoCoreError as exc:
            raise _transport_error("get", self._bucket, key, exc) from exc

    def delete(self, key: str) -> None:
        name = join_key(self._prefix, key)
        try:
            self._client.delete_object(Bucket=self._bucket, Key=name)  # S3 answers 204 for an absent key
        except ClientError as exc:
            raise _client_error("delete", self._bucket, key, exc) from exc
        except BotoCoreError as exc:
            raise _transport_error("delete", self._bucket, key, exc) from exc

    def delete_under(self, prefix: str, *, max_objects: int) -> int:
        name = join_key(self._prefix, prefix.rstrip("/")) + "/"
        removed = 0
        try:
            while removed < max_objects:
                page = min(S3_DELETE_BATCH, max_objects - removed)
                listed = self._client.list_objects_v2(Bucket=self._bucket, Prefix=name, MaxKeys=page)
                keys = [{"Key": item["Key"]} for item in listed.get("Contents", ())]
                if not keys:
                    break
                answer = self._client.delete_objects(Bucket=self._bucket, Delete={"Objects": keys, "Quiet": True})
                if answer.get("Errors"):
                    failed = answer["Errors"][0]
                    raise StoreError(f"s3 delete of {failed.get('Key')!r} failed: {failed.get('Code')}", retryable=True)
                removed += len(keys)
        except ClientError as exc:
            raise _client_error("delete", self._bucket, prefix, exc) from exc
        except BotoCoreError as exc:
            raise _transport_error("delete", self._bucket, prefix, exc) from exc
        return removed

    def barrier(self) -> None:
        """Puts are durable when they return."""

    def close(self) -> None:
        self._client.close()


S3_DELETE_BATCH = 1000  # S3: DeleteObjects takes at most 1,000 keys, ListObjectsV2 returns as many


def open_s3_store(settings: Persistence, environ: Mapping[str, str]) -> S3Store:
    """An S3Store for an `s3` or `r2` setting: static keys from `environ` when both
    `access_key_env` and `secret_key_env` are set, else boto3's default credential chain."""
    credentials: dict[str, str] = {}
    if settings.access_key_env and settings.secret_key_env:
        credentials = {
            "aws_access_key_id": _environment_value(environ, settings.access_key_env),
            "aws_secret_access_key": _environment_value(environ, settings.secret_key_env),
        }
    region = settings.region or ("auto" if settings.provider == "r2" else None)
    options: dict[str, Any] = {}
    if settings.endpoint:
        options["s3"] = {"addressing_style": "path"}  # spec: a custom endpoint means path-style
        # S3-compatible servers differ in their support of the SDK's default CRC trailers;
        # every one checks Content-MD5, which put() always sends.
        options["request_checksum_calculation"] = "when_required"
        options["response_checksum_validation"] = "when_required"
    config = Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
        max_pool_connections=MAX_POOL_CONNECTIONS,
        **options,
    )
    try:
        session = boto3.session.Session(region_name=region, **credentials)
        client = session.client("s3", endpoint_url=settings.endpoint or None, config=config)
    except (BotoCoreError, ValueError) as exc:
        raise StoreError(f"s3 client: {exc}", retryable=False, reason=REASON_FAILED) from exc
    return S3Store(client, bucket=settings.bucket, prefix=settings.prefix)


def _environment_value(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "")
    if not value:
        raise StoreError(f"persistence: environment variable {name} is not set", retryable=False)
    return value


def _read_bounded(body: Any, key: str) -> bytes:
    # Read to EOF: the SDK validates a response checksum only once the stream is exhausted.
    chunks: list[bytes] = []
    total = 0
    while chunk := body.read(READ_CHUNK_BYTES):
        total += len(chunk)
        if total > MAX_OBJECT_BYTES:
            raise object_too_large("s3", key)
        chunks.append(chunk)
    return b"".join(chunks)


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _client_error(operation: str, bucket: str, key: str, exc: ClientError) -> StoreError:
    code, status = _code(exc), _status(exc)
    retryable = code in RETRYABLE_CODES or retryable_status(status)
    if code == "NoSuchBucket":
        reason = REASON_NO_BUCKET
    elif code in CREDENTIAL_CODES:
        reason = REASON_CREDENTIALS
    elif code in DENIED_CODES:
        reason = REASON_DENIED
    else:
        reason = status_reason(status)
    return StoreError(f"s3 {operation} {bucket}/{key}: {exc}", retryable=retryable, reason=reason)


def _transport_error(operation: str, bucket: str, key: str, exc: BotoCoreError) -> StoreError:
    # Connection refused/reset, timeouts, truncated or corrupted bodies retry; missing
    # credentials, bad parameters or configuration do not.
    retryable = isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS)
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        reason = REASON_TIMEOUT
    elif isinstance(exc, (EndpointConnectionError, BotoConnectionError)):
        reason = REASON_UNREACHABLE
    elif isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        reason = REASON_CREDENTIALS
    elif isinstance(exc, (ChecksumError, FlexibleChecksumError, IncompleteReadError)):
        reason = REASON_CORRUPTED
    else:
        reason = REASON_FAILED
    return StoreError(f"s3 {operation} {bucket}/{key}: {exc}", retryable=retryable, reason=reason)
