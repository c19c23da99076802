"""Server-sent events: headers, exact framing, replay cursors, no gaps, limits, slow clients."""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    send_ok,
    wait_for_turn_end,
)
from tests.support.sse import EventStream

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

RETAINED_FRAME = re.compile(rb"^id: ([A-Za-z0-9_-]+)\nevent: ([a-z.]+)\ndata: (\{.*\})$", re.DOTALL)
LIVE_FRAME = re.compile(rb"^event: (assistant\.delta)\ndata: (\{.*\})$", re.DOTALL)


def _is_idle_of(input_id: str) -> Callable[[list[dict[str, Any]]], bool]:
    def seen(events: list[dict[str, Any]]) -> bool:
        return any(
            e["type"] == "session.status" and e.get("input_id") == input_id and e["data"]["status"] == "idle"
            for e in events
        )

    return seen


def _run_turn(server: BrainServer, session_id: str, text: str) -> dict[str, Any]:
    message = send_ok(server, session_id, text)
    wait_for_turn_end(server, session_id, message["id"])
    return message


def test_a_stream_has_sse_headers_and_exact_frames(module_brain: BrainServer) -> None:
    # given: the stream is open before the turn runs
    session = create_session(module_brain)
    with open_stream(module_brain, session["id"]) as stream:
        # when
        message = send_ok(module_brain, session["id"], "hello")
        stream.wait_for(_is_idle_of(message["id"]))
        frames = list(stream.frames)
    # then
    assert stream.status == 200
    assert stream.headers["content-type"] == "text/event-stream"
    assert stream.headers["cache-control"] == "no-cache"
    assert stream.headers["x-content-type-options"] == "nosniff"
    assert re.match(r"^[0-9a-f]{32}$", stream.headers["x-request-id"])
    retained = history(module_brain, session["id"])
    shapes = []
    for frame in frames:
        match = RETAINED_FRAME.match(frame.raw)
        if match is not None:
            cursor, type_, data = match.groups()
            event = json.loads(data)
            assert cursor.decode() == event["cursor"]
            assert type_.decode() == event["type"]
            assert b"\n" not in data
            shapes.append(("retained", event))
        else:
            live = LIVE_FRAME.match(frame.raw)
            assert live is not None, frame.raw
            event = json.loads(live.group(2))
            assert "cursor" not in event
            shapes.append(("live", event))
    assert [event for kind, event in shapes if kind == "retained"] == retained
    assert [(kind, event["type"]) for kind, event in shapes] == [
        ("retained", "user.message"),
        ("retained", "session.status"),
        ("live", "assistant.delta"),
        ("live", "assistant.delta"),
        ("retained", "assistant.message"),
        ("retained", "session.status"),
    ]
    deltas = [event for kind, event in shapes if kind == "live"]
    assert [(d["input_id"], d["data"]) for d in deltas] == [
        (message["id"], {"text": "echo:", "offset": 0}),
        (message["id"], {"text": " hello", "offset": 5}),
    ]
    assert set(deltas[0]) == {"id", "type", "time", "input_id", "data"}


def test_a_stream_replays_history_without_live_only_events(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "first")
    retained = history(module_brain, session["id"])
    # when
    with open_stream(module_brain, session["id"]) as stream:
        events = stream.wait_for(lambda seen: len(seen) >= 4)
    # then
    assert events == retained
    assert all(frame.id is not None for frame in stream.frames)


@pytest.mark.parametrize(
    ("use_after", "use_header"),
    [
        pytest.param(True, False, id="after_query_case"),
        pytest.param(False, True, id="last_event_id_case"),
        pytest.param(True, True, id="after_wins_over_header_case"),
    ],
)
def test_a_stream_resumes_after_a_cursor(module_brain: BrainServer, use_after: bool, use_header: bool) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "one")
    _run_turn(module_brain, session["id"], "two")
    retained = history(module_brain, session["id"])
    kwargs: dict[str, str] = {}
    if use_after:
        kwargs["after"] = retained[4]["cursor"]
    if use_header:
        kwargs["last_event_id"] = retained[1]["cursor"] if use_after else retained[4]["cursor"]
    # when
    with open_stream(module_brain, session["id"], **kwargs) as stream:
        events = stream.wait_for(lambda seen: len(seen) >= 3)
    # then
    assert events == retained[5:]


