"""The checkpoint archive's object layout: publish a session's files as immutable blocks, read
a checkpoint back.

    sessions/<id>/blocks/<generation>/<index>        64 KiB, immutable, shared by checkpoints
    sessions/<id>/tails/<checkpoint>/<generation>    the bytes after the last whole block
    sessions/<id>/checkpoints/<checkpoint>           the manifest, written after all of the above
    sessions/<id>/latest                             {"checkpoint": id}, replaced on each publish

Each file has its own generation: a random id under which its blocks are numbered. A file keeps
its generation while its local bytes only grow past what was uploaded; anything else (a restore,
a file shorter than uploaded, a changed last block) starts a new one, so an immutable key is
never asked to hold two different blocks. Blocking I/O, run in worker threads or Celery
workers; no Django.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from persistence_app.stores.base import MAX_OBJECT_BYTES, ObjectMissing, ObjectStore, StoreError

__all__ = [
    "BLOCK_BYTES",
    "MANIFEST_VERSION",
    "ArchiveError",
    "FileEntry",
    "LocalFile",
    "Manifest",
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

BLOCK_BYTES = 64 << 10
MANIFEST_VERSION = 1
MAX_FILES = 129  # events.jsonl and up to 128 native files


class ArchiveError(StoreError):
    """A manifest or object that does not hold what the archive wrote (not retryable)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class FileEntry(TypedDict):
    """One file of a manifest: `blocks` whole blocks of its generation, then the tail."""

    generation: str
    size: int
    blocks: int
    tail: str  # the tail's key, "" when the size is a multiple of BLOCK_BYTES


class UploadedFile(TypedDict):
    """What uploaded.json remembers of a file: enough to reuse its blocks safely."""

    generation: str
    blocks: int
    last_block_sha256: str  # of block `blocks - 1`, "" when no block is uploaded


class Manifest(TypedDict):
    version: int
    checkpoint: str
    session: dict[str, Any]  # id, tenant, harness, config, descriptors, created_at
    native_checkpoint: dict[str, Any]  # the checkpoints.jsonl entry: id, offset, time, files
    resume_offset: int
    history_bytes: int
    time: str
    files: dict[str, FileEntry]  # "events.jsonl" and "native/<path>"
    credentials: list[Any]  # encrypted recovery records; none yet


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


def _reusable(descriptor: int, uploaded: UploadedFile | None, size: int, name: str) -> UploadedFile | None:
    """The uploaded generation when the local file still starts with what it uploaded."""
    if uploaded is None or uploaded["blocks"] * BLOCK_BYTES > size:
        return None
    if uploaded["blocks"] == 0:
        return uploaded
    last = _read_exactly(descriptor, (uploaded["blocks"] - 1) * BLOCK_BYTES, BLOCK_BYTES, name)
    return uploaded if hashlib.sha256(last).hexdigest() == uploaded["last_block_sha256"] else None


def _publish_file(
    store: ObjectStore, session_id: str, checkpoint: str, local: LocalFile, uploaded: UploadedFile | None
) -> tuple[FileEntry, UploadedFile, int]:
    """Upload the file's new whole blocks and its tail. Returns the entry, the new uploaded
    state and the bytes sent."""
    descriptor = os.open(local.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        reuse = _reusable(descriptor, uploaded, local.size, local.name)
        generation = reuse["generation"] if reuse else secrets.token_hex(16)
        done = reuse["blocks"] if reuse else 0
        last_sha = reuse["last_block_sha256"] if reuse else ""
        whole = local.size // BLOCK_BYTES
        sent = 0
        for index in range(done, whole):
            block = _read_exactly(descriptor, index * BLOCK_BYTES, BLOCK_BYTES, local.name)
            store.put(block_key(session_id, generation, index), block, immutable=True)
            last_sha = hashlib.sha256(block).hexdigest()
            sent += len(block)
        tail = ""
        remainder = local.size - whole * BLOCK_BYTES
        if remainder:
            tail = tail_key(session_id, checkpoint, generation)
            store.put(tail, _read_exactly(descriptor, whole * BLOCK_BYTES, remainder, local.name), immutable=True)
            sent += remainder
    finally:
        os.close(descriptor)
    entry: FileEntry = {"generation": generation, "size": local.size, "blocks": whole, "tail": tail}
    state: UploadedFile = {"generation": generation, "blocks": whole, "last_block_sha256": last_sha}
    return entry, state, sent


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
) -> Published:
    """Upload every file's new blocks and tail, then the manifest. `latest` is the caller's,
    after its own fencing check. A failure leaves unreachable blocks, never a manifest."""
    if len(files) > MAX_FILES:
        raise ArchiveError(f"a checkpoint holds at most {MAX_FILES - 1} native files")
    session_id = session["id"]
    entries: dict[str, FileEntry] = {}
    states: dict[str, UploadedFile] = {}
    sent = 0
    for local in files:
        entry, state, file_sent = _publish_file(store, session_id, checkpoint, local, uploaded.get(local.name))
        entries[local.name], states[local.name] = entry, state
        sent += file_sent
    manifest: Manifest = {
        "version": MANIFEST_VERSION,
        "checkpoint": checkpoint,
        "session": session,
        "native_checkpoint": native_checkpoint,
        "resume_offset": int(native_checkpoint["offset"]),
        "history_bytes": history_bytes,
        "time": time,
        "files": entries,
        "credentials": [],
    }
    body = orjson.dumps(manifest)
    if len(body) > MAX_OBJECT_BYTES:
        raise ArchiveError("checkpoint manifest exceeds the object size limit")
    store.put(checkpoint_key(session_id, checkpoint), body, immutable=True)
    return Published(manifest=manifest, uploaded=states, bytes_sent=sent + len(body))


