"""The checkpoint archive's object layout: publish a session's files as immutable blocks, read
a checkpoint back.

    sessions/<id>/blocks/<generation>/<index>        64 KiB, immutable, shared by checkpoints
    sessions/<id>/tails/<checkpoint>/<generation>    bytes past the last whole block that this
                                                     checkpoint added
    sessions/<id>/checkpoints/<checkpoint>           the manifest, written after all of the above
    sessions/<id>/latest                             {"checkpoint": id}, replaced on each publish

Each file has its own generation: a random id under which its blocks are numbered. A file keeps
its generation while its local bytes only grow past what was uploaded; anything else (a restore,
a file shorter than uploaded, changed bytes) starts a new one, so an immutable key is never
asked to hold two different blocks. A file's bytes past its last whole block are a short list
of tail segments, each uploaded by the checkpoint that appended it, so a checkpoint uploads
about its new bytes (plus, when a block fills, that block whole). Transfers run on a few
threads. Blocking I/O, run in worker threads or Celery workers; no Django.
"""

from __future__ import annotations

import hashlib
import math
import os
import secrets
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from time import monotonic
from typing import Any, TypedDict

import orjson

from persistence_app.manifest import (
    BLOCK_BYTES,
    MANIFEST_VERSION,
    MAX_FILES,
    MAX_TAIL_SEGMENTS,
    ManifestProblem,
    check_manifest,
    is_hex_id,
)
from persistence_app.stores.base import MAX_OBJECT_BYTES, REASON_TIMEOUT, ObjectMissing, ObjectStore, StoreError

__all__ = [
    "BLOCK_BYTES",
    "MANIFEST_VERSION",
    "ArchiveError",
    "FileEntry",
    "InvalidManifest",
    "LocalFile",
    "Manifest",
    "PublishDeadline",
    "UploadedFile",
    "block_key",
    "checkpoint_key",
    "latest_key",
    "new_checkpoint_id",
    "publish",
    "read_file",
    "read_latest",
    "read_manifest",
]

TRANSFER_THREADS = 8
TRANSFERS_IN_FLIGHT = 16  # blocks read ahead of their upload: bounds memory to 1 MiB


