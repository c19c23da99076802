"""The session directory on disk, owned here and nowhere else:

    <data_dir>/sessions/<id>/events.jsonl        the event log (sessions_app.eventlog)
    <data_dir>/sessions/<id>/checkpoints.jsonl   completed turns (storage.checkpoints)
    <data_dir>/sessions/<id>/native/             the harness's files
    <data_dir>/sessions/<id>/running             present while a turn may run
    <data_dir>/sessions/<id>/uploaded.json       what the archive holds (persistence_app)
    <data_dir>/sessions/<id>/lease_epoch         in a fleet: the lease epoch this copy was written under
    <data_dir>/sessions/<id>/workspace/          the workspace a brain environment may grant its
                                                 components (created on first use; not archived)

The runtime and persistence both reach a session's files through SessionStorage (the
sessions root) and SessionFiles (one directory). Blocking file I/O, no Django, no asyncio.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import orjson

from sessions_app.eventlog import EventLog

from .checkpoints import JOURNAL, NATIVE, CheckpointEntry, CheckpointStore
from .recovery import Recovered, recover

__all__ = [
    "EVENT_LOG",
    "NATIVE",
    "RUNNING_MARKER",
    "SESSION_DIRECTORY_CHARS",
    "SessionFiles",
    "SessionStorage",
    "history_size",
]

EVENT_LOG = "events.jsonl"
WORKSPACE = "workspace"  # a brain environment's per-session workspace directory
RUNNING_MARKER = "running"  # in the session directory while a turn may run; restarts settle these
UPLOADED = "uploaded.json"
LEASE_EPOCH = "lease_epoch"  # decimal; a copy whose epoch is not the lease's is stale
SESSION_DIRECTORY_CHARS = 32  # a session's directory is its id; anything else is a restore's or a stray
DELETED_INFIX = ".deleted-"  # a deleted session's directory while it is removed: `.<id>.deleted-<hex>`
TAIL_SCAN_BYTES = 64 << 10


def history_size(path: Path) -> int:
    """An event log's size cut after its last newline: a line being appended is not published."""
    with path.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        position = end
        while position > 0:
            step = min(TAIL_SCAN_BYTES, position)
            position -= step
            handle.seek(position)
            newline = handle.read(step).rfind(b"\n")
            if newline >= 0:
                return position + newline + 1
    return 0


@dataclass(frozen=True, slots=True)
class SessionFiles:
    """One session directory (or a restore's staging copy of one)."""

    directory: Path

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def event_log(self) -> Path:
        return self.directory / EVENT_LOG

    @property
    def native(self) -> Path:
        return self.directory / NATIVE

    @property
    def running_marker(self) -> Path:
        return self.directory / RUNNING_MARKER

    @property
    def workspace(self) -> Path:
        return self.directory / WORKSPACE

    @property
    def checkpoints(self) -> CheckpointStore:
        return CheckpointStore(self.directory)

    def mark_running(self, running: bool) -> None:
        """Create or remove the running marker (two syscalls)."""
        if running:
            os.close(os.open(self.running_marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        else:
            self.running_marker.unlink(missing_ok=True)

    def exists(self) -> bool:
        return self.directory.exists()

    def create(self) -> None:
        """A new session's empty directory: native/ and an empty event log. FileExistsError
        when the directory exists."""
        self.native.mkdir(parents=True, exist_ok=False)
        self.event_log.touch()

    def open_log(self, *, max_bytes: int) -> EventLog:
        return EventLog(self.event_log, max_bytes=max_bytes)

    def recover(self, log: EventLog) -> Recovered:
        """The session's state rebuilt from its log (torn tail trimmed) and checkpoint journal."""
        return recover(self.directory, log)

    def history_bytes(self) -> int:
        """The event log's size up to its last whole line."""
        return history_size(self.event_log)

    def last_checkpoint_id(self) -> str | None:
        """The journal's last entry's id; None without a journal. CheckpointError, OSError."""
        entry = self.checkpoints.last()
        return entry["id"] if entry is not None else None

    def read_uploaded(self) -> dict[str, object] | None:
        """uploaded.json's object, or None when missing or not a JSON object."""
        try:
            value = orjson.loads((self.directory / UPLOADED).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return value if isinstance(value, dict) else None

    def write_uploaded(self, value: object) -> None:
        """Replace uploaded.json atomically and durably."""
        temporary = self.directory / f".{UPLOADED}.{secrets.token_hex(4)}"
        with temporary.open("wb") as handle:
            handle.write(orjson.dumps(value))
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(self.directory / UPLOADED)

    def read_lease_epoch(self) -> int | None:
        """The lease epoch this copy was last written under; None without one (or unreadable)."""
        try:
            text = (self.directory / LEASE_EPOCH).read_text()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def write_lease_epoch(self, epoch: int) -> None:
        """Record, atomically and durably, that this copy is written under `epoch` from now on."""
        temporary = self.directory / f".{LEASE_EPOCH}.{secrets.token_hex(4)}"
        with temporary.open("w") as handle:
            handle.write(str(epoch))
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(self.directory / LEASE_EPOCH)

    def write_journal(self, entry: bytes) -> CheckpointEntry | None:
        """A restored session's one-line checkpoint journal, read back as the runtime will read
        it (CheckpointError when it does not decode)."""
        _write_new(self.directory / JOURNAL, entry + b"\n")
        return self.checkpoints.last()


class SessionStorage:
    """<data_dir>/sessions: where every session directory lives."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "sessions"

    def files(self, session_id: str) -> SessionFiles:
        return SessionFiles(self.root / session_id)

    def directory(self, session_id: str) -> Path:
        return self.root / session_id

    def beside(self, name: str) -> SessionFiles:
        """A directory next to the sessions (a restore's staging copy, a replaced session)."""
        return SessionFiles(self.root / name)

    def ensure(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for entry in self.entries():  # what a delete had set aside when the server stopped
            if entry.name.startswith(".") and DELETED_INFIX in entry.name:
                shutil.rmtree(entry.path, ignore_errors=True)

    def remove(self, session_id: str) -> None:
        """A deleted session's directory, and the copies a restore kept aside
        (`<id>-replaced-<ID>`): each renamed out of the sessions first (one atomic step, so no
        scan sees half a session), then removed."""
        doomed = []
        for entry in self.entries():
            if entry.name == session_id or entry.name.startswith(f"{session_id}-replaced-"):
                aside = self.root / f".{entry.name}{DELETED_INFIX}{secrets.token_hex(8)}"
                Path(entry.path).rename(aside)
                doomed.append(aside)
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    def marked_running(self) -> list[str]:
        """Sessions whose directory holds the running marker: a turn the last process left."""
        return [marker.parent.name for marker in self.root.glob(f"*/{RUNNING_MARKER}")]

    def session_ids(self) -> list[str]:
        """The ids of the session directories here (not replaced copies or staging ones)."""
        try:
            entries = list(self.root.iterdir())
        except FileNotFoundError:
            return []
        return [entry.name for entry in entries if len(entry.name) == SESSION_DIRECTORY_CHARS and entry.is_dir()]

    def entries(self) -> list[os.DirEntry[str]]:
        """Every entry beside the sessions ([] before the first session)."""
        try:
            with os.scandir(self.root) as scanned:
                return list(scanned)
        except FileNotFoundError:
            return []


def _write_new(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
