"""The S3 (and R2) backend: django-storages' S3Storage with one attempt per request (botocore
retries nothing: a model's action is sent once) and bounded timeouts. Listing and bounded reads
use the storage's own client (ListObjectsV2 with MaxKeys, a ranged GetObject)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)
from django.core.files.base import ContentFile
from storages.backends.s3 import S3Storage

from .backends import (
    CONNECT_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    TEXT_CONTENT_TYPE,
    Entry,
    S3Settings,
    StorageFailure,
)

__all__ = ["S3Backend"]

T = TypeVar("T")
MAX_POOL_CONNECTIONS = 32  # as many as the tools' concurrent operations
# Failures that happen before a request leaves this process: nothing can have happened.
_NOT_SENT = (
    EndpointConnectionError,
    ConnectTimeoutError,
    NoCredentialsError,
    PartialCredentialsError,
    ParamValidationError,
)


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "")


def _call(action: Callable[[], T], *, mutation: bool) -> T:
    """Run one S3 request; its failure as a StorageFailure. A 4xx answer or a failure before
    sending changed nothing; for a write or delete, anything else (a lost or cut answer, a
    timeout, a 5xx) may have been carried out."""
    try:
        return action()
    except ClientError as exc:
        status, code = _status(exc), _code(exc)
        reached = mutation and (status >= 500 or status == 0)
        raise StorageFailure(f"the store answered {status or 'an error'} {code}".strip(), reached=reached) from exc
    except _NOT_SENT as exc:
        raise StorageFailure(f"the store was not reached: {type(exc).__name__}", reached=False) from exc
    except BotoCoreError as exc:
        raise StorageFailure(f"the store's answer was lost: {type(exc).__name__}", reached=mutation) from exc


class S3Backend:
    def __init__(self, settings: S3Settings) -> None:
        self._bucket = settings.bucket
        self._storage = S3Storage(
            bucket_name=settings.bucket,
            region_name=settings.region,
            endpoint_url=settings.endpoint,
            access_key=settings.access_key,
            secret_key=settings.secret_key,
            security_token=settings.session_token,
            session_profile=None,
            location="",
            file_overwrite=True,
            default_acl=None,
            querystring_auth=False,
            object_parameters={"ContentType": TEXT_CONTENT_TYPE},
            client_config=Config(
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                read_timeout=READ_TIMEOUT_SECONDS,
                retries={"total_max_attempts": 1, "mode": "standard"},
                max_pool_connections=MAX_POOL_CONNECTIONS,
                s3={"addressing_style": "path"} if settings.endpoint else {},
            ),
            transfer_config=TransferConfig(use_threads=False),
        )

    def _client(self) -> Any:
        return self._storage.connection.meta.client

    def list_page(self, prefix: str, *, after: str, limit: int) -> tuple[list[Entry], bool]:
        request: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": limit}
        if after:
            request["StartAfter"] = after
        answer = _call(lambda: self._client().list_objects_v2(**request), mutation=False)
        entries = [Entry(str(item["Key"]), int(item.get("Size", 0))) for item in answer.get("Contents", [])]
        return entries[:limit], bool(answer.get("IsTruncated")) or len(entries) > limit

    def read(self, key: str, *, limit: int) -> bytes | None:
        def action() -> bytes | None:
            try:
                answer = self._client().get_object(Bucket=self._bucket, Key=key, Range=f"bytes=0-{limit}")
            except ClientError as exc:
                if _code(exc) in ("NoSuchKey", "404") or _status(exc) == 404:
                    return None
                if _status(exc) == 416:  # a range of an empty object is unsatisfiable
                    return b""
                raise
            with answer["Body"] as body:
                return bytes(body.read(limit + 1))

        return _call(action, mutation=False)

    def write(self, key: str, data: bytes) -> None:
        name = _call(lambda: self._storage.save(key, ContentFile(data)), mutation=True)
        if name != key:
            raise StorageFailure(f"the store kept the object as {name!r}", reached=True)

    def delete(self, key: str) -> None:
        _call(lambda: self._storage.delete(key), mutation=True)
