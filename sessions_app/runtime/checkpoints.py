"""checkpoints.jsonl and the native/ directory: record completed turns, restore on resume.

A checkpoint names the event-log offset and every native file with its exact size. Append-only
files are restored by truncation; other files are kept as snapshot copies. No Django.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

import orjson

from runners.protocol import FrameError, NativeFile, validate_native_files

__all__ = ["CheckpointError", "CheckpointStore"]


class CheckpointError(Exception):
    """Native state that does not match what the harness reported, or cannot be restored."""


@dataclass(slots=True)
class CheckpointStore:
    directory: Path  # sessions/<id>

    @property
    def native(self) -> Path:
        return self.directory / "native"

    @property
    def _journal(self) -> Path:
        return self.directory / "checkpoints.jsonl"

    def _snapshot(self, checkpoint_id: str, relative: str) -> Path:
        return self.directory / "snapshots" / checkpoint_id / relative

    def _inside_native(self, relative: str) -> Path:
        native = self.native.resolve()
        path = native / relative
        # a symlinked directory inside native/ must not lead reads or writes outside it
        if not path.resolve().is_relative_to(native):
            raise CheckpointError(f"checkpoint path {relative!r} leaves the native directory")
        return path

    def record(self, checkpoint_id: str, *, offset: int, time: str, reported: Any) -> dict[str, Any]:
        """Check the harness's file list against the disk and append the checkpoint.

        Every file is checked before anything is copied, so a rejected list leaves no snapshot.
        """
        try:
            files = validate_native_files(reported)
        except FrameError as exc:
            raise CheckpointError(str(exc)) from exc
        for item in files:
            path = self._inside_native(item["path"])
            try:
                stat = path.lstat()
            except FileNotFoundError as exc:
                raise CheckpointError(f"checkpoint file {item['path']!r} does not exist") from exc
            if not S_ISREG(stat.st_mode):  # lstat: a symlink is not a regular file
                raise CheckpointError(f"checkpoint file {item['path']!r} is not a regular file")
            if stat.st_size != item["size"]:
                raise CheckpointError(
                    f"checkpoint file {item['path']!r} has {stat.st_size} bytes, harness reported {item['size']}"
                )
        for item in files:
            if not item["append_only"]:
                snapshot = self._snapshot(checkpoint_id, item["path"])
                snapshot.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.native / item["path"], snapshot)
        entry = {"id": checkpoint_id, "offset": offset, "time": time, "files": files}
        with self._journal.open("ab+") as handle:
            # a crash mid-append leaves a torn line; start on a fresh one so this entry parses
            torn = False
            if handle.seek(0, os.SEEK_END) > 0:
                handle.seek(-1, os.SEEK_END)
                torn = handle.read(1) != b"\n"
            handle.write((b"\n" if torn else b"") + orjson.dumps(entry) + b"\n")
        return entry

    def last(self) -> dict[str, Any] | None:
        try:
            data = self._journal.read_bytes()
        except FileNotFoundError:
            return None
        lines = [line for line in data.split(b"\n") if line]
        for line in reversed(lines):
            try:
                return orjson.loads(line)  # journal lines are objects
            except orjson.JSONDecodeError:
                continue  # a torn last line from a crash mid-append
        return None

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Put native/ back to exactly the files and sizes of `checkpoint`.

        1. Check every listed path, append-only length and snapshot; on a problem, change nothing.
        2. Delete files the checkpoint does not list.
        3. Truncate append-only files; copy snapshots over the others.
        """
        try:
            files: dict[str, NativeFile] = {
                item["path"]: item for item in validate_native_files(checkpoint.get("files", []))
            }
        except FrameError as exc:
            raise CheckpointError(str(exc)) from exc
        self.native.mkdir(parents=True, exist_ok=True)
        for relative, item in files.items():
            path = self._inside_native(relative)
            if item["append_only"]:
                try:
                    size = path.stat().st_size
                except FileNotFoundError as exc:
                    raise CheckpointError(f"native file {relative!r} is missing") from exc
                if size < item["size"]:
                    raise CheckpointError(f"native file {relative!r} is shorter than its checkpoint")
            elif not self._snapshot(checkpoint["id"], relative).is_file():
                raise CheckpointError(f"snapshot of {relative!r} for checkpoint {checkpoint['id']!r} is missing")
        for root, _, names in os.walk(self.native):
            for name in names:
                path = Path(root) / name
                if path.relative_to(self.native).as_posix() not in files:
                    path.unlink()
        for relative, item in files.items():
            path = self.native / relative
            if item["append_only"]:
                if path.stat().st_size > item["size"]:
                    os.truncate(path, item["size"])
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._snapshot(checkpoint["id"], relative), path)
