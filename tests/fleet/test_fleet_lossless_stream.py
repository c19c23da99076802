"""Streams that lose no text, through a fleet: a client reconnecting mid-reply through an instance
that does not own the session (a forwarded stream) gets the same replay of the text it missed as
one connected to the owner. Two real `runbrain` instances on one PostgreSQL, the real `loop`
harness against the scripted provider, read through the published client."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory
from tests.support.reconnects import STREAMING_PROMPT, reconnect_drill, streaming_script
from tests.support.sse import EventStream

pytestmark = pytest.mark.client

LEASE_SECONDS = 10  # nobody dies here
DISCONNECTS = 8
TURN_SECONDS = 60.0


@pytest.fixture
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    scripted.set_script(streaming_script(60, delay_ms=30))
    yield scripted
    scripted.stop()


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer],
    postgres_server: PostgresServer,
    tmp_path: Path,
    provider: ScriptedProvider,
) -> Callable[[str], BrainServer]:
    def loop_instance(start: bool = True, **overrides: Any) -> BrainServer:
        return brain_factory(start=start, harnesses={"loop": LOOP_HARNESS}, providers=provider.providers(), **overrides)

    return fleet_factory(
        loop_instance, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_lossless"
    )


def _create(server: BrainServer) -> str:
    session = server.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}})
    return str(session["id"])


def test_a_client_reconnecting_through_a_non_owner_rebuilds_every_reply_exactly(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a session owned by A, and B, which forwards its streams to A
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = _create(a)
    # when: a client drops its stream at random deltas and reconnects through B, then A, in turn
    figures = reconnect_drill(
        [a.sdk(), b.sdk()],
        session_id,
        disconnects=DISCONNECTS,
        rng=random.Random(3100),
        send=lambda: str(a.sdk().send(session_id, {"type": "user.message", "text": STREAMING_PROMPT})["id"]),
        per_delta=0.08,
    )
    print(f"lossless reconnects through a fleet: {figures}")
    # then: every reply rebuilt equals its assistant.message; nothing lost, nothing twice
    assert figures.reconnects == DISCONNECTS
    assert (figures.mismatches, figures.gaps, figures.duplicates) == (0, 0, 0), figures.problems
    assert not (b.data_dir / "sessions" / session_id).exists()  # every stream through B was A's


def test_a_forwarded_stream_opened_mid_reply_replays_its_text_after_the_retained_events(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given: a reply being streamed on A, watched from its start through A
    a, b = fleet("brain-a"), fleet("brain-b")
    session_id = _create(a)
    with EventStream(a.url, a.token(), session_id, after="") as first:
        a.sdk().send(session_id, {"type": "user.message", "text": STREAMING_PROMPT})
        seen = first.wait_for(lambda events: sum(e["type"] == "assistant.delta" for e in events) >= 3)
        cursor = next(event["cursor"] for event in seen if event["type"] == "user.message")
        # when: a client reconnects through B with Last-Event-ID mid-reply
        with EventStream(b.url, b.token(), session_id, last_event_id=cursor) as second:
            second.wait_for(lambda events: any(e["type"] == "assistant.message" for e in events), timeout=TURN_SECONDS)
            frames = [frame for frame in second.frames if not frame.comment]
    # then: the running status, then the text so far from offset 0 (no id: line), then live
    assert [(frame.event, frame.id is not None) for frame in frames[:2]] == [
        ("session.status", True),
        ("assistant.delta", False),
    ]
    deltas = [frame.data["data"] for frame in frames if frame.event == "assistant.delta" and frame.data]
    assert deltas[0]["offset"] == 0
    assert [delta["offset"] for delta in deltas[1:]] == [d["offset"] + len(d["text"]) for d in deltas[:-1]]
    (message,) = [frame.data["data"]["text"] for frame in frames if frame.event == "assistant.message" and frame.data]
    assert "".join(delta["text"] for delta in deltas) == message
