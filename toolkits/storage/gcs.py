"""The GCS backend: django-storages' GoogleCloudStorage on a client this module builds (an
emulator's endpoint, anonymous, when one is given). Listing, bounded reads, writes and deletes
use the storage's bucket with `retry=None`: django-storages retries uploads and deletes, and a
model's action is sent once."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from typing import Any, TypeVar

import requests
import urllib3
from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError, NotFound
from google.auth.credentials import AnonymousCredentials
from google.auth.exceptions import GoogleAuthError
from google.cloud.storage import Client
from storages.backends.gcloud import GoogleCloudStorage

from .backends import (
    CONNECT_TIMEOUT_SECONDS,
    READ_TIMEOUT_SECONDS,
    TEXT_CONTENT_TYPE,
    Entry,
    GCSSettings,
    StorageFailure,
)

__all__ = ["GCSBackend"]

T = TypeVar("T")
TIMEOUT = (CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS)
EMULATOR_PROJECT = "brain"  # an emulator needs some project name


class _Storage(GoogleCloudStorage):  # type: ignore[misc]  # django-storages is untyped
    """GoogleCloudStorage whose client honours an endpoint (django-storages' `custom_endpoint`
    only changes the URLs it hands out)."""

    def __init__(self, settings: GCSSettings) -> None:
        super().__init__(bucket_name=settings.bucket, project_id=settings.project, file_overwrite=True)
        self._endpoint = settings.endpoint
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            if self._endpoint:
                self._client = Client(
                    project=self.project_id or EMULATOR_PROJECT,
                    credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]  # google-auth is untyped here
                    client_options={"api_endpoint": self._endpoint},
                )
            else:
                self._client = Client(project=self.project_id)
        return self._client


def _not_sent(exc: BaseException) -> bool:
    """A connection that was never made: requests wraps urllib3's NewConnectionError."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(exc.args[0] if exc.args else None, urllib3.exceptions.NewConnectionError) or isinstance(
        reason, urllib3.exceptions.NewConnectionError
    )


def _call(action: Callable[[], T], *, mutation: bool) -> T:
    try:
        return action()
    except GoogleAPICallError as exc:
        status = int(exc.code or 0)
        reached = mutation and (status >= 500 or status == 0)
        raise StorageFailure(f"the store answered {status or 'an error'}", reached=reached) from exc
    except GoogleAuthError as exc:
        raise StorageFailure(f"the store's credentials failed: {type(exc).__name__}", reached=False) from exc
    except (
        GoogleAPIError,
        requests.RequestException,
        urllib3.exceptions.HTTPError,
        http.client.HTTPException,
        ConnectionError,
    ) as exc:
        if _not_sent(exc):
            raise StorageFailure("the store was not reached", reached=False) from exc
        raise StorageFailure(f"the store's answer was lost: {type(exc).__name__}", reached=mutation) from exc


class GCSBackend:
    def __init__(self, settings: GCSSettings) -> None:
        self._storage = _Storage(settings)

    def _bucket(self) -> Any:
        return self._storage.bucket

    def list_page(self, prefix: str, *, after: str, limit: int) -> tuple[list[Entry], bool]:
        def action() -> tuple[list[Entry], bool]:
            # startOffset is inclusive: ask for one more, drop `after` itself
            options: dict[str, Any] = {"start_offset": after} if after else {}
            blobs = self._storage.client.list_blobs(
                self._bucket(), prefix=prefix, max_results=limit + 2, timeout=TIMEOUT, retry=None, **options
            )
            entries = [Entry(str(blob.name), int(blob.size or 0)) for blob in blobs if blob.name > after]
            return entries[:limit], len(entries) > limit

        return _call(action, mutation=False)

    def read(self, key: str, *, limit: int) -> bytes | None:
        def action() -> bytes | None:
            blob = self._bucket().blob(key)
            try:
                return bytes(blob.download_as_bytes(start=0, end=limit, timeout=TIMEOUT, retry=None))
            except NotFound:
                return None
            except GoogleAPICallError as exc:
                if exc.code == 416:  # a range of an empty object is unsatisfiable
                    return b""
                raise

        return _call(action, mutation=False)

    def write(self, key: str, data: bytes) -> None:
        blob = self._bucket().blob(key)
        _call(
            lambda: blob.upload_from_string(data, content_type=TEXT_CONTENT_TYPE, timeout=TIMEOUT, retry=None),
            mutation=True,
        )

    def delete(self, key: str) -> None:
        def action() -> None:
            try:
                self._bucket().delete_blob(key, timeout=TIMEOUT, retry=None)
            except NotFound:
                pass

        _call(action, mutation=True)
