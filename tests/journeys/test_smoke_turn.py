"""A first journey: the published client creates a session, sends a message, follows the turn."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.fixtures.server import BrainServer, create_session, history, wait_for_status

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0


def test_a_message_runs_a_turn_seen_live_and_in_history(brain: BrainServer) -> None:
    # given: a stream that is open before the turn runs (deltas are live-only)
    client = brain.sdk()
    session = create_session(brain)
    first = client.send(session["id"], {"type": "user.message", "text": "first"})
    seen: list[dict[str, Any]] = []
    first_done = threading.Event()

    def follow() -> None:
        stream = client.observe(session["id"])
        idles = 0
        for event in stream:
            seen.append(event)
            if event["type"] == "session.status" and event["data"]["status"] == "idle":
                idles += 1
                first_done.set()
                if idles == 2:
                    break
        stream.close()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert first_done.wait(20)
    # when
    message = client.send(session["id"], {"type": "user.message", "text": "hello"})
    reader.join(20)
    # then
    assert seen[0]["id"] == first["id"]
    assert [(event["type"], event.get("input_id"), event["data"]) for event in seen[seen.index(message) :]] == [
        ("user.message", None, {"type": "user.message", "text": "hello", "delivery": "queue"}),
        ("session.status", message["id"], {"status": "running"}),
        ("assistant.delta", message["id"], {"text": "echo:", "offset": 0}),
        ("assistant.delta", message["id"], {"text": " hello", "offset": 5}),
        (
            "assistant.message",
            message["id"],
            {"text": "echo: hello", "usage": {"input": 5, "output": 11}, "stop_reason": "stop"},
        ),
        ("session.status", message["id"], {"status": "idle"}),
    ]
    assert [event["type"] for event in history(brain, session["id"])] == [
        "user.message",
        "session.status",
        "assistant.message",
        "session.status",
    ] * 2
    assert wait_for_status(brain, session["id"], "idle")["checkpoint"]["offset"] > 0
