"""The text of the assistant message being streamed, kept so a stream opened mid-message can
replay what it missed (live `assistant.delta` events are never written to the log).

Each live delta carries `offset`: the characters (Unicode code points) of its message streamed
before it. A buffer keeps the concatenated text of the message in progress, not the deltas, and
is emptied when the message is retained (`assistant.message`) or the turn ends. A stream replays
it as one `assistant.delta` whose `offset` says where it starts, so a client drops what it has.
"""

from __future__ import annotations

from sessions_app.eventlog import Event

__all__ = ["MAX_SERVER_DELTA_CHARS", "MAX_SESSION_DELTA_CHARS", "DeltaBudget", "DeltaBuffer"]

# Per session: the newest characters of the message in progress a reconnect can get back. A
# model message is rarely longer (64 Ki characters, about 16k tokens); a longer one replays its
# newest part, and the client knows it missed the rest from `offset`. At most 256 KiB of memory.
MAX_SESSION_DELTA_CHARS = 64 << 10
# Per server: the sum over its sessions (at most 64 MiB). Past it a session that needs more drops
# its own buffered text (its next reconnect replays from the delta that did not fit).
MAX_SERVER_DELTA_CHARS = 16 << 20


class DeltaBudget:
    """The server-wide bound on buffered delta text, in characters."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int = MAX_SERVER_DELTA_CHARS) -> None:
        self.limit = limit
        self.used = 0

    def take(self, chars: int) -> bool:
        if self.used + chars > self.limit:
            return False
        self.used += chars
        return True

    def give(self, chars: int) -> None:
        self.used -= chars


class DeltaBuffer:
    """One session's message in progress: its streamed length, and its newest text that fits."""

    __slots__ = ("_budget", "_limit", "_parts", "_chars", "_input_id", "streamed")

    def __init__(self, budget: DeltaBudget, *, limit: int = MAX_SESSION_DELTA_CHARS) -> None:
        self._budget = budget
        self._limit = limit
        self._parts: list[str] = []
        self._chars = 0  # characters held in _parts (their sum, charged to the budget)
        self._input_id = ""
        self.streamed = 0  # characters of the message streamed so far: the next delta's offset

    def add(self, text: str, *, input_id: str) -> None:
        """A delta that was published with `offset` = `streamed`."""
        self._input_id = input_id
        self.streamed += len(text)
        if not text:
            return
        if len(text) >= self._limit:  # the newest part of one huge delta is all that fits
            self._drop()
            text = text[-self._limit :]
        elif self._chars + len(text) > self._limit:
            kept = "".join(self._parts)[self._chars + len(text) - self._limit :]
            self._drop()
            if not self._budget.take(len(kept)):
                return
            self._parts, self._chars = [kept], len(kept)
        if not self._budget.take(len(text)):
            self._drop()  # the server is at its bound: this session keeps nothing of this message
            if not self._budget.take(len(text)):
                return
        self._parts.append(text)
        self._chars += len(text)

    def clear(self) -> None:
        """The message was retained, or its turn ended: the next delta starts a new message."""
        self._drop()
        self.streamed = 0

    def _drop(self) -> None:
        self._budget.give(self._chars)
        self._parts.clear()
        self._chars = 0

    def replay(self) -> bytes:
        """One assistant.delta SSE frame with the buffered text and its offset (b"": none)."""
        if not self._chars:
            return b""
        text = "".join(self._parts)
        self._parts[:] = [text]  # joined once, for every replay after this one too
        data = {"text": text, "offset": self.streamed - self._chars}
        return Event.build("assistant.delta", data, input_id=self._input_id).sse_frame()
