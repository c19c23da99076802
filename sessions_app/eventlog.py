"""events.jsonl: append-only retained events, opaque cursors, pages. No Django, no runtime.

A line is the event envelope without its cursor; the cursor is derived from the byte offset
where the line starts (base64url of {"o":offset,"i":id}, as in the spec's examples).
"""

from __future__ import annotations

import base64
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from foundation.errors import CursorUnavailable
from foundation.rfc3339 import now_rfc3339

__all__ = [
    "LIVE_ONLY",
    "LogWriteFailed",
    "MAX_CURSOR_BYTES",
    "MAX_RECORD_BYTES",
    "RECOVERY_TYPES",
    "CorruptLog",
    "Event",
    "EventLog",
    "RecordTooLarge",
    "ScannedEvent",
    "decode_cursor",
    "encode_cursor",
    "new_id",
    "now_rfc3339",
    "public_message",
]

MAX_RECORD_BYTES = 4 << 20  # spec: each retained record is capped at 4 MiB
MAX_CURSOR_BYTES = 512  # spec: longer cursors are rejected
LIVE_ONLY = frozenset({"assistant.delta", "tool.progress"})  # never written to the log
READ_CHUNK = 256 * 1024  # bytes read per syscall while paging through the log
SCAN_CHUNK = 1 << 20  # bytes per read of the recovery scan: few syscalls, and a chunk stays in cache
# The only events rebuilding a session's state needs; the scan decodes no other line.
RECOVERY_TYPES = frozenset({"user.message", "session.configure", "session.status", "session.error"})
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
# Event.build writes `{"id":"<32 hex>","type":"<type>",...`, so the type of a line it wrote
# starts at a fixed byte: the recovery scan reads it by slicing instead of decoding the line.
_ID_PREFIX = b'{"id":"'
_TYPE_PREFIX = b'","type":"'
_TYPE_PREFIX_AT = len(_ID_PREFIX) + 32
_TYPE_AT = _TYPE_PREFIX_AT + len(_TYPE_PREFIX)
_RECOVERY_TYPE_PREFIXES = tuple(kind.encode() + b'"' for kind in sorted(RECOVERY_TYPES))


class RecordTooLarge(ValueError):
    """A retained event over the 4 MiB record cap, or past the log's session_bytes limit."""


def _is_skipped(buffer: bytes, start: int, end: int) -> bool:
    """Whether buffer[start:end] is a line in Event.build's layout of a type recovery ignores."""
    return (
        buffer.startswith(_ID_PREFIX, start, end)
        and buffer.startswith(_TYPE_PREFIX, start + _TYPE_PREFIX_AT, end)
        and not buffer.startswith(_RECOVERY_TYPE_PREFIXES, start + _TYPE_AT, end)
    )


class LogWriteFailed(OSError):
    """An append that did not reach the disk whole; the log was cut back to its last good size.
    The message names no server path: it reaches clients in session.error events."""


def public_message(exc: BaseException) -> str:
    """What a session.error may say of an exception: an OSError's reason without its file names
    (clients never learn server paths)."""
    if isinstance(exc, OSError) and not isinstance(exc, LogWriteFailed):
        return f"{type(exc).__name__}: {exc.strerror}" if exc.strerror else type(exc).__name__
    return str(exc) or type(exc).__name__


class CorruptLog(ValueError):
    """A whole line of events.jsonl that is not an event envelope; `offset` is where it starts."""

    def __init__(self, path: Path, offset: int, problem: str) -> None:
        super().__init__(f"{path}: line at byte {offset} {problem}")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class ScannedEvent:
    """What the recovery scan keeps of one user.message, session.status or session.error."""

    offset: int  # byte offset of the line in events.jsonl
    id: str
    type: str
    input_id: str  # "" when the event has none
    data: dict[str, object]  # {} when the event's data is not an object


# Status and error records stay writable past session_bytes, so a turn that fills the log can
# still end with its session.error and session.status: they are small and bounded per turn.
ALWAYS_WRITABLE = frozenset({"session.status", "session.error"})


def new_id() -> str:
    return secrets.token_hex(16)


