"""A session's local files as the archive sees them: what to publish, what was uploaded, and
how a restored checkpoint is written back to disk. The directory's layout is
sessions_app.storage's; this module decides what of it is published:

    the event log         published up to its last whole line
    the checkpoint journal its last entry names the native files and their sizes
    uploaded.json         what the archive has (replaced atomically)

Blocking file I/O, no Django.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict

import orjson

from foundation.logs import logger
from persistence_app.archive import ArchiveError, LocalFile, Manifest, UploadedFile, read_file
from persistence_app.stores.base import ObjectStore
from sessions_app.eventlog import Event, EventLog, new_id
from sessions_app.records import SessionRecord, SessionStatus
from sessions_app.storage import (
    EVENT_LOG,
    NATIVE,
    CheckpointEntry,
    CheckpointError,
    SessionFiles,
    SessionStorage,
    history_size,
)
from tools_app.vault import recovery_digest

__all__ = [
    "LocalSnapshot",
    "Uploaded",
    "history_size",
    "prune_replaced",
    "materialize",
    "materialize_created",
    "read_uploaded",
    "remove_tree",
    "snapshot",
    "tree_bytes",
    "write_uploaded",
]

MAX_TREE_ENTRIES = 4096  # a replaced directory's walk: a session holds a few hundred files at most


class Uploaded(TypedDict):
    checkpoint: str
    history_bytes: int
    resume_offset: int
    native_checkpoint: str
    time: str
    files: dict[str, UploadedFile]
    credentials_sha256: NotRequired[str]  # tools_app.vault.recovery_digest of the manifest's records


@dataclass(frozen=True, slots=True)
class LocalSnapshot:
    history_bytes: int
    native_checkpoint: CheckpointEntry
    files: list[LocalFile]


def snapshot(directory: Path) -> LocalSnapshot:
    """The files a publish of this session uploads now. Raises ArchiveError when the session
    has no checkpoint journal, OSError on a disk failure."""
    files = SessionFiles(directory)
    entry = files.checkpoints.last()
    if entry is None:
        raise ArchiveError(f"session {files.name} has no checkpoint to publish")
    history = files.history_bytes()
    if history < entry["offset"]:
        raise ArchiveError(f"session {files.name}: the event log is shorter than its last checkpoint")
    local = [LocalFile(EVENT_LOG, str(files.event_log), history)]
    for item in entry["files"]:
        local.append(LocalFile(f"{NATIVE}/{item['path']}", str(files.native / item["path"]), item["size"]))
    return LocalSnapshot(history_bytes=history, native_checkpoint=entry, files=local)


def read_uploaded(directory: Path) -> Uploaded | None:
    """uploaded.json, or None when missing or unreadable (the next publish starts new generations)."""
    value = SessionFiles(directory).read_uploaded()
    if value is None or not isinstance(value.get("files"), dict):
        return None
    uploaded: Uploaded = value  # type: ignore[assignment]  # written by write_uploaded only
    return uploaded


def write_uploaded(directory: Path, value: Uploaded) -> None:
    """Replace uploaded.json atomically and durably."""
    SessionFiles(directory).write_uploaded(value)


def _write_file(path: Path, chunks: Iterator[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())


def materialize(store: ObjectStore, manifest: Manifest, target: Path) -> None:
    """Write a checkpoint into the empty directory `target`: the events up to history_bytes, the
    native files, a one-line checkpoints.jsonl and uploaded.json. The files get new generations
    on their next publish: their archived generations may have grown elsewhere since."""
    session_id = manifest["session"]["id"]
    native: dict[str, object] = dict(manifest["native_checkpoint"])
    listed = native.get("files")
    expected: dict[str, object] = {EVENT_LOG: manifest["history_bytes"]}
    if isinstance(listed, list):
        expected |= {f"{NATIVE}/{item.get('path')}": item.get("size") for item in listed if isinstance(item, dict)}
    actual: dict[str, object] = {name: entry["size"] for name, entry in manifest["files"].items()}
    if actual != expected:
        raise ArchiveError(f"checkpoint {manifest['checkpoint']}: its files do not match its native checkpoint")
    target.mkdir(mode=0o700)
    try:
        files = SessionFiles(target)
        files.native.mkdir(mode=0o700)
        for name, file_entry in manifest["files"].items():
            _write_file(target / name, read_file(store, session_id, file_entry))
        # the restored journal must be one the runtime can load and restore from
        try:
            entry = files.write_journal(orjson.dumps(native))
        except CheckpointError as exc:
            raise ArchiveError(f"checkpoint {manifest['checkpoint']}: {exc}") from exc
        if entry is None:
            raise ArchiveError(f"checkpoint {manifest['checkpoint']} holds no native checkpoint entry")
        write_uploaded(
            target,
            {
                "checkpoint": manifest["checkpoint"],
                "history_bytes": manifest["history_bytes"],
                "resume_offset": manifest["resume_offset"],
                "native_checkpoint": str(native.get("id", "")),
                "time": manifest["time"],
                "files": {},
                "credentials_sha256": recovery_digest(manifest.get("credentials") or []),
            },
        )
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_tree(target)
        raise


def materialize_created(record: SessionRecord, target: Path, *, max_bytes: int) -> None:
    """Write, into the new directory `target`, the session `record` (its row) describes as it
    was created: native/, its creation checkpoint (offset 0, no native files) and an event log
    that is empty, or holds only the close the row records (a closed session stays closed). For
    a fleet's session whose owner died before its first upload; the input journal then brings
    back the inputs acknowledged since. The checkpoint keeps the row's id while the row names
    the creation checkpoint; a later one's turns are gone, so the creation gets a new id."""
    checkpoint_id, time = record.checkpoint["id"], record.checkpoint["time"]
    if record.checkpoint["offset"] != 0:
        checkpoint_id, time = new_id(), record.created_at
    try:
        files = SessionFiles(target)
        files.create()
        files.checkpoints.record(checkpoint_id, offset=0, time=time, reported=[])
        if record.status == SessionStatus.CLOSED:
            log = EventLog(files.event_log, max_bytes=max_bytes)
            try:
                log.append(Event.build("session.status", {"status": SessionStatus.CLOSED.value}))
                log.sync()
            finally:
                log.close()
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_tree(target)
        raise


