"""Stopping turns: interrupt, resume from the last completed checkpoint, and close."""

from __future__ import annotations

from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    outline,
    send,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

QUEUED = "queued input interrupted before execution"


def _running(server: BrainServer, text: str = "sleep:30") -> tuple[dict[str, Any], dict[str, Any]]:
    session = create_session(server)
    message = send_ok(server, session["id"], text)
    return session, message


def _status_code(call: Any) -> tuple[int, str]:
    with pytest.raises(BrainError) as caught:
        call()
    return caught.value.status, caught.value.code


def test_an_interrupt_stops_the_turn_and_fails_each_queued_message(module_brain: BrainServer) -> None:
    # given
    session, running = _running(module_brain)
    second = send_ok(module_brain, session["id"], "second")
    third = send_ok(module_brain, session["id"], "third")
    # when
    with module_brain.client("bob") as client:
        response = client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"})
    events = wait_for_turn_end(module_brain, session["id"], running["id"])
    # then
    assert (response.status_code, response.json()) == (202, {"status": "interrupt_requested"})
    assert outline(events[4:]) == [
        ("session.error", running["id"], {"code": "conflict", "message": "turn interrupted"}),
        ("session.error", second["id"], {"code": "conflict", "message": QUEUED}),
        ("session.error", third["id"], {"code": "conflict", "message": QUEUED}),
        ("session.status", running["id"], {"status": "interrupted"}),
    ]
    assert [e["type"] for e in events[:4]] == ["user.message", "session.status", "user.message", "user.message"]
    assert module_brain.sdk().get(session["id"])["status"] == "interrupted"


def test_a_send_to_an_interrupted_session_is_409_and_appends_nothing(module_brain: BrainServer) -> None:
    # given
    session, running = _running(module_brain)
    module_brain.sdk().interrupt(session["id"])
    before = wait_for_turn_end(module_brain, session["id"], running["id"])
    # when
    response = send(module_brain, session["id"], "too early", key="early")
    # then
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "conflict",
        "message": "resume the interrupted session before sending input",
    }
    assert history(module_brain, session["id"]) == before


def test_resume_returns_the_idle_session_and_emits_idle_without_input_id(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session, running = _running(module_brain)
    client.interrupt(session["id"])
    wait_for_turn_end(module_brain, session["id"], running["id"])
    # when
    with module_brain.client() as http:
        response = http.post(f"/sessions/{session['id']}/resume")
    # then
    assert response.status_code == 200
    resumed = response.json()
    assert resumed["status"] == "idle"
    assert resumed["checkpoint"] == session["checkpoint"]
    assert resumed == client.get(session["id"])
    last = history(module_brain, session["id"])[-1]
    assert (last["type"], last["data"], "input_id" in last) == ("session.status", {"status": "idle"}, False)
    message = client.send(session["id"], {"type": "user.message", "text": "after resume"})
    assert wait_for_turn_end(module_brain, session["id"], message["id"])[-1]["data"] == {"status": "idle"}


def test_resume_hides_the_stopped_turn_from_the_harness(module_brain: BrainServer) -> None:
    # given: one completed turn, then a turn that is interrupted
    client = module_brain.sdk()
    session = create_session(module_brain)
    done = client.send(session["id"], {"type": "user.message", "text": "kept"})
    wait_for_turn_end(module_brain, session["id"], done["id"])
    stopped = client.send(session["id"], {"type": "user.message", "text": "sleep:30"})
    client.interrupt(session["id"])
    wait_for_turn_end(module_brain, session["id"], stopped["id"])
    # when
    client.resume(session["id"])
    probe = client.send(session["id"], {"type": "user.message", "text": "history"})
    events = wait_for_turn_end(module_brain, session["id"], probe["id"])
    # then
    assert events[-2]["data"]["text"] == "history: kept | history"
    assert "sleep:30" in [e["data"].get("text") for e in events if e["type"] == "user.message"]


def test_resume_of_an_idle_session_returns_it_unchanged(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    message = client.send(session["id"], {"type": "user.message", "text": "idle"})
    before = wait_for_turn_end(module_brain, session["id"], message["id"])
    current = client.get(session["id"])
    # when
    resumed = client.resume(session["id"])
    # then
    assert resumed == current
    assert history(module_brain, session["id"]) == before


def test_resume_of_a_running_or_closed_session_is_409(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    running_session, running = _running(module_brain)
    closed = create_session(module_brain)
    client.close(closed["id"])
    wait_for_status(module_brain, closed["id"], "closed")
    running_before = history(module_brain, running_session["id"])
    closed_before = history(module_brain, closed["id"])
    # when
    outcomes = [
        _status_code(lambda: client.resume(running_session["id"])),
        _status_code(lambda: client.resume(closed["id"])),
    ]
    # then
    assert outcomes == [(409, "conflict"), (409, "conflict")]
    assert history(module_brain, running_session["id"]) == running_before
    assert history(module_brain, closed["id"]) == closed_before
    client.interrupt(running_session["id"])
    wait_for_turn_end(module_brain, running_session["id"], running["id"])


def test_closing_an_idle_session_is_202_and_final(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    message = client.send(session["id"], {"type": "user.message", "text": "before close"})
    wait_for_turn_end(module_brain, session["id"], message["id"])
    # when
    with module_brain.client() as http:
        response = http.post(f"/sessions/{session['id']}/close")
        again = http.post(f"/sessions/{session['id']}/close")
    # then
    assert (response.status_code, response.json()) == (202, {"status": "close_requested"})
    assert (again.status_code, again.json()) == (202, {"status": "close_requested"})
    assert client.get(session["id"])["status"] == "closed"
    events = history(module_brain, session["id"], "reader")
    assert outline(events[-1:]) == [("session.status", None, {"status": "closed"})]
    assert [e["data"].get("status") for e in events].count("closed") == 1
    assert _status_code(lambda: client.send(session["id"], {"type": "user.message", "text": "late"})) == (
        409,
        "conflict",
    )
    assert history(module_brain, session["id"]) == events


def test_closing_a_running_session_stops_the_turn_and_the_queue(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session, running = _running(module_brain)
    queued = send_ok(module_brain, session["id"], "queued")
    # when
    client.close(session["id"])
    wait_for_status(module_brain, session["id"], "closed")
    events = history(module_brain, session["id"])
    # then
    assert outline(events[3:]) == [
        ("session.error", running["id"], {"code": "conflict", "message": "turn interrupted: session closed"}),
        ("session.error", queued["id"], {"code": "conflict", "message": QUEUED}),
        ("session.status", None, {"status": "closed"}),
    ]
    assert _status_code(lambda: client.send(session["id"], {"type": "user.message", "text": "x"})) == (409, "conflict")


def test_an_interrupted_session_can_be_closed(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session, running = _running(module_brain)
    client.interrupt(session["id"])
    wait_for_turn_end(module_brain, session["id"], running["id"])
    # when
    client.close(session["id"])
    # then
    assert wait_for_status(module_brain, session["id"], "closed")["status"] == "closed"
    assert outline(history(module_brain, session["id"])[-1:]) == [("session.status", None, {"status": "closed"})]


def test_an_interrupt_of_a_closed_session_changes_nothing(module_brain: BrainServer) -> None:
    # given
    client = module_brain.sdk()
    session = create_session(module_brain)
    client.close(session["id"])
    before = history(module_brain, session["id"])
    # when
    client.interrupt(session["id"])
    # then
    assert history(module_brain, session["id"]) == before
    assert client.get(session["id"])["status"] == "closed"
