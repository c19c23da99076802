"""A client that drops its event stream at random points of a streamed reply and reconnects after
its last cursor, rebuilding the reply from `assistant.delta` offsets (used by the lossless-stream
journeys and bench/reconnect_bench.py).

Through the published client (`observe(id, after=cursor)`); a list of clients reconnects through
each in turn (the instances of a fleet). What it checks of every assistant message:
- within one stream, each delta starts where the one before it ended (none both replayed and sent
  live, none skipped): a delta that starts earlier is a duplicate, one that starts later a gap;
- a delta never starts past the text the client holds (a gap: text lost);
- the rebuilt text equals the `assistant.message` text when a delta of that message reached the
  stream that got the message; when the message was whole before the stream opened (it ended
  while the client was away) its text replays retained and the rebuilt part must be its prefix.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STREAMING_PROMPT", "DrillFigures", "reconnect_drill", "streaming_reply", "streaming_script"]

STREAMING_PROMPT = "stream slowly please"  # what the scripts of the journeys and the bench match
WORDS = (
    "naïve",
    "café",
    "déjà",
    "vu",
    "über",
    "straße",
    "日本語",
    "テキスト",
    "🙂",
    "emoji",
    "plain",
    "ascii",
    "words",
    "and",
    "more",
    "text",
)


def streaming_reply(words: int, *, seed: int = 7) -> str:
    """A reply of `words` words, with accents, CJK and an emoji (offsets count code points)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def streaming_script(words: int, *, delay_ms: int) -> dict[str, Any]:
    """The scripted provider's script: STREAMING_PROMPT gets `words` words, one a delta, each
    `delay_ms` after the one before."""
    rule = {"match": STREAMING_PROMPT, "reply": streaming_reply(words), "delay_ms": delay_ms}
    return {"chunk_words": 1, "rules": [rule]}


@dataclass(slots=True)
class DrillFigures:
    reconnects: int = 0
    cold_reconnects: int = 0  # reconnects of a client that forgot the text it had (a reload)
    messages: int = 0
    mismatches: int = 0
    gaps: int = 0
    duplicates: int = 0
    replayed_deltas: int = 0  # deltas holding text the client already had: replays, trimmed by offset
    dropped_chars: int = 0  # characters the client dropped from them
    completed_away: int = 0  # messages that ended while the client was away (retained, whole)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Reader:
    figures: DrillFigures
    text: str = ""  # the message in progress, as rebuilt
    stream_end: int | None = None  # where the last delta on this stream ended
    delta_on_stream: bool = False  # a delta of the message in progress reached this stream

    def new_stream(self, *, cold: bool) -> None:
        self.stream_end, self.delta_on_stream = None, False
        if cold:
            self.text = ""

    def delta(self, data: dict[str, Any]) -> None:
        figures = self.figures
        offset, piece = data["offset"], data["text"]
        if self.stream_end is not None and offset != self.stream_end:
            if offset < self.stream_end:
                figures.duplicates += 1
            else:
                figures.gaps += 1
            figures.problems.append(f"delta at {offset} after one ending at {self.stream_end}")
        self.stream_end = offset + len(piece)
        self.delta_on_stream = True
        have = len(self.text)
        if offset > have:
            figures.gaps += 1
            figures.problems.append(f"delta at {offset} past the {have} characters held")
            return
        if offset < have:
            figures.replayed_deltas += 1
            figures.dropped_chars += min(have, offset + len(piece)) - offset
        self.text += piece[have - offset :]

    def message(self, final: str) -> None:
        figures = self.figures
        figures.messages += 1
        if self.delta_on_stream:
            if self.text != final:
                figures.mismatches += 1
                figures.problems.append(f"rebuilt {self.text!r} != {final!r}")
        elif final.startswith(self.text):
            figures.completed_away += 1
        else:
            figures.mismatches += 1
            figures.problems.append(f"rebuilt {self.text!r} is no prefix of {final!r}")
        self.text, self.stream_end, self.delta_on_stream = "", None, False

    def status(self) -> None:
        """A retained session.status: a turn started or ended, so no message is in progress (one
        cut off by an interrupt or a failure has no assistant.message; the next starts at 0)."""
        self.text, self.stream_end, self.delta_on_stream = "", None, False


def reconnect_drill(
    clients: Sequence[Any],
    session_id: str,
    *,
    disconnects: int,
    rng: random.Random,
    send: Callable[[], str],
    per_delta: float = 0.04,
    away_seconds: float = 0.3,
    cold_share: float = 0.25,
) -> DrillFigures:
    """Send turns (`send` returns the user.message id) and read each through `clients[0]`'s
    stream, dropping it after a delta with probability `per_delta`, staying away up to
    `away_seconds`, forgetting the text held with probability `cold_share`, and reconnecting
    after the last cursor through the next client, until `disconnects` reconnects are done and
    the turn running then has ended."""
    figures = DrillFigures()
    reader = _Reader(figures)
    cursor = ""
    began = time.perf_counter()
    stream: Iterator[dict[str, Any]] = clients[0].observe(session_id, after=cursor)
    try:
        while True:
            input_id = send()
            while True:
                event = next(stream)
                cursor = event.get("cursor") or cursor
                kind = event["type"]
                if kind == "assistant.delta":
                    reader.delta(event["data"])
                    if figures.reconnects < disconnects and rng.random() < per_delta:
                        stream.close()  # type: ignore[attr-defined]  # a generator
                        time.sleep(rng.uniform(0, away_seconds))
                        cold = rng.random() < cold_share
                        figures.reconnects += 1
                        figures.cold_reconnects += cold
                        reader.new_stream(cold=cold)
                        client = clients[figures.reconnects % len(clients)]
                        stream = client.observe(session_id, after=cursor)
                elif kind == "assistant.message":
                    reader.message(event["data"]["text"])
                elif kind == "session.error" and event.get("input_id") == input_id:
                    raise AssertionError(f"the turn failed: {event['data']}")
                elif kind == "session.status":
                    reader.status()
                    if event.get("input_id") != input_id:
                        continue
                    if event["data"]["status"] not in ("running", "idle"):
                        raise AssertionError(f"the turn ended {event['data']['status']}")
                    if event["data"]["status"] == "idle":
                        break
            if figures.reconnects >= disconnects:
                break
    finally:
        stream.close()  # type: ignore[attr-defined]
        figures.seconds = time.perf_counter() - began
    return figures