def read_latest(store: ObjectStore, session_id: str) -> str:
    """The checkpoint id `latest` names; ObjectMissing when the session was never published."""
    try:
        value = orjson.loads(store.get(latest_key(session_id)))
        checkpoint = value["checkpoint"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ArchiveError(f"sessions/{session_id}/latest does not name a checkpoint") from exc
    if not _is_hex_id(checkpoint):
        raise ArchiveError(f"sessions/{session_id}/latest does not name a checkpoint")
    return str(checkpoint)


def _is_hex_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)


def read_manifest(store: ObjectStore, session_id: str, checkpoint: str) -> Manifest:
    """The manifest of `checkpoint`, checked against what publish() writes. ObjectMissing when
    the archive has no such checkpoint; ArchiveError when it does not decode."""
    if not _is_hex_id(checkpoint):
        raise ObjectMissing(f"checkpoint {checkpoint!r} does not exist", retryable=False)
    raw = store.get(checkpoint_key(session_id, checkpoint))
    problem = f"checkpoint {checkpoint} of session {session_id} is not a valid manifest"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ArchiveError(problem) from exc
    if not isinstance(value, dict) or value.get("version") != MANIFEST_VERSION:
        raise ArchiveError(problem)
    session, files = value.get("session"), value.get("files")
    if (
        value.get("checkpoint") != checkpoint
        or not isinstance(session, dict)
        or session.get("id") != session_id
        or not isinstance(session.get("tenant"), str)
        or not isinstance(files, dict)
        or "events.jsonl" not in files
        or len(files) > MAX_FILES
        or not isinstance(value.get("native_checkpoint"), dict)
    ):
        raise ArchiveError(problem)
    history = files["events.jsonl"]
    for name, entry in files.items():
        if not _valid_entry(session_id, checkpoint, name, entry):
            raise ArchiveError(f"{problem}: file {name!r}")
    if not (
        isinstance(value.get("history_bytes"), int)
        and value["history_bytes"] == history["size"]
        and isinstance(value.get("resume_offset"), int)
        and 0 <= value["resume_offset"] <= value["history_bytes"]
    ):
        raise ArchiveError(problem)
    manifest: Manifest = value  # type: ignore[assignment]  # checked above, field by field
    return manifest


def _valid_entry(session_id: str, checkpoint: str, name: str, entry: object) -> bool:
    if name != "events.jsonl":
        relative = name.removeprefix("native/")
        parts = relative.split("/")
        if relative == name or any(part in ("", ".", "..") for part in parts) or "\\" in relative:
            return False
    if not isinstance(entry, dict) or entry.keys() != {"generation", "size", "blocks", "tail"}:
        return False
    size, blocks, generation, tail = entry["size"], entry["blocks"], entry["generation"], entry["tail"]
    if not (isinstance(size, int) and isinstance(blocks, int) and size >= 0 and _is_hex_id(generation)):
        return False
    if blocks != size // BLOCK_BYTES:
        return False
    expected_tail = tail_key(session_id, checkpoint, generation) if size % BLOCK_BYTES else ""
    return bool(tail == expected_tail)


def read_file(store: ObjectStore, session_id: str, entry: FileEntry) -> Iterator[bytes]:
    """The file's bytes, block by block, each checked for its size."""
    for index in range(entry["blocks"]):
        block = store.get(block_key(session_id, entry["generation"], index))
        if len(block) != BLOCK_BYTES:
            raise ArchiveError(f"block {index} of generation {entry['generation']} has {len(block)} bytes")
        yield block
    remainder = entry["size"] - entry["blocks"] * BLOCK_BYTES
    if remainder:
        tail = store.get(entry["tail"])
        if len(tail) != remainder:
            raise ArchiveError(f"tail {entry['tail']} has {len(tail)} bytes, expected {remainder}")
        yield tail
