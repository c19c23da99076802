"""Native session state: one append-only JSONL conversation file in the session's `dir`.

Records (one JSON object per line) belong to a turn (`tid`); a turn counts only once its
`turn_end` record is written. An interrupted, failed or killed turn therefore never enters the
context, whether or not Brain has truncated the file back to the last checkpoint. Compaction is a
`compaction` record inside a turn that supersedes the turns before `kept_from`.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from runners.media import Media, MediaError, read_media
from runners.protocol import JSONObject, NativeFile

from .errors import BrainFailure
from .messages import AssistantMessage, Generation, Message, ToolCall, ToolResult, UserMessage

__all__ = ["CONVERSATION_FILE", "NativeState", "OpenTurn", "SUMMARY_PREFIX"]

CONVERSATION_FILE = "conversation.jsonl"
FORMAT = "brain-loop-conversation/1"
# A compaction summary enters the context as a user message that starts with this line.
SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


@dataclass(slots=True)
class _Turn:
    tid: str
    messages: list[Message] = field(default_factory=list)
    summary: str | None = None  # set by a compaction record inside this turn
    kept_from: str | None = None  # first older turn the compaction keeps (None: none kept)
    compacted: bool = False


def _message_record(message: Message) -> JSONObject:
    if isinstance(message, UserMessage):
        record: JSONObject = {"type": "user", "text": message.text}
        if message.media:
            record["media"] = list(message.media)
        return record
    if isinstance(message, ToolResult):
        return {
            "type": "tool_result",
            "call_id": message.call_id,
            "name": message.name,
            "text": message.text,
            "is_error": message.is_error,
        }
    record = {
        "type": "assistant",
        "text": message.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
    }
    if message.replay:
        record["replay"] = message.replay
    return record


def _record_media(value: object) -> tuple[Media, ...]:
    if not value:
        return ()
    try:
        return tuple(read_media(value, decode=False))
    except MediaError:
        print("loop: dropping unreadable images of a native record", file=sys.stderr)
        return ()


def _record_message(record: dict[str, Any]) -> Message | None:
    kind = record.get("type")
    if kind in ("user", "steer"):
        return UserMessage(text=str(record["text"]), media=_record_media(record.get("media")))
    if kind == "tool_result":
        return ToolResult(
            call_id=str(record["call_id"]),
            name=str(record["name"]),
            text=str(record["text"]),
            is_error=bool(record.get("is_error")),
        )
    if kind == "assistant":
        calls = tuple(
            ToolCall(id=str(c["id"]), name=str(c["name"]), arguments=dict(c["arguments"]))
            for c in record.get("tool_calls", ())
        )
        return AssistantMessage(text=str(record.get("text", "")), tool_calls=calls, replay=record.get("replay"))
    return None


class NativeState:
    """The committed conversation of one session plus the file it is appended to."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / CONVERSATION_FILE
        self._turns: list[_Turn] = []
        self._summary: str | None = None
        self._file: IO[bytes] | None = None
        self._needs_newline = False  # a torn last line (crash mid-write) must not swallow a record
        self.open_turn: OpenTurn | None = None
        # Prompt-cache routing key: lives in the header so a restored copy keeps sending it.
        self.cache_key = uuid.uuid4().hex

    @classmethod
    def load(cls, directory: Path) -> NativeState:
        """Passive: read what is on disk, create the directory and an empty file if missing."""
        state = cls(directory)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            if not state.path.exists():
                state.path.touch()
            data = state.path.read_bytes()
        except OSError as exc:
            raise BrainFailure(f"cannot read native state in {directory}: {exc}") from exc
        state._needs_newline = bool(data) and not data.endswith(b"\n")
        state._replay(data)
        return state

    def _replay(self, data: bytes) -> None:
        current: _Turn | None = None
        for line in data.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                print(f"loop: skipping unreadable native record in {self.path}", file=sys.stderr)
                continue
            if isinstance(record, dict) and record.get("type") == "header":
                self.cache_key = str(record.get("cache_key") or self.cache_key)
            if not isinstance(record, dict) or "tid" not in record:
                continue
            tid = record["tid"]
            if current is None or current.tid != tid:
                current = _Turn(tid=tid)  # a previous turn without turn_end is dropped here
            kind = record.get("type")
            if kind == "turn_end":
                self._commit(current)
                current = None
            elif kind == "compaction":
                current.summary, current.kept_from, current.compacted = record["summary"], record.get("kept_from"), True
            else:
                message = _record_message(record)
                if message is not None:
                    current.messages.append(message)

    def _commit(self, turn: _Turn) -> None:
        if turn.compacted:
            self._summary = turn.summary
            self._turns = self._turns_from(turn.kept_from)
        self._turns.append(turn)

    def _turns_from(self, tid: str | None) -> list[_Turn]:
        for index, turn in enumerate(self._turns):
            if turn.tid == tid:
                return self._turns[index:]
        return []

    # The context ---------------------------------------------------------------------------

    def context(self) -> list[Message]:
        """The messages of the next model request: summary, committed turns, the open turn."""
        open_turn = self.open_turn._turn if self.open_turn else None
        summary, turns = self._summary, self._turns
        if open_turn is not None and open_turn.compacted:
            summary, turns = open_turn.summary, self._turns_from(open_turn.kept_from)
        messages: list[Message] = [UserMessage(SUMMARY_PREFIX + summary)] if summary else []
        for turn in turns:
            messages.extend(turn.messages)
        if open_turn is not None:
            messages.extend(open_turn.messages)
        return messages

    def compactable_turns(self) -> list[tuple[str, list[Message]]]:
        """Committed turns still in the context, oldest first, with their messages."""
        open_turn = self.open_turn._turn if self.open_turn else None
        turns = self._turns
        if open_turn is not None and open_turn.compacted:
            turns = self._turns_from(open_turn.kept_from)
        return [(turn.tid, turn.messages) for turn in turns]

    @property
    def summary(self) -> str | None:
        open_turn = self.open_turn._turn if self.open_turn else None
        if open_turn is not None and open_turn.compacted:
            return open_turn.summary
        return self._summary

    # Writing -------------------------------------------------------------------------------

    def begin_turn(self) -> OpenTurn:
        if self.open_turn is not None:
            raise BrainFailure("a turn is already running")
        self.open_turn = OpenTurn(self, _Turn(tid=uuid.uuid4().hex))
        return self.open_turn

    def append(self, record: JSONObject) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        try:
            if self._file is None:
                self._file = self.path.open("ab")
            if self._file.tell() == 0:
                line = (
                    json.dumps({"type": "header", "format": FORMAT, "cache_key": self.cache_key}).encode()
                    + b"\n"
                    + line
                )
            if self._needs_newline:
                line = b"\n" + line
            self._file.write(line)
            self._file.flush()  # in the OS page cache from here on: survives a kill -9 of this process
            self._needs_newline = False
        except OSError as exc:
            raise BrainFailure(f"cannot write native state {self.path}: {exc}") from exc

    def checkpoint(self) -> list[NativeFile]:
        """Flush to disk and list the file with its exact size; only between turns."""
        if self.open_turn is not None:
            raise BrainFailure("checkpoint requested while a turn is running")
        try:
            if self._file is not None:
                os.fsync(self._file.fileno())
            size = self.path.stat().st_size
        except OSError as exc:
            raise BrainFailure(f"cannot checkpoint native state {self.path}: {exc}") from exc
        return [{"path": CONVERSATION_FILE, "size": size, "append_only": True}]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class OpenTurn:
    """The records of the running turn: appended as they happen, counted only after commit."""

    def __init__(self, state: NativeState, turn: _Turn) -> None:
        self._state = state
        self._turn = turn

    @property
    def tid(self) -> str:
        return self._turn.tid

    def _append(self, record: JSONObject, message: Message | None) -> None:
        self._state.append({"tid": self._turn.tid, **record})
        if message is not None:
            self._turn.messages.append(message)

    def add_user(self, text: str, *, steer: bool = False, media: tuple[Media, ...] = ()) -> None:
        message = UserMessage(text, media=media)
        record = _message_record(message)
        if steer:
            record["type"] = "steer"
        self._append(record, message)

    def add_generation(self, generation: Generation) -> None:
        message = generation.as_message()
        record = _message_record(message)
        record["stop_reason"] = generation.stop_reason
        record["usage"] = {"input": generation.usage.input, "output": generation.usage.output}
        self._append(record, message)

    def add_tool_result(self, result: ToolResult) -> None:
        self._append(_message_record(result), result)

    def add_compaction(self, summary: str, *, kept_from: str | None) -> None:
        self._append({"type": "compaction", "summary": summary, "kept_from": kept_from}, None)
        self._turn.summary, self._turn.kept_from, self._turn.compacted = summary, kept_from, True

    def commit(self) -> None:
        self._append({"type": "turn_end"}, None)
        self._state._commit(self._turn)
        self._state.open_turn = None

    def discard(self) -> None:
        """Forget the turn in memory; its records stay on disk but are never replayed."""
        self._state.open_turn = None
