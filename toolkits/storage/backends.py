"""Where the storage tools keep objects, through Django's storage API (django-storages'
S3Storage for S3 and R2, GoogleCloudStorage for GCS, Django's FileSystemStorage).

The Storage objects own configuration, connections and writes. Two things Django's API cannot
bound are done with the same storage's own client: a page of keys (`listdir` reads a whole
folder, unpaged) and a read of at most a few bytes more than the limit (`open` downloads the
whole object). GCS writes and deletes go through the bucket too, because django-storages retries
them and a model's action is never sent twice. Every method blocks: the caller runs them in its
worker threads (tools.open_backend picks one for a configuration). Failures are StorageFailure,
which says whether the action may have happened.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "READ_TIMEOUT_SECONDS",
    "Entry",
    "FilesystemSettings",
    "GCSSettings",
    "S3Settings",
    "StorageBackend",
    "StorageFailure",
]

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 20.0  # below the tools' 25 s per operation, so a stalled store fails first
MAX_SCAN_ENTRIES = 100_000  # the filesystem backend walks at most this many entries for one page
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"

T = TypeVar("T")


class StorageFailure(Exception):
    """The store failed. `reached`: the request may have been carried out (a lost response, a
    timeout after sending, a 5xx answer to a write), so the outcome is unknown."""

    def __init__(self, message: str, *, reached: bool) -> None:
        super().__init__(message)
        self.reached = reached


@dataclass(frozen=True, slots=True)
class Entry:
    key: str  # the full key, tenant root included
    size: int


@dataclass(frozen=True, slots=True)
class S3Settings:
    """S3 or an S3-compatible store (R2: `endpoint`, region `auto`). Without keys, boto3's
    default credential chain (an operator's configuration only, never a session binding's)."""

    bucket: str
    region: str = "us-east-1"
    endpoint: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class GCSSettings:
    """GCS on Application Default Credentials, or an emulator at `endpoint` (anonymous)."""

    bucket: str
    project: str | None = None
    endpoint: str | None = None


@dataclass(frozen=True, slots=True)
class FilesystemSettings:
    root: Path


class StorageBackend(Protocol):
    """Full keys in, blocking calls. `read` returns at most `limit + 1` bytes (None: no such
    object); `list_page` keys after `after` (exclusive) in order, and whether more follow."""

    def list_page(self, prefix: str, *, after: str, limit: int) -> tuple[list[Entry], bool]: ...
    def read(self, key: str, *, limit: int) -> bytes | None: ...
    def write(self, key: str, data: bytes) -> None: ...
    def delete(self, key: str) -> None: ...


def _guarded(action: Callable[[], T], *, mutation: bool) -> T:
    """Run a filesystem action: OSError is a failure; a write that failed may have left a
    partial object (unknown), a failed read, list or delete changed nothing."""
    try:
        return action()
    except OSError as exc:
        raise StorageFailure(f"the filesystem refused: {exc.strerror or exc}", reached=mutation) from exc


class FilesystemBackend:
    """Keys are paths under `root` (segments are directories); Django's FileSystemStorage writes
    (overwriting) and deletes."""

    def __init__(self, settings: FilesystemSettings) -> None:
        self._root = settings.root.resolve()
        self._storage = FileSystemStorage(location=str(self._root), allow_overwrite=True)

    def list_page(self, prefix: str, *, after: str, limit: int) -> tuple[list[Entry], bool]:
        return _guarded(lambda: self._list(prefix, after, limit), mutation=False)

    def _list(self, prefix: str, after: str, limit: int) -> tuple[list[Entry], bool]:
        folder = prefix.rpartition("/")[0]
        start = self._root / folder if folder else self._root
        if not start.is_dir():
            return [], False
        found: list[Entry] = []
        scanned = 0
        for directory, directories, files in os.walk(start, followlinks=False):
            directories.sort()
            for name in files:
                scanned += 1
                if scanned > MAX_SCAN_ENTRIES:
                    raise StorageFailure(f"more than {MAX_SCAN_ENTRIES} objects under this prefix", reached=False)
                path = Path(directory) / name
                key = path.relative_to(self._root).as_posix()
                if key.startswith(prefix) and key > after and not path.is_symlink():
                    found.append(Entry(key, path.stat().st_size))
        found.sort(key=lambda entry: entry.key)
        return found[:limit], len(found) > limit

    def read(self, key: str, *, limit: int) -> bytes | None:
        def action() -> bytes | None:
            path = Path(self._storage.path(key))
            if not path.is_file() or path.is_symlink():
                return None
            with path.open("rb") as file:
                return file.read(limit + 1)

        return _guarded(action, mutation=False)

    def write(self, key: str, data: bytes) -> None:
        def action() -> None:
            path = Path(self._storage.path(key))
            if path.is_dir():
                raise StorageFailure("a folder of other objects has this key", reached=False)
            name = self._storage.save(key, ContentFile(data))
            if name != key:  # allow_overwrite: Django keeps the name or refuses
                raise StorageFailure(f"the store kept the object as {name!r}", reached=True)

        _guarded(action, mutation=True)

    def delete(self, key: str) -> None:
        def action() -> None:
            path = Path(self._storage.path(key))
            if path.is_file():
                self._storage.delete(key)

        _guarded(action, mutation=False)
