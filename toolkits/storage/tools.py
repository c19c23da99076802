"""The storage tools (`list`, `read`, `write`, `delete`) over one backend, for one tenant root.

The caller gives the tenant's root (keys.tenant_root, from the trusted identity) and the model's
arguments; every store request runs in this object's worker threads (never on the event loop),
at most MAX_CONCURRENT at once and MAX_ADMITTED admitted, each under OPERATION_SECONDS. A refusal
the model can correct (a bad key, a missing object, text too large) is an error result; a failed
store request raises StorageFailure, whose `reached` says whether a write or delete may have
happened anyway.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from .backends import (
    FilesystemBackend,
    FilesystemSettings,
    GCSSettings,
    S3Settings,
    StorageBackend,
    StorageFailure,
)
from .keys import KeyRefused, check_key, check_list_prefix, decode_cursor, encode_cursor
from .s3 import S3Backend

__all__ = [
    "MAX_ADMITTED",
    "MAX_CONCURRENT",
    "MUTATIONS",
    "OPERATIONS",
    "OPERATION_SECONDS",
    "PAGE_SIZE",
    "TEXT_LIMIT_BYTES",
    "BackendSettings",
    "StorageTools",
    "descriptors",
    "error_result",
    "open_backend",
]

PAGE_SIZE = 100  # spec (tools/resources): lists paginate at 100 keys
TEXT_LIMIT_BYTES = 128 << 10  # spec: reads accept UTF-8 text up to 128 KiB; writes likewise
MAX_CONCURRENT = 32  # spec: at most 32 concurrent operations
MAX_ADMITTED = 64  # running plus waiting for a thread; past it a call is refused, not queued
OPERATION_SECONDS = 25.0  # spec: each request expires after 25 seconds
MAX_CACHED_BACKENDS = 32  # bindings whose connections are kept between calls
OPERATIONS = ("list", "read", "write", "delete")
MUTATIONS = frozenset({"write", "delete"})

BackendSettings = S3Settings | GCSSettings | FilesystemSettings
T = TypeVar("T")

_KEY = {"type": "string", "minLength": 1, "maxLength": 512, "description": "A relative key, e.g. notes/today.md"}
_SCHEMAS: dict[str, tuple[str, dict[str, object]]] = {
    "list": (
        f"List stored objects, {PAGE_SIZE} keys a page, in key order; pass next_cursor to continue.",
        {
            "type": "object",
            "properties": {
                "prefix": {"type": "string", "maxLength": 512, "description": "Only keys starting with this"},
                "cursor": {"type": "string", "maxLength": 700, "description": "next_cursor of the previous page"},
            },
            "additionalProperties": False,
        },
    ),
    "read": (
        "Read a stored UTF-8 text object (at most 128 KiB).",
        {"type": "object", "properties": {"key": _KEY}, "required": ["key"], "additionalProperties": False},
    ),
    "write": (
        "Store UTF-8 text (at most 128 KiB) under a key, replacing any object there.",
        {
            "type": "object",
            "properties": {"key": _KEY, "content": {"type": "string", "maxLength": TEXT_LIMIT_BYTES}},
            "required": ["key", "content"],
            "additionalProperties": False,
        },
    ),
    "delete": (
        "Delete a stored object (deleting a missing key is not an error).",
        {"type": "object", "properties": {"key": _KEY}, "required": ["key"], "additionalProperties": False},
    ),
}


def descriptors(operations: tuple[str, ...] | list[str], *, prefix: str = "") -> list[dict[str, object]]:
    """Tool descriptors of `operations`, named `<prefix><operation>`."""
    return [
        {"name": f"{prefix}{operation}", "description": _SCHEMAS[operation][0], "input_schema": _SCHEMAS[operation][1]}
        for operation in operations
    ]


def open_backend(settings: BackendSettings) -> StorageBackend:
    """A backend for `settings`; builds no connection (the first call does, in its thread)."""
    if isinstance(settings, S3Settings):
        return S3Backend(settings)
    if isinstance(settings, GCSSettings):
        from .gcs import GCSBackend  # google's client only where a GCS backend is configured

        return GCSBackend(settings)
    return FilesystemBackend(settings)


def error_result(message: str, *, unknown_outcome: bool = False) -> dict[str, object]:
    result: dict[str, object] = {"content": [{"type": "text", "text": message}], "is_error": True}
    if unknown_outcome:
        result["unknown_outcome"] = True
    return result


def _ok(text: str, structured: dict[str, object]) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "structured_content": structured}


class StorageTools:
    def __init__(self, *, max_concurrent: int = MAX_CONCURRENT, max_admitted: int = MAX_ADMITTED) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max_concurrent, thread_name_prefix="storage-tools")
        self._max_admitted = max_admitted
        self._admitted = 0
        self._lock = threading.Lock()  # the count drops in worker threads
        self._backends: OrderedDict[BackendSettings, StorageBackend] = OrderedDict()

    def __repr__(self) -> str:  # never a backend's settings (they may hold keys)
        return f"StorageTools(admitted={self._admitted})"

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._backends.clear()

    def _backend(self, settings: BackendSettings) -> StorageBackend:
        backend = self._backends.get(settings)
        if backend is None:
            backend = self._backends[settings] = open_backend(settings)
            while len(self._backends) > MAX_CACHED_BACKENDS:
                self._backends.popitem(last=False)
        self._backends.move_to_end(settings)
        return backend

    def _release(self, _: Future[T]) -> None:
        with self._lock:
            self._admitted -= 1

    async def _run(self, action: Callable[[], T], *, mutation: bool) -> T:
        """`action` in a worker thread under OPERATION_SECONDS; the admission count holds until
        the thread is done with it, even past the deadline."""
        with self._lock:
            if self._admitted >= self._max_admitted:
                raise StorageFailure("storage is busy; try again shortly", reached=False)
            self._admitted += 1
        try:
            future = self._executor.submit(action)
        except RuntimeError:  # shut down
            with self._lock:
                self._admitted -= 1
            raise StorageFailure("storage is shutting down", reached=False) from None
        future.add_done_callback(self._release)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), OPERATION_SECONDS)
        except TimeoutError:
            raise StorageFailure(f"the store did not answer within {OPERATION_SECONDS:g} s", reached=mutation) from None

    async def call(
        self, settings: BackendSettings, *, root: str, operation: str, arguments: Mapping[str, object]
    ) -> dict[str, object]:
        """One tool call for the tenant whose root is `root`; its result object."""
        backend = self._backend(settings)
        try:
            if operation == "list":
                return await self._list(backend, root, arguments)
            if operation == "read":
                return await self._read(backend, root, check_key(arguments.get("key")))
            if operation == "write":
                return await self._write(backend, root, check_key(arguments.get("key")), arguments.get("content"))
            if operation == "delete":
                key = check_key(arguments.get("key"))
                await self._run(lambda: backend.delete(root + key), mutation=True)
                return _ok(f"Deleted {key}.", {"key": key, "deleted": True})
        except KeyRefused as exc:
            return error_result(str(exc))
        raise ValueError(f"unknown storage operation {operation!r}")

    async def _list(self, backend: StorageBackend, root: str, arguments: Mapping[str, object]) -> dict[str, object]:
        prefix = check_list_prefix(arguments.get("prefix"))
        cursor = arguments.get("cursor")
        after = root + decode_cursor(cursor) if cursor not in (None, "") else ""
        entries, more = await self._run(
            lambda: backend.list_page(root + prefix, after=after, limit=PAGE_SIZE), mutation=False
        )
        keys = [{"key": entry.key.removeprefix(root), "size": entry.size} for entry in entries]
        next_cursor = encode_cursor(str(keys[-1]["key"])) if more and keys else None
        lines = [f"{item['key']} ({item['size']} bytes)" for item in keys] or ["(no objects)"]
        if next_cursor:
            lines.append(f"More keys follow: pass cursor {next_cursor}")
        return _ok("\n".join(lines), {"keys": keys, "next_cursor": next_cursor})

    async def _read(self, backend: StorageBackend, root: str, key: str) -> dict[str, object]:
        data = await self._run(lambda: backend.read(root + key, limit=TEXT_LIMIT_BYTES), mutation=False)
        if data is None:
            return error_result(f"No object has the key {key}.")
        if len(data) > TEXT_LIMIT_BYTES:
            return error_result(f"{key} is larger than {TEXT_LIMIT_BYTES} bytes; only text up to 128 KiB is read.")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return error_result(f"{key} is not UTF-8 text; only UTF-8 text is read.")
        return _ok(text, {"key": key, "bytes": len(data)})

    async def _write(self, backend: StorageBackend, root: str, key: str, content: object) -> dict[str, object]:
        if not isinstance(content, str):
            return error_result("content must be a string")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            return error_result("content is not valid Unicode text (a lone surrogate)")
        if len(data) > TEXT_LIMIT_BYTES:
            return error_result(f"content is {len(data)} bytes of UTF-8; at most {TEXT_LIMIT_BYTES} are stored.")
        await self._run(lambda: backend.write(root + key, data), mutation=True)
        return _ok(f"Wrote {key} ({len(data)} bytes).", {"key": key, "bytes": len(data)})
