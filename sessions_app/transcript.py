"""A session's transcript as an operator reads it: pages of events.jsonl, newest last, read
backwards from the end (or a cursor) or forwards after a cursor, each record decoded only up to a
size bound. Reads complete lines only, so a log being appended to reads consistently.
No Django and no runtime: the admin calls it in its worker thread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from foundation.errors import CursorUnavailable
from runners.media import MediaError, data_url_payload, is_data_url, read_media

from .eventlog import EventLog, decode_cursor, encode_cursor
from .storage import SessionFiles

__all__ = ["Entry", "Image", "SessionSizes", "TranscriptPage", "measure_session", "read_transcript"]

PAGE_EVENTS = 50  # events on one transcript page
PAGE_BYTES = 2 << 20  # log bytes one page may span (one event at least): pages stay small whatever records weigh
DECODE_BYTES = 256 * 1024  # a larger record is summarised from its head (id, type), not decoded
# A user.message is decoded up to this size, for its images: text and image URLs within
# input_bytes (1 MiB at most) plus the record's envelope. A page still spans PAGE_BYTES at most.
MESSAGE_DECODE_BYTES = (1 << 20) + 64 * 1024
DISPLAY_CHARS = 2000  # text shown per event; the rest is in the raw JSON
READ_CHUNK = 64 * 1024  # bytes per read while looking for line boundaries
MAX_NATIVE_ENTRIES = 10_000  # files and folders counted under native/: a page view stays cheap
# The order a session.configure's fields are listed in: the short ones first, instructions last.
CONFIGURATION_ORDER = ("model", "reasoning_effort", "tools", "instructions")
HEAD_BYTES = 512  # enough for the id, type, time and input_id of a record in Event.build's layout
# Event.build writes `{"id":"<32 hex>","type":"<type>","time":"<time>"[,"input_id":"<32 hex>"],"data":...`
_HEAD = re.compile(
    rb'^\{"id":"([0-9a-f]{32})","type":"([a-z_.]{1,64})","time":"([^"]{1,40})"(?:,"input_id":"([0-9a-f]{32})")?'
)


@dataclass(frozen=True, slots=True)
class Image:
    """An image of a user.message: shown inline when it is a data: URL of a raster type,
    linked when it is an https URL (the admin never loads a URL a client gave)."""

    type: str
    url: str

    @property
    def inline(self) -> bool:
        return is_data_url(self.url) and data_url_payload(self.url)[0] == self.type


@dataclass(frozen=True, slots=True)
class Entry:
    """One event of the log as the transcript shows it."""

    offset: int  # where its line starts in events.jsonl
    size: int  # bytes of the record (without the newline)
    id: str
    type: str
    time: str
    input_id: str
    role: str  # user, assistant, tool-call, tool-result, tool-event, approval, config, status, error, other
    label: str  # what the role column says
    text: str  # the main text, cut to DISPLAY_CHARS
    details: str  # a short second line: tool outcome, usage, error code
    truncated: bool  # the text or the record is longer than what is shown
    is_error: bool
    images: tuple[Image, ...] = ()  # a user.message's images

    @property
    def cursor(self) -> str:
        return encode_cursor(self.offset, self.id) if self.id else ""


@dataclass(frozen=True, slots=True)
class TranscriptPage:
    entries: list[Entry]
    older: str  # cursor to read the page before this one (`before`), "" at the start of the log
    newer: str  # cursor to read the page after this one (`after`), "" at its end
    log_bytes: int  # the log's size when read (whole lines)


@dataclass(frozen=True, slots=True)
class SessionSizes:
    log_bytes: int  # events.jsonl; -1 when this server has no files for the session
    since_checkpoint_bytes: int  # log bytes after the last completed checkpoint
    native_bytes: int  # the harness's native/ files
    native_files: int
    native_complete: bool  # False when native/ holds more than MAX_NATIVE_ENTRIES entries


def measure_session(directory: Path, *, checkpoint_offset: int) -> SessionSizes:
    """Sizes of a session's files on this server (a few stat calls; native/ bounded)."""
    files = SessionFiles(directory)
    try:
        log_bytes = files.event_log.stat().st_size
    except FileNotFoundError:
        return SessionSizes(-1, 0, 0, 0, native_complete=True)
    native_bytes = native_files = entries = 0
    pending = [files.native]
    while pending and entries < MAX_NATIVE_ENTRIES:
        try:
            scanned = list(os.scandir(pending.pop()))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for item in scanned:
            entries += 1
            if item.is_dir(follow_symlinks=False):
                pending.append(Path(item.path))
            elif item.is_file(follow_symlinks=False):
                native_files += 1
                native_bytes += item.stat(follow_symlinks=False).st_size
    return SessionSizes(
        log_bytes=log_bytes,
        since_checkpoint_bytes=max(0, log_bytes - checkpoint_offset),
        native_bytes=native_bytes,
        native_files=native_files,
        native_complete=not pending,
    )