def test_an_empty_after_replays_from_the_start_despite_a_header(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "one")
    retained = history(module_brain, session["id"])
    # when
    with open_stream(module_brain, session["id"], after="", last_event_id=retained[2]["cursor"]) as stream:
        events = stream.wait_for(lambda seen: len(seen) >= 4)
    # then
    assert events == retained


@pytest.mark.parametrize(
    "where",
    [pytest.param("after", id="after_case"), pytest.param("last_event_id", id="header_case")],
)
@pytest.mark.parametrize(
    "cursor_of",
    [
        pytest.param(lambda events: events[0]["id"], id="event_id_case"),
        pytest.param(lambda events: "not-a-cursor", id="garbage_case"),
        pytest.param(lambda events: "e" * 600, id="over_512_case"),
    ],
)
def test_a_stream_with_a_bad_cursor_is_a_409_json_envelope(
    module_brain: BrainServer, where: str, cursor_of: Any
) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "one")
    cursor = cursor_of(history(module_brain, session["id"]))
    # when
    stream = open_stream(module_brain, session["id"], **{where: cursor})
    body = stream.error()
    stream.close()
    # then
    assert stream.status == 409
    assert stream.headers["content-type"] == "application/json"
    assert body == {
        "error": {"code": "cursor_unavailable", "message": body["error"]["message"]},
        "request_id": stream.headers["x-request-id"],
    }


def test_a_replay_longer_than_one_batch_is_complete_and_in_order(module_brain: BrainServer) -> None:
    # given: more than 100 retained events
    session = create_session(module_brain)
    for index in range(27):
        _run_turn(module_brain, session["id"], f"turn {index}")
    retained = history(module_brain, session["id"])
    # when
    with open_stream(module_brain, session["id"]) as stream:
        events = stream.wait_for(lambda seen: len(seen) >= len(retained))
    # then
    assert len(retained) == 108
    assert events == retained


