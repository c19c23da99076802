"""Streams that lose no text: a client that reconnects mid-reply gets the text it missed, once.

The real `loop` harness in a real `runbrain` streams a scripted reply one word a delta; clients
read it through the published client's `observe(id, after=cursor)` and over raw SSE with
`Last-Event-ID`. Every live delta carries `offset` (the characters of its message before it); a
stream opened while a message is being written gets, after the retained events that follow its
cursor, one `assistant.delta` with the text so far and its offset, then the live deltas.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.provider import LOOP_HARNESS, ScriptedProvider
from tests.fixtures.server import BrainServer, make_server, wait_for_turn_end
from tests.support.reconnects import STREAMING_PROMPT, reconnect_drill, streaming_script
from tests.support.sse import EventStream, Frame

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

REPLY_WORDS = 60
DELTA_MS = 30  # slow enough that a reconnect lands mid-reply
DISCONNECTS = 30  # the figure the reconnect guarantee is stated for
TURN_SECONDS = 60.0
SESSION_BOUND = 64 << 10  # sessions_app/runtime/deltas.py: MAX_SESSION_DELTA_CHARS


@pytest.fixture(scope="module")
def provider() -> Iterator[ScriptedProvider]:
    scripted = ScriptedProvider()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def loop_brain(tmp_path_factory: pytest.TempPathFactory, provider: ScriptedProvider) -> Iterator[BrainServer]:
    server = make_server(
        tmp_path_factory.mktemp("brain"), harnesses={"loop": LOOP_HARNESS}, providers=provider.providers()
    )
    server.start()
    yield server
    server.stop()


def _create(server: BrainServer) -> str:
    session = server.sdk().create({"harness": "loop", "config": {"model": "openai/gpt-4.1-mini", "tools": []}})
    return str(session["id"])


def _send(server: BrainServer, session_id: str, text: str) -> str:
    return str(server.sdk().send(session_id, {"type": "user.message", "text": text})["id"])


def _deltas(frames: list[Frame]) -> list[dict[str, Any]]:
    return [frame.data["data"] for frame in frames if frame.event == "assistant.delta" and frame.data is not None]


def test_a_client_that_reconnects_mid_reply_rebuilds_every_reply_exactly(
    loop_brain: BrainServer, provider: ScriptedProvider
) -> None:
    # given: replies streamed one word a delta, slowly
    provider.reset()
    provider.set_script(streaming_script(REPLY_WORDS, delay_ms=DELTA_MS))
    session_id = _create(loop_brain)
    # when: a client drops its stream at random deltas and reconnects after its last cursor
    # (some reconnects forget the text they held), dropping by offset what it already has
    figures = reconnect_drill(
        [loop_brain.sdk()],
        session_id,
        disconnects=DISCONNECTS,
        rng=random.Random(31),
        send=lambda: _send(loop_brain, session_id, STREAMING_PROMPT),
        per_delta=0.08,
    )
    print(f"lossless reconnects: {figures}")
    # then: every reply rebuilt equals its assistant.message; nothing lost, nothing twice
    assert figures.reconnects == DISCONNECTS
    assert (figures.mismatches, figures.gaps, figures.duplicates) == (0, 0, 0), figures.problems
    assert figures.messages >= 1


def test_a_stream_opened_mid_reply_replays_its_text_once_after_the_retained_events(
    loop_brain: BrainServer, provider: ScriptedProvider
) -> None:
    # given: a reply being streamed, watched from its start by a first stream
    provider.reset()
    provider.set_script(streaming_script(REPLY_WORDS, delay_ms=DELTA_MS))
    session_id = _create(loop_brain)
    token = loop_brain.token()
    with EventStream(loop_brain.url, token, session_id, after="") as first:
        input_id = _send(loop_brain, session_id, STREAMING_PROMPT)
        first.wait_for(lambda seen: sum(e["type"] == "assistant.delta" for e in seen) >= 5, timeout=TURN_SECONDS)
        held = list(first.frames)
        user_message = next(frame for frame in held if frame.event == "user.message")
        # when: a second client reconnects with Last-Event-ID of the user.message, mid-reply
        with EventStream(loop_brain.url, token, session_id, last_event_id=user_message.id) as second:
            wait_for_turn_end(loop_brain, session_id, input_id, timeout=TURN_SECONDS)
            second.wait_for(lambda seen: any(e["type"] == "assistant.message" for e in seen), timeout=TURN_SECONDS)
            frames = list(second.frames)
    # then: the retained events after the cursor, then one delta with the text so far from
    # offset 0, then the live deltas, each starting where the one before ended
    kinds = [(frame.event, frame.id is not None) for frame in frames if not frame.comment]
    assert kinds[0] == ("session.status", True)
    assert kinds[1] == ("assistant.delta", False)
    assert all(has_id == (event != "assistant.delta") for event, has_id in kinds)
    deltas = _deltas(frames)
    assert deltas[0]["offset"] == 0
    assert deltas[0]["text"].startswith("".join(delta["text"] for delta in _deltas(held)))
    ends = [delta["offset"] + len(delta["text"]) for delta in deltas]
    assert [delta["offset"] for delta in deltas[1:]] == ends[:-1]
    (message,) = [frame.data["data"]["text"] for frame in frames if frame.event == "assistant.message" and frame.data]
    assert "".join(delta["text"] for delta in deltas) == message
    assert len(deltas) < REPLY_WORDS + 1  # the replayed delta stood for several live ones
    # and the first stream saw every delta live once, with the same offsets
    live = _deltas(list(first.frames))
    assert "".join(delta["text"] for delta in live) == message
    assert [delta["offset"] for delta in live] == [sum(len(d["text"]) for d in live[:i]) for i in range(len(live))]


def test_a_stream_opened_after_the_message_is_retained_replays_no_delta(
    loop_brain: BrainServer, provider: ScriptedProvider
) -> None:
    # given: a reply streamed and retained
    provider.reset()
    provider.set_script(streaming_script(8, delay_ms=0))
    session_id = _create(loop_brain)
    input_id = _send(loop_brain, session_id, STREAMING_PROMPT)
    wait_for_turn_end(loop_brain, session_id, input_id, timeout=TURN_SECONDS)
    # when
    with EventStream(loop_brain.url, loop_brain.token(), session_id, after="") as stream:
        stream.wait_for(lambda seen: any(e["type"] == "session.status" and e["data"]["status"] == "idle" for e in seen))
        frames = list(stream.frames)
    # then: the retained events only (the message's text is in its assistant.message)
    assert [frame.event for frame in frames] == [
        "user.message",
        "session.status",
        "model.request",
        "assistant.message",
        "session.status",
    ]


def test_a_reply_longer_than_the_bound_replays_its_newest_text_with_where_it_starts(
    loop_brain: BrainServer, provider: ScriptedProvider
) -> None:
    # given: one delta of 70,000 characters, then the model stalls mid-reply
    provider.reset()
    text = "é" * 70_000
    provider.set_script({"chunk_words": 1, "rules": [{"match": "long one", "reply": text, "stall": True}]})
    session_id = _create(loop_brain)
    client = loop_brain.sdk()
    input_id = _send(loop_brain, session_id, "long one")
    stream = client.observe(session_id)
    for event in stream:  # the delta arrived: the model stalls now
        if event["type"] == "assistant.delta":
            assert event["data"] == {"text": text, "offset": 0}
            break
    stream.close()
    # when: a client reconnects mid-reply
    replay = client.observe(session_id, after="")
    seen = []
    for event in replay:
        seen.append(event)
        if event["type"] == "assistant.delta":
            break
    replay.close()
    client.interrupt(session_id)
    wait_for_turn_end(loop_brain, session_id, input_id, timeout=TURN_SECONDS)
    # then: the replay holds the newest 65,536 characters and says where they start; a client
    # holding less than that offset knows it missed text (the assistant.message would carry it)
    assert [event["type"] for event in seen] == ["user.message", "session.status", "assistant.delta"]
    assert seen[-1]["data"] == {"text": "é" * SESSION_BOUND, "offset": 70_000 - SESSION_BOUND}


def test_a_reply_cut_by_an_interrupt_does_not_hide_the_next_reply_from_a_reconnecting_client(
    loop_brain: BrainServer, provider: ScriptedProvider
) -> None:
    # given: a client following a reply from its start, keeping the text of the message in
    # progress as the README says (reset at each assistant.message and each session.status)
    provider.reset()
    second_reply = "the second reply is here, streamed word by word."
    slow_second = {"match": "second", "reply": second_reply, "delay_ms": DELTA_MS}
    provider.set_script(
        {
            **streaming_script(REPLY_WORDS, delay_ms=DELTA_MS),
            "rules": [slow_second] + streaming_script(REPLY_WORDS, delay_ms=DELTA_MS)["rules"],
        }
    )
    session_id = _create(loop_brain)
    client = loop_brain.sdk()
    have, cursor, deltas_seen = "", "", 0
    first_id = _send(loop_brain, session_id, STREAMING_PROMPT)
    stream = client.observe(session_id, after=cursor)

    def follow(event: dict[str, Any]) -> None:
        nonlocal have, cursor
        cursor = event.get("cursor") or cursor
        if event["type"] == "assistant.delta":
            offset, piece = event["data"]["offset"], event["data"]["text"]
            assert offset <= len(have), f"text lost: delta at {offset} past {len(have)} held"
            have += piece[len(have) - offset :]
        elif event["type"] in ("assistant.message", "session.status"):
            have = ""

    for event in stream:  # the first reply is cut after a few deltas
        follow(event)
        deltas_seen += event["type"] == "assistant.delta"
        if deltas_seen == 5:
            client.interrupt(session_id)
            break
    wait_for_turn_end(loop_brain, session_id, first_id, timeout=TURN_SECONDS)
    client.resume(session_id)
    # when: the next reply streams, and the client's stream drops mid-reply and reconnects
    second_id = _send(loop_brain, session_id, "second")
    rebuilt, deltas_seen = "", 0
    for event in stream:
        follow(event)
        if event["type"] == "assistant.delta" and event.get("input_id") == second_id:
            deltas_seen += 1
            if deltas_seen == 3:
                break
    stream.close()
    for event in client.observe(session_id, after=cursor):
        before = have
        follow(event)
        if event["type"] == "assistant.message" and event.get("input_id") == second_id:
            rebuilt = before
            final = event["data"]["text"]
            break
    # then: the cut reply ended with a retained status, the next one started at offset 0, and
    # the client rebuilt it whole from its deltas across the reconnect
    assert rebuilt == final == second_reply