class ArchiveError(StoreError):
    """A manifest or object that does not hold what the archive wrote (not retryable)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class PublishDeadline(StoreError):
    """A publish that ran past its deadline: the archive is hung or far too slow. Its transfers
    are abandoned (each ends at the store client's own timeouts); retry later, not now."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=True, reason=REASON_TIMEOUT)


class InvalidManifest(ArchiveError):
    """A manifest that is not one publish() writes, or describes more than the server allows:
    refused before anything is written (a 4xx, never a 500)."""


class FileEntry(TypedDict):
    """One file of a manifest: `blocks` whole blocks of its generation, then its tail segments
    ([key, size] pairs, in order) up to `size`."""

    generation: str
    size: int
    blocks: int
    tail: list[tuple[str, int]]


class UploadedFile(TypedDict):
    """What uploaded.json remembers of a file: enough to reuse its blocks and tail safely."""

    generation: str
    blocks: int
    last_block_sha256: str  # of block `blocks - 1`, "" when no block is uploaded
    tail: list[tuple[str, int]]
    tail_sha256: str  # of the tail segments' bytes, together


class Manifest(TypedDict):
    version: int
    checkpoint: str
    session: dict[str, Any]  # id, tenant, harness, config, descriptors, created_at
    native_checkpoint: dict[str, Any]  # the checkpoints.jsonl entry: id, offset, time, files
    resume_offset: int
    history_bytes: int
    time: str
    files: dict[str, FileEntry]  # "events.jsonl" and "native/<path>"
    credentials: list[Any]  # the session's sealed credential records (tools_app.vault), never plaintext


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A file to publish: its archive name, local path and the size to publish."""

    name: str
    path: str
    size: int


def new_checkpoint_id() -> str:
    return secrets.token_hex(16)


def block_key(session_id: str, generation: str, index: int) -> str:
    return f"sessions/{session_id}/blocks/{generation}/{index}"


def tail_key(session_id: str, checkpoint: str, generation: str) -> str:
    return f"sessions/{session_id}/tails/{checkpoint}/{generation}"


def checkpoint_key(session_id: str, checkpoint: str) -> str:
    return f"sessions/{session_id}/checkpoints/{checkpoint}"


def latest_key(session_id: str) -> str:
    return f"sessions/{session_id}/latest"


def _read_exactly(descriptor: int, offset: int, size: int, name: str) -> bytes:
    data = os.pread(descriptor, size, offset)
    if len(data) != size:
        raise ArchiveError(f"{name} is shorter than its checkpoint ({offset + len(data)} < {offset + size} bytes)")
    return data


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reusable(descriptor: int, uploaded: UploadedFile | None, size: int, name: str) -> UploadedFile | None:
    """The uploaded state when the local file still starts with what it uploaded: its last
    whole block and its tail bytes are unchanged."""
    if uploaded is None or not isinstance(uploaded.get("tail"), list):
        return None
    base = uploaded["blocks"] * BLOCK_BYTES
    tail_bytes = sum(segment_size for _, segment_size in uploaded["tail"])
    if base + tail_bytes > size:
        return None
    if uploaded["blocks"]:
        last = _read_exactly(descriptor, base - BLOCK_BYTES, BLOCK_BYTES, name)
        if _sha256(last) != uploaded["last_block_sha256"]:
            return None
    if tail_bytes and _sha256(_read_exactly(descriptor, base, tail_bytes, name)) != uploaded["tail_sha256"]:
        return None
    return uploaded


class _Uploads:
    """Puts objects on a few threads with a bounded number in flight; the first failure wins.
    Every wait ends at `deadline` (time.monotonic()), raising PublishDeadline."""

    def __init__(self, store: ObjectStore, threads: ThreadPoolExecutor, *, deadline: float) -> None:
        self.store = store
        self.threads = threads
        self.deadline = deadline
        self.pending: list[Future[None]] = []
        self.sent = 0

    def put(self, key: str, data: bytes) -> None:
        if len(self.pending) >= TRANSFERS_IN_FLIGHT:
            self._result(self.pending.pop(0))
        self.pending.append(self.threads.submit(self.store.put, key, data, immutable=True))
        self.sent += len(data)

    def call(self, function: Any, *arguments: Any, **options: Any) -> None:
        """One more store call on the transfer threads, waited for within the deadline."""
        self._result(self.threads.submit(function, *arguments, **options))

    def wait(self) -> None:
        try:
            for future in self.pending:
                self._result(future)
        finally:
            for future in self.pending:
                future.cancel()
            self.pending.clear()

    def _result(self, future: Future[None]) -> None:
        try:
            # no deadline waits without a timeout: an infinite one overflows the lock's wait
            future.result(timeout=None if math.isinf(self.deadline) else max(0.0, self.deadline - monotonic()))
        except TimeoutError:
            raise PublishDeadline("the publish passed its deadline waiting for the archive") from None


def _publish_file(
    uploads: _Uploads, session_id: str, checkpoint: str, local: LocalFile, uploaded: UploadedFile | None
) -> tuple[FileEntry, UploadedFile]:
    """Queue the file's new whole blocks and its new tail segment. A block that fills sends its
    bytes already in tail segments again, less than BLOCK_BYTES. Returns the manifest entry and
    the uploaded state."""
    descriptor = os.open(local.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        reuse = _reusable(descriptor, uploaded, local.size, local.name)
        generation = reuse["generation"] if reuse else secrets.token_hex(16)
        done = reuse["blocks"] if reuse else 0
        last_sha = reuse["last_block_sha256"] if reuse else ""
        tail: list[tuple[str, int]] = [(key, size) for key, size in reuse["tail"]] if reuse else []
        base = done * BLOCK_BYTES
        tail_end = base + sum(size for _, size in tail)
        whole = local.size // BLOCK_BYTES
        if len(tail) >= MAX_TAIL_SEGMENTS:
            tail, tail_end = [], base  # many small checkpoints: send the tail again as one segment
        if whole > done:
            for index in range(done, whole):
                block = _read_exactly(descriptor, index * BLOCK_BYTES, BLOCK_BYTES, local.name)
                uploads.put(block_key(session_id, generation, index), block)
                last_sha = _sha256(block)
            done, base = whole, whole * BLOCK_BYTES
            tail, tail_end = [], whole * BLOCK_BYTES
        if local.size > tail_end:
            key = tail_key(session_id, checkpoint, generation)
            uploads.put(key, _read_exactly(descriptor, tail_end, local.size - tail_end, local.name))
            tail.append((key, local.size - tail_end))
        tail_sha = _sha256(_read_exactly(descriptor, base, local.size - base, local.name)) if tail else ""
    finally:
        os.close(descriptor)
    entry: FileEntry = {"generation": generation, "size": local.size, "blocks": done, "tail": tail}
    state: UploadedFile = {
        "generation": generation,
        "blocks": done,
        "last_block_sha256": last_sha,
        "tail": tail,
        "tail_sha256": tail_sha,
    }
    return entry, state


@dataclass(frozen=True, slots=True)
class Published:
    manifest: Manifest
    uploaded: dict[str, UploadedFile]
    bytes_sent: int


def publish(
    store: ObjectStore,
    *,
    checkpoint: str,
    session: dict[str, Any],
    native_checkpoint: dict[str, Any],
    history_bytes: int,
    time: str,
    files: list[LocalFile],
    uploaded: dict[str, UploadedFile],
    credentials: Sequence[Any] = (),
    deadline: float = math.inf,
) -> Published:
    """Upload every file's new blocks and tail, then the manifest. `latest` is the caller's,
    after its own fencing check. A failure leaves unreachable blocks, never a manifest. Past
    `deadline` (time.monotonic()) it raises PublishDeadline without waiting for the transfers
    still in flight: a hung archive holds the caller no longer than that."""
    if len(files) > MAX_FILES:
        raise ArchiveError(f"a checkpoint holds at most {MAX_FILES - 1} native files")
    session_id = session["id"]
    entries: dict[str, FileEntry] = {}
    states: dict[str, UploadedFile] = {}
    threads = ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="brain-upload")
    uploads = _Uploads(store, threads, deadline=deadline)
    manifest: Manifest | None = None
    try:
        try:
            for local in files:
                entries[local.name], states[local.name] = _publish_file(
                    uploads, session_id, checkpoint, local, uploaded.get(local.name)
                )
        finally:
            uploads.wait()  # every block and tail is stored, or the first failure is raised
        manifest = _publish_manifest(
            uploads,
            checkpoint=checkpoint,
            session=session,
            native_checkpoint=native_checkpoint,
            history_bytes=history_bytes,
            time=time,
            entries=entries,
            credentials=credentials,
        )
    finally:
        # a transfer stuck in a hung archive is left to its client's timeouts, not waited for
        threads.shutdown(wait=manifest is not None, cancel_futures=True)
    return Published(manifest=manifest, uploaded=states, bytes_sent=uploads.sent)


def _publish_manifest(
    uploads: _Uploads,
    *,
    checkpoint: str,
    session: dict[str, Any],
    native_checkpoint: dict[str, Any],
    history_bytes: int,
    time: str,
    entries: dict[str, FileEntry],
    credentials: Sequence[Any],
) -> Manifest:
    manifest: Manifest = {
        "version": MANIFEST_VERSION,
        "checkpoint": checkpoint,
        "session": session,
        "native_checkpoint": native_checkpoint,
        "resume_offset": int(native_checkpoint["offset"]),
        "history_bytes": history_bytes,
        "time": time,
        "files": entries,
        "credentials": list(credentials),
    }
    body = orjson.dumps(manifest)
    if len(body) > MAX_OBJECT_BYTES:
        raise ArchiveError("checkpoint manifest exceeds the object size limit")
    uploads.call(uploads.store.barrier)  # every block and tail is durable before the manifest that names them
    uploads.call(uploads.store.put, checkpoint_key(session["id"], checkpoint), body, immutable=True)
    uploads.sent += len(body)
    return manifest


def read_latest(store: ObjectStore, session_id: str) -> str:
    """The checkpoint id `latest` names; ObjectMissing when the session was never published."""
    try:
        value = orjson.loads(store.get(latest_key(session_id)))
        checkpoint = value["checkpoint"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ArchiveError(f"sessions/{session_id}/latest does not name a checkpoint") from exc
    if not is_hex_id(checkpoint):
        raise ArchiveError(f"sessions/{session_id}/latest does not name a checkpoint")
    return str(checkpoint)


def read_manifest(
    store: ObjectStore, session_id: str, checkpoint: str, *, max_history_bytes: int, max_total_bytes: int
) -> Manifest:
    """The manifest of `checkpoint`, checked field by field against what publish() writes and
    bounded: its events at most `max_history_bytes`, all its files at most `max_total_bytes`,
    no object named twice, no two files sharing blocks. ObjectMissing when the archive has no
    such checkpoint; InvalidManifest (naming the problem, never a path or host) otherwise."""
    if not is_hex_id(checkpoint):
        raise ObjectMissing(f"checkpoint {checkpoint!r} does not exist", retryable=False)
    raw = store.get(checkpoint_key(session_id, checkpoint))
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidManifest(f"checkpoint {checkpoint} is not a valid manifest: it is not JSON") from exc
    try:
        check_manifest(value, session_id, checkpoint, max_history_bytes, max_total_bytes)
    except ManifestProblem as exc:
        raise InvalidManifest(f"checkpoint {checkpoint} is not a valid manifest: {exc}") from None
    manifest: Manifest = value  # checked above, field by field
    return manifest


def read_file(store: ObjectStore, session_id: str, entry: FileEntry) -> Iterator[bytes]:
    """The file's bytes, in order, each object checked for its size; fetched a few at a time."""
    parts: list[tuple[str, int]] = [
        (block_key(session_id, entry["generation"], index), BLOCK_BYTES) for index in range(entry["blocks"])
    ]
    parts += [(key, size) for key, size in entry["tail"]]
    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="brain-download") as threads:
        pending: list[tuple[str, int, Future[bytes]]] = []
        try:
            for key, size in parts:
                pending.append((key, size, threads.submit(store.get, key)))
                if len(pending) >= TRANSFERS_IN_FLIGHT:
                    yield _checked(*pending.pop(0))
            while pending:
                yield _checked(*pending.pop(0))
        finally:
            for _, _, future in pending:
                future.cancel()


def _checked(key: str, size: int, future: Future[bytes]) -> bytes:
    data = future.result()
    if len(data) != size:
        raise ArchiveError(f"object {key} has {len(data)} bytes, the manifest says {size}")
    return data
