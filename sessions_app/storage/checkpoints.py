"""checkpoints.jsonl and the native/ directory: record completed turns, restore on resume.

A checkpoint names the event-log offset and every native file with its exact size. Native files
are append-only, so a restore truncates each one to its recorded size. No Django, no asyncio.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import orjson

from runners.protocol import FrameError, NativeFile, validate_native_files

__all__ = ["JOURNAL", "MAX_NATIVE_FILES", "NATIVE", "CheckpointEntry", "CheckpointError", "CheckpointStore"]

JOURNAL = "checkpoints.jsonl"
NATIVE = "native"

# Bounds the open/fstat work of recording a checkpoint (done on the event loop) and the size of
# one journal line; a harness needs a handful of files to restore a conversation.
MAX_NATIVE_FILES = 128
# The journal's tail is read backwards in chunks that double, so last() costs one small read
# for an ordinary entry and stays linear for a long one (128 files with long paths).
JOURNAL_TAIL_CHUNK = 8 * 1024
# O_NONBLOCK: opening a FIFO planted in native/ must fail the checks below, not hang the caller.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class CheckpointError(Exception):
    """Native state that does not match what the harness reported, or cannot be restored."""


class CheckpointEntry(TypedDict):
    """One line of checkpoints.jsonl."""

    id: str
    offset: int  # the event log's size when the checkpoint was taken
    time: str
    files: list[NativeFile]
    # in a fleet: the highest input journal seq whose outcome the log up to `offset` holds
    # (absent: 0, nothing covered)
    covered_seq: NotRequired[int]


def _check_files(value: object) -> list[NativeFile]:
    """A harness's (or journal's) file list: valid, append-only and within MAX_NATIVE_FILES."""
    try:
        files = validate_native_files(value)
    except FrameError as exc:
        raise CheckpointError(str(exc)) from exc
    if len(files) > MAX_NATIVE_FILES:
        raise CheckpointError(f"checkpoint lists {len(files)} files, more than {MAX_NATIVE_FILES}")
    for item in files:
        if not item["append_only"]:
            raise CheckpointError(f"checkpoint file {item['path']!r} is not append-only")
    return files


def _decode_entry(line: bytes, *, offset: int) -> CheckpointEntry:
    """One journal line as an entry; CheckpointError naming its byte offset otherwise."""
    problem = f"checkpoint journal entry at byte {offset} cannot be decoded"
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(problem) from exc
    if not isinstance(value, dict) or value.keys() - {"covered_seq"} != {"id", "offset", "time", "files"}:
        raise CheckpointError(problem)
    entry_id, entry_offset, time = value["id"], value["offset"], value["time"]
    covered = value.get("covered_seq", 0)
    if not isinstance(covered, int) or isinstance(covered, bool) or covered < 0:
        raise CheckpointError(problem)
    if (
        not isinstance(entry_id, str)
        or not isinstance(time, str)
        or not isinstance(entry_offset, int)
        or isinstance(entry_offset, bool)
        or entry_offset < 0
    ):
        raise CheckpointError(problem)
    try:
        # journals written before native files had to be append-only may list other files;
        # they decode, and restore() refuses them
        files = validate_native_files(value["files"])
    except FrameError as exc:
        raise CheckpointError(f"{problem}: {exc}") from exc
    entry: CheckpointEntry = {"id": entry_id, "offset": entry_offset, "time": time, "files": files}
    if covered:
        entry["covered_seq"] = covered
    return entry


@dataclass(slots=True)
class CheckpointStore:
    directory: Path  # sessions/<id>
    _native_root: Path | None = field(default=None, init=False, repr=False)  # native/, resolved once

    @property
    def native(self) -> Path:
        return self.directory / NATIVE

    @property
    def _journal(self) -> Path:
        return self.directory / JOURNAL

    def _inside_native(self, relative: str) -> Path:
        if self._native_root is None:
            self._native_root = self.native.resolve()
        native = self._native_root
        path = native / relative
        if "/" not in relative and relative not in ("", ".", ".."):
            return path  # a file of native/ itself: it is opened with O_NOFOLLOW, nothing to resolve
        # a symlinked directory inside native/ must not lead reads or writes outside it
        if not path.resolve().is_relative_to(native):
            raise CheckpointError(f"checkpoint path {relative!r} leaves the native directory")
        return path

    def _open_native(self, relative: str, *, flags: int) -> tuple[int, os.stat_result]:
        """A descriptor of a regular, singly linked native file, opened without following symlinks.

        Raises FileNotFoundError for a missing file and OSError for a disk failure; the caller
        closes the descriptor.
        """
        path = self._inside_native(relative)
        try:
            descriptor = os.open(path, flags | _OPEN_FLAGS)
        except OSError as exc:
            # ELOOP: O_NOFOLLOW met a symlink; EISDIR: a directory; ENXIO: a FIFO without a reader
            if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise CheckpointError(f"checkpoint file {relative!r} is not a regular file") from exc
            raise
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                raise CheckpointError(f"checkpoint file {relative!r} is not a regular file")
            # a hard link would let truncation reach a file outside native/
            if status.st_nlink > 1:
                raise CheckpointError(f"checkpoint file {relative!r} has {status.st_nlink} hard links")
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor, status

    def record(
        self, checkpoint_id: str, *, offset: int, time: str, reported: object, covered_seq: int = 0
    ) -> CheckpointEntry:
        """Check the harness's file list against the disk and append the checkpoint.

        Only the creation checkpoint (offset 0, first in the journal) may list no files.
        """
        files = _check_files(reported)
        for item in files:
            try:
                descriptor, status = self._open_native(item["path"], flags=os.O_RDONLY)
            except FileNotFoundError as exc:
                raise CheckpointError(f"checkpoint file {item['path']!r} does not exist") from exc
            os.close(descriptor)
            if status.st_size != item["size"]:
                raise CheckpointError(
                    f"checkpoint file {item['path']!r} has {status.st_size} bytes, harness reported {item['size']}"
                )
        entry: CheckpointEntry = {"id": checkpoint_id, "offset": offset, "time": time, "files": files}
        if covered_seq:
            entry["covered_seq"] = covered_seq
        with self._journal.open("ab+") as handle:
            end = handle.seek(0, os.SEEK_END)
            if not files and (offset != 0 or end > 0):
                raise CheckpointError("only the creation checkpoint may list no native files")
            # a crash mid-append leaves a torn line; start on a fresh one so this entry parses
            torn = False
            if end > 0:
                handle.seek(-1, os.SEEK_END)
                torn = handle.read(1) != b"\n"
            handle.write((b"\n" if torn else b"") + orjson.dumps(entry) + b"\n")
            handle.flush()
            os.fsync(handle.fileno())  # a completed turn survives a power cut
        return entry

    def last(self) -> CheckpointEntry | None:
        """The journal's last entry, reading only the journal's tail.

        None when there is no journal or it holds no whole line. A torn last line (a crash
        mid-append, so no newline) is skipped; a whole last line that does not decode is a
        CheckpointError naming its byte offset.
        """
        try:
            handle = self._journal.open("rb")
        except FileNotFoundError:
            return None
        with handle:
            position = handle.seek(0, os.SEEK_END)
            tail = b""  # the journal's bytes from `position` to its end
            chunk = JOURNAL_TAIL_CHUNK
            end = -1  # journal offset just past the last newline
            while position > 0:
                step = min(chunk, position)
                position -= step
                handle.seek(position)
                tail = handle.read(step) + tail
                chunk *= 2
                if end < 0:
                    newline = tail.rfind(b"\n")
                    if newline < 0:
                        continue
                    end = position + newline + 1
                # the last whole line starts after the newline before it, or at the journal's start
                start = tail.rfind(b"\n", 0, end - 1 - position) + 1
                if start > 0 or position == 0:
                    return _decode_entry(tail[start : end - 1 - position], offset=position + start)
            return None

    def _first(self) -> CheckpointEntry | None:
        try:
            handle = self._journal.open("rb")
        except FileNotFoundError:
            return None
        with handle:
            line = handle.readline(JOURNAL_TAIL_CHUNK)  # a creation entry lists no files: it is short
        if not line.endswith(b"\n"):
            return None
        return _decode_entry(line[:-1], offset=0)

    def restore(self, entry: CheckpointEntry) -> None:
        """Put native/ back to exactly the files and sizes of `entry`.

        1. Check the entry, the journal, and every listed file; on a problem, change nothing.
        2. Delete files the checkpoint does not list.
        3. Truncate each listed file to its recorded size.
        """
        files = {item["path"]: item for item in _check_files(entry.get("files"))}
        if not self._journal.exists():
            raise CheckpointError("checkpoint journal is missing: native state cannot be restored")
        if self.last() is None:
            raise CheckpointError("checkpoint journal holds no checkpoint: native state cannot be restored")
        if not files:
            # an empty list deletes everything: only the journal's creation entry may ask for that
            first = self._first()
            if first is None or first["id"] != entry.get("id") or first["offset"] != 0 or first["files"]:
                raise CheckpointError(
                    f"checkpoint {entry.get('id')!r} lists no files but is not the creation checkpoint"
                )
        descriptors: dict[str, int] = {}
        try:
            for relative, item in files.items():
                try:
                    descriptor, status = self._open_native(relative, flags=os.O_WRONLY)
                except FileNotFoundError as exc:
                    raise CheckpointError(f"native file {relative!r} is missing") from exc
                descriptors[relative] = descriptor
                if status.st_size < item["size"]:
                    raise CheckpointError(f"native file {relative!r} is shorter than its checkpoint")
            self.native.mkdir(parents=True, exist_ok=True)
            self._delete_unlisted(files.keys())
            for relative, descriptor in descriptors.items():
                # the descriptor checked above: a file swapped in since then is not truncated
                os.ftruncate(descriptor, files[relative]["size"])
        finally:
            for descriptor in descriptors.values():
                os.close(descriptor)

    def _delete_unlisted(self, keep: Collection[str]) -> None:
        for root, directories, names in os.walk(self.native):
            base = Path(root)
            for name in directories:
                if (base / name).is_symlink():  # os.walk does not descend into it: remove the link
                    (base / name).unlink()
            for name in names:
                path = base / name
                if path.relative_to(self.native).as_posix() not in keep:
                    path.unlink()