def tree_bytes(path: Path) -> int:
    """The bytes of the regular files under `path`, walking at most MAX_TREE_ENTRIES entries."""
    total = entries = 0
    pending = [path]
    while pending and entries < MAX_TREE_ENTRIES:
        try:
            scanned = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for item in scanned:
            entries += 1
            if item.is_dir(follow_symlinks=False):
                pending.append(Path(item.path))
            elif item.is_file(follow_symlinks=False):
                total += item.stat(follow_symlinks=False).st_size
    return total


def remove_tree(path: Path) -> None:
    """Remove a directory tree beside the sessions, whatever is left of it."""
    shutil.rmtree(path, ignore_errors=True)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path)


def prune_replaced(storage: SessionStorage, prefix: str, *, keep: int, budget: int) -> None:
    """Keep the newest `keep` directories a restore set aside for a session (named `prefix` +
    an id), and fewer when together they hold more than `budget` bytes (the newest always
    stays): they count in the session's size on this server."""
    kept: list[tuple[float, Path]] = []
    for entry in storage.entries():
        if entry.name.startswith(prefix) and entry.is_dir(follow_symlinks=False):
            kept.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
    kept.sort(reverse=True)
    total = 0
    for index, (_, path) in enumerate(kept):
        total += tree_bytes(path)
        if index == 0 or (index < keep and total <= budget):
            continue
        remove_tree(path)
        logger.info("replaced session directory removed", extra={"removed": path.name})