def test_a_stream_stays_open_across_turns(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    with open_stream(module_brain, session["id"]) as stream:
        first = send_ok(module_brain, session["id"], "one")
        stream.wait_for(_is_idle_of(first["id"]))
        # when
        second = send_ok(module_brain, session["id"], "two")
        stream.wait_for(_is_idle_of(second["id"]))
        # then
        assert not stream.ended
        assert stream.retained() == history(module_brain, session["id"])


def test_disconnecting_a_stream_does_not_stop_the_turn(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    stream = open_stream(module_brain, session["id"])
    message = send_ok(module_brain, session["id"], "sleep:0.3")
    stream.wait_for_event("session.status", input_id=message["id"], status="running")
    # when
    stream.close()
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    # then
    assert [(e["type"], e["data"].get("status")) for e in events][-2:] == [
        ("assistant.message", None),
        ("session.status", "idle"),
    ]


def test_streams_see_no_gap_and_no_duplicate_while_events_are_appended(module_brain: BrainServer) -> None:
    # given: many queued turns, and streams connecting at assorted cursors while they run
    session = create_session(module_brain)
    randomizer = random.Random(7)
    texts = [f"turn {index}" for index in range(15)]
    sent: list[dict[str, Any]] = []

    def sender() -> None:
        for text in texts:
            sent.append(send_ok(module_brain, session["id"], text))

    producer = threading.Thread(target=sender)
    producer.start()
    streams: list[tuple[str, EventStream]] = []
    # when
    for index in range(12):
        snapshot = history(module_brain, session["id"])
        cursor = randomizer.choice(snapshot)["cursor"] if snapshot and index % 3 else ""
        if index % 2:
            stream = open_stream(module_brain, session["id"], after=cursor)
        else:
            stream = open_stream(module_brain, session["id"], last_event_id=cursor)
        streams.append((cursor, stream))
    producer.join()
    last = sent[-1]["id"]
    for _, stream in streams:
        stream.wait_for(_is_idle_of(last))
    retained = history(module_brain, session["id"])
    for _, stream in streams:
        stream.close()
    # then
    ids = [event["id"] for event in retained]
    # turns queued behind a running one start without an idle in between: count per type
    assert [e["type"] for e in retained].count("user.message") == 15
    assert [e["type"] for e in retained].count("assistant.message") == 15
    for cursor, stream in streams:
        start = 0 if not cursor else [event["cursor"] for event in retained].index(cursor) + 1
        assert stream.retained() == retained[start:]
        assert [e["id"] for e in stream.retained()] == ids[start:]


def test_the_stream_ends_when_the_session_is_closed(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    stream = open_stream(module_brain, session["id"])
    # when
    module_brain.sdk().close(session["id"])
    ended = stream.wait_ended()
    stream.close()
    # then
    assert ended
    assert [(e["type"], e["data"]) for e in stream.events()] == [("session.status", {"status": "closed"})]


def test_a_stream_on_a_closed_session_replays_then_ends(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "one")
    module_brain.sdk().close(session["id"])
    # when
    stream = open_stream(module_brain, session["id"])
    ended = stream.wait_ended()
    stream.close()
    # then
    assert ended
    assert stream.events() == history(module_brain, session["id"])


def test_the_sdk_observe_yields_replayed_events_with_cursors(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    _run_turn(module_brain, session["id"], "one")
    retained = history(module_brain, session["id"])
    # when
    observed = []
    stream = module_brain.sdk("reader").observe(session["id"], after=retained[0]["cursor"])
    for event in stream:
        observed.append(event)
        if len(observed) == 3:
            break
    stream.close()  # type: ignore[attr-defined]
    # then
    assert observed == retained[1:]


def test_a_stream_past_the_subscribers_limit_is_429_until_one_closes(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory(limits={"subscribers": 2})
    session = create_session(server)
    first = open_stream(server, session["id"])
    second = open_stream(server, session["id"], "reader")
    # when
    third = open_stream(server, session["id"])
    refused = third.error()
    third.close()
    first.close()
    replacement = _open_when_a_slot_frees(server, session["id"])
    # then
    assert third.status == 429
    assert third.headers["retry-after"] == "1"
    assert refused["error"]["code"] == "overloaded"
    assert replacement.status == 200
    second.close()
    replacement.close()


def _open_when_a_slot_frees(server: BrainServer, session_id: str, attempts: int = 200) -> EventStream:
    """The server notices a closed stream asynchronously; retry the way a client would."""
    for _ in range(attempts):
        stream = open_stream(server, session_id)
        if stream.status == 200:
            return stream
        stream.close()
        threading.Event().wait(0.05)
    raise AssertionError("no subscriber slot was released")


def test_a_slow_client_is_disconnected_while_others_and_turns_go_on(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: one stream that never reads (tiny receive buffer) and one that reads everything
    server = brain_factory(limits={"subscribers": 2, "subscriber_events": 16, "input_bytes": 1 << 20})
    session = create_session(server)
    slow = EventStream(server.url, server.token(), session["id"], receive_buffer=4096).open(read=False)
    fast = open_stream(server, session["id"], "reader")
    # when: large turns until the slow stream's slot comes free
    freed = None
    for index in range(30):
        message = send_ok(server, session["id"], f"{index} " + "x" * 400_000)
        fast.wait_for(_is_idle_of(message["id"]))
        probe = open_stream(server, session["id"])
        if probe.status == 200:
            freed = probe
            break
        probe.close()
    assert freed is not None, "the slow client was never disconnected"
    freed.close()
    last = send_ok(server, session["id"], "still running")
    fast.wait_for(_is_idle_of(last["id"]))
    received, how = slow.read_unread(quiet_seconds=5)
    slow.close()
    fast.close()
    # then
    assert how in ("eof", "reset")
    assert fast.retained() == history(server, session["id"])
    assert history(server, session["id"])[-1]["data"] == {"status": "idle"}