def read_transcript(path: Path, *, before: str = "", after: str = "", limit: int = PAGE_EVENTS) -> TranscriptPage:
    """A page of the log at `path`: the `limit` events just before the event `before` names (the
    newest events when both cursors are empty), or the first `limit` after the event `after`
    names (the newest, when none follows it). A cursor that does not start an event of this log
    is CursorUnavailable; a missing log is FileNotFoundError."""
    log = EventLog(path, max_bytes=0)  # read only: nothing is ever appended through it
    with path.open("rb") as handle:
        end = _whole_lines_end(handle, log.size)
        spans: list[tuple[int, int]] = []
        if after:
            spans = _spans_forward(handle, log.position_after(after), end, count=limit)
        if not spans:  # no cursor, `before`, or nothing after `after`: the page ends at an event or the end
            stop = end
            if before and not after:
                offset, event_id = decode_cursor(before)
                if not log.starts_event(offset, event_id):
                    raise CursorUnavailable("cursor is not in this session's retained history")
                stop = offset
            spans = _spans_backward(handle, stop, count=limit)
        entries = [_entry(handle, start, newline) for start, newline in spans]
    older = entries[0].cursor if entries and entries[0].offset > 0 else ""
    newer = entries[-1].cursor if entries and spans[-1][1] + 1 < end else ""
    return TranscriptPage(entries=entries, older=older, newer=newer, log_bytes=end)


def _whole_lines_end(handle: BinaryIO, size: int) -> int:
    """The offset just after the last newline before `size`: a torn last line (a write in
    progress, or a crash) is not part of the transcript."""
    return _line_start(handle, size)


def _spans_backward(handle: BinaryIO, end: int, *, count: int) -> list[tuple[int, int]]:
    """(start, newline) of up to `count` lines ending just before `end` (a line start), in log
    order, spanning at most PAGE_BYTES (the newest line whatever its size)."""
    spans: list[tuple[int, int]] = []
    newline = end - 1  # the newline that ends the line before `end`
    while newline >= 0 and len(spans) < count:
        start = _line_start(handle, newline)
        if spans and end - start > PAGE_BYTES:
            break
        spans.append((start, newline))
        newline = start - 1
    spans.reverse()
    return spans


def _line_start(handle: BinaryIO, newline: int) -> int:
    """The start of the line whose newline is at `newline`: the offset just after the last
    newline before it (0 when there is none)."""
    position = newline
    while position > 0:
        step = min(READ_CHUNK, position)
        handle.seek(position - step)
        index = handle.read(step).rfind(b"\n")
        if index >= 0:
            return position - step + index + 1
        position -= step
    return 0


def _spans_forward(handle: BinaryIO, start: int, end: int, *, count: int) -> list[tuple[int, int]]:
    """(start, newline) of up to `count` lines from `start` (a line start) before `end`, spanning
    at most PAGE_BYTES (the first line whatever its size)."""
    spans: list[tuple[int, int]] = []
    line_start = position = start
    handle.seek(start)
    while position < end and len(spans) < count:
        chunk = handle.read(min(READ_CHUNK, end - position))
        if not chunk:
            break
        search = 0
        while len(spans) < count:
            index = chunk.find(b"\n", search)
            if index < 0:
                break
            newline = position + index
            if spans and newline + 1 - start > PAGE_BYTES:
                return spans
            spans.append((line_start, newline))
            line_start = newline + 1
            search = index + 1
        position += len(chunk)
    return spans


def _entry(handle: BinaryIO, start: int, newline: int) -> Entry:
    size = newline - start
    handle.seek(start)
    if size <= DECODE_BYTES or (size <= MESSAGE_DECODE_BYTES and _is_message(handle, start)):
        raw = handle.read(size)
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            return _decoded(record, offset=start, size=size)
        return _undecoded(raw[:HEAD_BYTES], offset=start, size=size, reason="a line that is not an event")
    return _undecoded(handle.read(HEAD_BYTES), offset=start, size=size, reason=f"a record of {size:,} bytes")


def _is_message(handle: BinaryIO, start: int) -> bool:
    match = _HEAD.match(handle.read(HEAD_BYTES))
    handle.seek(start)
    return match is not None and match.group(2) == b"user.message"


def _images(data: dict[str, Any]) -> tuple[Image, ...]:
    """The message's images that pass the send's rules (shape, type, scheme), else none."""
    try:
        media = read_media(data.get("media") or [], decode=False)
    except MediaError:
        return ()
    return tuple(Image(item["type"], item["url"]) for item in media)


def _undecoded(head: bytes, *, offset: int, size: int, reason: str) -> Entry:
    match = _HEAD.match(head)
    event_id, type_, time, input_id = (
        (part.decode() if part else "" for part in match.groups()) if match else ("", "", "", "")
    )
    return Entry(
        offset=offset,
        size=size,
        id=event_id,
        type=type_,
        time=time,
        input_id=input_id,
        role="other",
        label=type_ or "unreadable",
        text=f"{reason}: open the raw JSON to read it" if event_id else reason,
        details="",
        truncated=True,
        is_error=not event_id,
    )


