"""checkpoints.jsonl and the native/ directory: record completed turns, restore on resume.

A checkpoint names the event-log offset and every native file with its exact size. Append-only
files are restored by truncation; other files are kept as snapshot copies. No Django.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
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

    def record(self, checkpoint_id: str, *, offset: int, time: str, reported: Any) -> dict[str, Any]:
        """Check the harness's file list against the disk and append the checkpoint."""
        try:
            files = validate_native_files(reported)
        except FrameError as exc:
            raise CheckpointError(str(exc)) from exc
        native = self.native.resolve()
        for item in files:
            path = native / item["path"]
            if not path.resolve().is_relative_to(native):
                raise CheckpointError(f"checkpoint path {item['path']!r} leaves the native directory")
            try:
                stat = path.lstat()
            except FileNotFoundError as exc:
                raise CheckpointError(f"checkpoint file {item['path']!r} does not exist") from exc
            if not path.is_file() or path.is_symlink():
                raise CheckpointError(f"checkpoint file {item['path']!r} is not a regular file")
            if stat.st_size != item["size"]:
                raise CheckpointError(
                    f"checkpoint file {item['path']!r} has {stat.st_size} bytes, harness reported {item['size']}"
                )
            if not item["append_only"]:
                snapshot = self.directory / "snapshots" / checkpoint_id / item["path"]
                snapshot.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, snapshot)
        entry = {"id": checkpoint_id, "offset": offset, "time": time, "files": files}
        with self._journal.open("ab") as handle:
            handle.write(orjson.dumps(entry) + b"\n")
        return entry

    def last(self) -> dict[str, Any] | None:
        try:
            data = self._journal.read_bytes()
        except FileNotFoundError:
            return None
        lines = [line for line in data.split(b"\n") if line]
        for line in reversed(lines):
            try:
                return orjson.loads(line)  # type: ignore[no-any-return]  # journal lines are objects
            except orjson.JSONDecodeError:
                continue  # a torn last line from a crash mid-append
        return None

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Put native/ back to exactly the files and sizes of `checkpoint`."""
        files: dict[str, NativeFile] = {item["path"]: item for item in checkpoint.get("files", [])}
        self.native.mkdir(parents=True, exist_ok=True)
        for root, _, names in os.walk(self.native):
            for name in names:
                path = Path(root) / name
                relative = path.relative_to(self.native).as_posix()
                if relative not in files:
                    path.unlink()
        for relative, item in files.items():
            path = self.native / relative
            if item["append_only"]:
                try:
                    size = path.stat().st_size
                except FileNotFoundError as exc:
                    raise CheckpointError(f"native file {relative!r} is missing") from exc
                if size < item["size"]:
                    raise CheckpointError(f"native file {relative!r} is shorter than its checkpoint")
                if size > item["size"]:
                    os.truncate(path, item["size"])
            else:
                snapshot = self.directory / "snapshots" / checkpoint["id"] / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(snapshot, path)
