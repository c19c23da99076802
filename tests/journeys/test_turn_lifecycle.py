"""How a turn starts and ends: statuses, input ids, and queued messages running back to back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    open_stream,
    outline,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

USAGE_STOP = {"stop_reason": "stop"}


def _answer(text: str) -> dict[str, object]:
    answer = f"echo: {text}"
    return {"text": answer, "usage": {"input": len(text), "output": len(answer)}, **USAGE_STOP}


def test_a_turn_goes_running_then_idle_with_its_input_id(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    # when
    message = send_ok(module_brain, session["id"], "hello")
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    # then
    assert outline(events) == [
        ("user.message", None, {"type": "user.message", "text": "hello", "delivery": "queue"}),
        ("session.status", message["id"], {"status": "running"}),
        ("assistant.message", message["id"], _answer("hello")),
        ("session.status", message["id"], {"status": "idle"}),
    ]
    assert events[0]["id"] == message["id"]
    assert wait_for_status(module_brain, session["id"], "idle")["status"] == "idle"


def test_the_session_is_running_as_soon_as_a_message_is_accepted(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    # when
    message = client.send(session["id"], {"type": "user.message", "text": "sleep:0.5"})
    status = client.get(session["id"])["status"]
    wait_for_turn_end(module_brain, session["id"], message["id"])
    # then
    assert status == "running"
    assert client.get(session["id"])["status"] == "idle"


def test_the_checkpoint_moves_to_the_end_of_each_completed_turn(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    # when
    message = client.send(session["id"], {"type": "user.message", "text": "checkpointed"})
    events = wait_for_turn_end(module_brain, session["id"], message["id"])
    after = client.get(session["id"])
    # then
    last = events[-1]
    assert after["checkpoint"]["id"] != session["checkpoint"]["id"]
    assert after["checkpoint"]["offset"] > 0
    assert after["updated_at"] >= session["updated_at"]
    page_after_checkpoint = client.history(session["id"], after=events[-2]["cursor"])
    assert page_after_checkpoint["events"] == [last]


def test_queued_messages_run_in_order_with_no_idle_in_between(brain_factory: Callable[..., BrainServer]) -> None:
    # given: limits.active=1 and another session holding the only turn slot, so the messages queue
    server = brain_factory(limits={"active": 1})
    blocker = create_session(server)
    blocking = send_ok(server, blocker["id"], "sleep:30")
    session = create_session(server)
    first = send_ok(server, session["id"], "a")
    second = send_ok(server, session["id"], "b")
    third = send_ok(server, session["id"], "c")
    # when
    with open_stream(server, session["id"]) as stream:
        server.sdk().interrupt(blocker["id"])
        stream.wait_for_event("session.status", input_id=third["id"], status="idle")
        seen = stream.retained()
    # then
    events = history(server, session["id"])
    assert outline(events) == [
        ("user.message", None, {"type": "user.message", "text": "a", "delivery": "queue"}),
        ("session.status", first["id"], {"status": "running"}),
        ("user.message", None, {"type": "user.message", "text": "b", "delivery": "queue"}),
        ("user.message", None, {"type": "user.message", "text": "c", "delivery": "queue"}),
        ("assistant.message", first["id"], _answer("a")),
        ("session.status", second["id"], {"status": "running"}),
        ("assistant.message", second["id"], _answer("b")),
        ("session.status", third["id"], {"status": "running"}),
        ("assistant.message", third["id"], _answer("c")),
        ("session.status", third["id"], {"status": "idle"}),
    ]
    assert seen == events
    assert [e["data"]["status"] for e in history(server, blocker["id"]) if e["type"] == "session.status"] == [
        "running",
        "interrupted",
    ]
    assert blocking["id"] in [e.get("input_id") for e in history(server, blocker["id"])]


def test_a_message_sent_after_idle_starts_a_new_turn(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)
    first = send_ok(module_brain, session["id"], "one")
    wait_for_turn_end(module_brain, session["id"], first["id"])
    # when
    second = send_ok(module_brain, session["id"], "two")
    events = wait_for_turn_end(module_brain, session["id"], second["id"])
    # then
    assert [(e["type"], e.get("input_id"), e["data"].get("status")) for e in events] == [
        ("user.message", None, None),
        ("session.status", first["id"], "running"),
        ("assistant.message", first["id"], None),
        ("session.status", first["id"], "idle"),
        ("user.message", None, None),
        ("session.status", second["id"], "running"),
        ("assistant.message", second["id"], None),
        ("session.status", second["id"], "idle"),
    ]