def encode_cursor(offset: int, event_id: str) -> str:
    raw = b'{"o":%d,"i":"%s"}' % (offset, event_id.encode())
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[int, str]:
    """Parse a cursor; anything malformed is 409 cursor_unavailable, never 400."""
    if len(cursor.encode()) > MAX_CURSOR_BYTES:
        raise CursorUnavailable("cursor exceeds 512 bytes")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = orjson.loads(raw)
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise CursorUnavailable("cursor is not a cursor issued by this session") from exc
    if (
        not isinstance(value, dict)
        or value.keys() != {"o", "i"}
        or not isinstance(value["o"], int)
        or isinstance(value["o"], bool)
        or value["o"] < 0
        or not isinstance(value["i"], str)
        or not _HEX32.fullmatch(value["i"])
    ):
        raise CursorUnavailable("cursor is not a cursor issued by this session")
    # b64decode skips characters outside its alphabet and accepts padding, so only the exact
    # string encode_cursor issues may name a position (a fabricated variant is 409 too).
    if encode_cursor(value["o"], value["i"]) != cursor:
        raise CursorUnavailable("cursor is not a cursor issued by this session")
    return value["o"], value["i"]


@dataclass(slots=True)
class Event:
    """One event serialised once; `line` is reused for the log, pages and every SSE frame."""

    id: str
    type: str
    line: bytes  # the envelope JSON without cursor
    offset: int = -1  # byte offset in events.jsonl; -1 for live-only events

    @classmethod
    def build(cls, type_: str, data: Any, *, input_id: str | None = None, event_id: str = "") -> Event:
        event_id = event_id or new_id()
        envelope: dict[str, Any] = {"id": event_id, "type": type_, "time": now_rfc3339()}
        if input_id:
            envelope["input_id"] = input_id
        envelope["data"] = data
        return cls(event_id, type_, orjson.dumps(envelope))

    @property
    def retained(self) -> bool:
        return self.offset >= 0

    @property
    def cursor(self) -> str:
        return encode_cursor(self.offset, self.id) if self.offset >= 0 else ""

    def wire(self) -> bytes:
        """The envelope as clients see it: with `cursor` on retained events."""
        if self.offset < 0:
            return self.line
        return self.line[:-1] + b',"cursor":"' + self.cursor.encode() + b'"}'

    def sse_frame(self) -> bytes:
        head = b"id: " + self.cursor.encode() + b"\n" if self.offset >= 0 else b""
        return head + b"event: " + self.type.encode() + b"\ndata: " + self.wire() + b"\n\n"

    def as_dict(self) -> dict[str, Any]:
        envelope: dict[str, Any] = orjson.loads(self.wire())  # always an object
        return envelope