def _decoded(record: dict[str, Any], *, offset: int, size: int) -> Entry:
    type_ = str(record.get("type", ""))
    data = record.get("data")
    data = data if isinstance(data, dict) else {"value": data}
    role, label, text, details, is_error = _present(type_, data)
    shown = text[:DISPLAY_CHARS]
    return Entry(
        offset=offset,
        size=size,
        id=str(record.get("id", "")),
        type=type_,
        time=str(record.get("time", "")),
        input_id=str(record.get("input_id", "")),
        role=role,
        label=label,
        text=shown,
        details=details,
        truncated=len(shown) < len(text),
        is_error=is_error,
        images=_images(data) if type_ == "user.message" else (),
    )


def _present(type_: str, data: dict[str, Any]) -> tuple[str, str, str, str, bool]:
    """(role, label, text, details, is_error) of one event's data."""
    if type_ == "user.message":
        label = "User (steer)" if data.get("delivery") == "steer" else "User"
        return "user", label, _string(data.get("text")), _join(key=data.get("key")), False
    if type_ == "assistant.message":
        usage = data.get("usage")
        usage_text = ", ".join(f"{k} {v}" for k, v in usage.items()) if isinstance(usage, dict) else ""
        details = _join(stop_reason=data.get("stop_reason"), usage=usage_text)
        return "assistant", "Assistant", _string(data.get("text")), details, False
    if type_ == "tool.call":
        text = f"{_string(data.get('name'))}({_json(data.get('arguments'))})"
        return "tool-call", "Tool call", text, _join(call=data.get("id")), False
    if type_ == "tool.result":
        raw_result = data.get("result")
        result: dict[str, Any] = raw_result if isinstance(raw_result, dict) else {}
        is_error = result.get("is_error") is True
        details = _join(call=data.get("call_id"), outcome=data.get("outcome"), error="yes" if is_error else "")
        return "tool-result", "Tool result", _content_text(result.get("content")), details, is_error
    if type_ == "tool.event":
        text = f"{_string(data.get('kind'))}: {_string(data.get('data'))}"
        return (
            "tool-event",
            "Tool event",
            text,
            _join(call=data.get("call_id"), environment=data.get("environment")),
            False,
        )
    if type_ == "tool.progress":  # live only: never in the log, but a page may be given one
        return "tool-event", "Tool progress", _string(data.get("data")), _join(call=data.get("call_id")), False
    if type_ == "session.configure":
        fields = {name: value for name, value in data.items() if name != "key"}  # its idempotency key
        return "config", "Configuration changed", _configuration_text(fields), _join(key=data.get("key")), False
    if type_ == "approval.requested":
        text = f"{_string(data.get('tool'))}({_json(data.get('arguments'))})"
        details = _join(approval=data.get("approval_id"), call=data.get("call_id"), expires=data.get("expires_at"))
        return "approval", "Approval requested", text, details, False
    if type_ == "approval.decided":
        decision = _string(data.get("decision"))
        text = f"{_string(data.get('tool'))}: {decision} by {_string(data.get('decided_by')) or 'nobody'}"
        reason = _string(data.get("reason"))
        details = _join(why=reason, approval=data.get("approval_id"), call=data.get("call_id"))
        return "approval", "Approval decided", text, details, decision not in ("approved", "")
    if type_ == "model.request":
        usage = data.get("usage")
        tokens = {k: v for k, v in usage.items() if k.endswith("_tokens")} if isinstance(usage, dict) else {}
        text = f"{_string(data.get('model'))} {_string(data.get('state'))}"
        details = _join(purpose=data.get("purpose"), attempts=data.get("attempts"), **tokens)
        return "other", "Model request", text, details, data.get("state") == "failed"
    if type_ == "session.status":
        return "status", "Status", _string(data.get("status")), "", False
    if type_ == "session.error":
        return "error", "Error", _string(data.get("message")), _join(code=data.get("code")), True
    return "other", type_ or "event", _json(data), "", False


def _configuration_text(fields: dict[str, Any]) -> str:
    """`model → openai/gpt-4.1 · tools → a, b · instructions → "…"`: the short fields first,
    the instructions (quoted, their line breaks as \\n) last; live.js writes the same text."""
    ordered = [name for name in CONFIGURATION_ORDER if name in fields]
    ordered += sorted(name for name in fields if name not in CONFIGURATION_ORDER)
    return " · ".join(f"{name.replace('_', ' ')} → {_setting(name, fields[name])}" for name in ordered)


def _setting(name: str, value: object) -> str:
    if name == "instructions":
        return _json(value)
    if isinstance(value, list):
        return ", ".join(_string(item) for item in value) if value else "none"
    return _string(value)


def _content_text(content: object) -> str:
    if not isinstance(content, list):
        return _json(content)
    parts = []
    for item in content:
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(_string(item.get("text")))
        elif isinstance(item, dict) and item.get("type") == "image":
            parts.append(f"[image {_string(item.get('mime_type'))}]")
        else:
            parts.append(_json(item))
    return "\n".join(parts)


def _string(value: object) -> str:
    return value if isinstance(value, str) else _json(value)


def _json(value: object) -> str:
    if value is None:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers past 64 bits: records are written by orjson, so this is a damaged line
        return repr(value)


def _join(**fields: object) -> str:
    return " · ".join(f"{name.replace('_', ' ')} {value}" for name, value in fields.items() if value)
