"""A first journey: the published client creates a session, sends a message, follows the turn."""

from __future__ import annotations

from tests.fixtures.server import BrainServer, create_session, history, wait_for_status


def test_a_message_runs_a_turn_seen_live_and_in_history(brain: BrainServer) -> None:
    # given
    client = brain.sdk()
    session = create_session(brain)
    # when
    message = client.send(session["id"], {"type": "user.message", "text": "hello"})
    seen = []
    stream = client.observe(session["id"])
    for event in stream:
        seen.append((event["type"], event.get("input_id"), event["data"]))
        if event["type"] == "session.status" and event["data"]["status"] == "idle":
            break
    stream.close()
    # then
    assert seen == [
        ("user.message", None, {"type": "user.message", "text": "hello", "delivery": "queue"}),
        ("session.status", message["id"], {"status": "running"}),
        ("assistant.delta", message["id"], {"text": "echo:"}),
        ("assistant.delta", message["id"], {"text": " hello"}),
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
    ]
    assert wait_for_status(brain, session["id"], "idle")["checkpoint"]["offset"] > 0