class EventLog:
    """One session's events.jsonl. Appends are single write(2) calls, so a kill -9 keeps them."""

    def __init__(self, path: Path, *, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._fd: int | None = None
        try:
            self.size = path.stat().st_size
        except FileNotFoundError:
            self.size = 0

    def _descriptor(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, event: Event) -> Event:
        """Write one retained event and stamp its offset. Raises OSError or RecordTooLarge."""
        record = event.line + b"\n"
        if len(record) > MAX_RECORD_BYTES:
            raise RecordTooLarge(f"{event.type} record of {len(record)} bytes exceeds 4 MiB")
        if self.size + len(record) > self.max_bytes and event.type not in ALWAYS_WRITABLE:
            raise RecordTooLarge(f"event log reached its session_bytes limit of {self.max_bytes} bytes")
        descriptor = self._descriptor()
        try:
            written = os.write(descriptor, record)
        except OSError as exc:
            self._truncate_to_size(descriptor)
            raise LogWriteFailed(f"event log write failed: {exc.strerror or type(exc).__name__}") from exc
        if written != len(record):  # disk full or a file size limit part way through the line
            self._truncate_to_size(descriptor)
            raise LogWriteFailed(f"event log write failed: wrote {written} of {len(record)} bytes")
        event.offset = self.size
        self.size += written
        return event

    def _truncate_to_size(self, descriptor: int) -> None:
        """Cut a partial line back off, so later offsets and cursors stay right."""
        try:
            os.ftruncate(descriptor, self.size)
        except OSError:
            self.close()  # the next open starts from the file as it is; load-time repair trims it

    def sync(self) -> None:
        """fsync the log (checkpoints and close): what a power cut may not take back."""
        if self._fd is not None:
            os.fsync(self._fd)

    def repair(self) -> None:
        """Trim a torn last line (a crash mid-write) so every line is a whole record."""
        if self.size == 0:
            return
        with self.path.open("rb+") as handle:
            end = self.size
            position = end
            while position > 0:
                step = min(READ_CHUNK, position)
                handle.seek(position - step)
                chunk = handle.read(step)
                index = chunk.rfind(b"\n")
                if index >= 0:
                    position = position - step + index + 1
                    break
                position -= step
            if position != end:
                handle.truncate(position)
                self.size = position

    def starts_event(self, offset: int, event_id: str) -> bool:
        if offset >= self.size:
            return False
        prefix = b'{"id":"' + event_id.encode() + b'"'
        with self.path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(len(prefix)) == prefix and (offset == 0 or self._preceded_by_newline(handle, offset))

    def _preceded_by_newline(self, handle: BinaryIO, offset: int) -> bool:
        handle.seek(offset - 1)
        return handle.read(1) == b"\n"

    def position_after(self, cursor: str) -> int:
        """The offset just after the event a cursor names; "" means the start of the log."""
        if not cursor:
            return 0
        offset, event_id = decode_cursor(cursor)
        if not self.starts_event(offset, event_id):
            raise CursorUnavailable("cursor is not in this session's retained history")
        with self.path.open("rb") as handle:
            handle.seek(offset)
            line = handle.readline(MAX_RECORD_BYTES + 1)
        return offset + len(line)

    def read(self, start: int, *, end: int | None = None, limit: int | None = None) -> list[Event]:
        """Retained events starting at byte `start` (a line start), up to `end` and `limit`."""
        end = self.size if end is None else end
        events: list[Event] = []
        if start >= end:
            return events
        with self.path.open("rb") as handle:
            handle.seek(start)
            offset = start
            while offset < end and (limit is None or len(events) < limit):
                line = handle.readline(MAX_RECORD_BYTES + 1)
                if not line or not line.endswith(b"\n"):
                    break
                body = line[:-1]
                head = orjson.loads(body)
                events.append(Event(head["id"], head["type"], body, offset))
                offset += len(line)
        return events

    def scan_for_recovery(self, *, chunk_size: int = SCAN_CHUNK) -> Iterator[ScannedEvent]:
        """The RECOVERY_TYPES events of the log's whole lines, in order, streamed.

        Reads `chunk_size` bytes at a time up to `size`. A line in Event.build's layout is
        typed by byte slicing and decoded only when its type is one of RECOVERY_TYPES; any
        other line is decoded in full. A line that does not decode is a CorruptLog naming its
        offset. Bytes after the last newline (a torn tail, see repair()) are not read as a line.
        """
        if self.size == 0:
            return
        with self.path.open("rb", buffering=0) as handle:
            remaining = self.size
            base = 0  # file offset of chunk[0]
            pending: list[bytes] = []  # the start of a line that continues in the next chunk
            pending_at = 0  # file offset of that line
            while remaining > 0:
                chunk = handle.read(min(chunk_size, remaining))
                if not chunk:  # the file is shorter than `size`: what is left is torn
                    return
                remaining -= len(chunk)
                start = 0
                newline = chunk.find(b"\n")
                if pending:
                    if newline < 0:  # a line longer than a chunk
                        pending.append(chunk)
                        base += len(chunk)
                        continue
                    pending.append(chunk[:newline])
                    line = b"".join(pending)
                    pending.clear()
                    if not _is_skipped(line, 0, len(line)):
                        event = self._decode_for_recovery(line, offset=pending_at)
                        if event is not None:
                            yield event
                    start = newline + 1
                    newline = chunk.find(b"\n", start)
                while newline >= 0:
                    if not _is_skipped(chunk, start, newline):
                        event = self._decode_for_recovery(chunk[start:newline], offset=base + start)
                        if event is not None:
                            yield event
                    start = newline + 1
                    newline = chunk.find(b"\n", start)
                if start < len(chunk):
                    pending.append(chunk[start:])
                    pending_at = base + start
                base += len(chunk)

    def _decode_for_recovery(self, line: bytes, *, offset: int) -> ScannedEvent | None:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CorruptLog(self.path, offset, f"is not JSON: {exc}") from exc
        if not isinstance(value, dict) or not (isinstance(value.get("id"), str) and isinstance(value.get("type"), str)):
            raise CorruptLog(self.path, offset, "is not an event envelope")
        if value["type"] not in RECOVERY_TYPES:
            return None
        input_id, data = value.get("input_id"), value.get("data")
        return ScannedEvent(
            offset=offset,
            id=value["id"],
            type=value["type"],
            input_id=input_id if isinstance(input_id, str) else "",
            data=data if isinstance(data, dict) else {},
        )
