"""Capacity limits: the input queue, loaded sessions and active turns. Bounds reject, never slow."""

from __future__ import annotations

from collections.abc import Callable

import pytest

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


def test_a_full_queue_answers_429_with_retry_after_and_appends_nothing(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory(limits={"queue": 1})
    session = create_session(server)
    running = send_ok(server, session["id"], "sleep:30")
    queued = send_ok(server, session["id"], "queued")
    before = history(server, session["id"])
    # when
    response = send(server, session["id"], "one too many")
    # then
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"] == {"code": "overloaded", "message": "session input queue is full"}
    assert history(server, session["id"]) == before
    server.sdk().interrupt(session["id"])
    assert outline(wait_for_turn_end(server, session["id"], running["id"])[-2:-1]) == [
        ("session.error", queued["id"], {"code": "conflict", "message": "queued input interrupted before execution"})
    ]


def test_an_idle_session_is_unloaded_to_make_room_and_a_busy_one_is_not(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: room for one loaded session
    server = brain_factory(limits={"active": 1, "loaded": 1})
    client = server.sdk()
    first, second = create_session(server), create_session(server)
    done = send_ok(server, first["id"], "first")
    wait_for_turn_end(server, first["id"], done["id"])
    # when: the second is loaded while the first is idle, then kept busy
    loaded = client.get(second["id"])
    busy = send_ok(server, second["id"], "sleep:30")
    with server.client() as http:
        refused = http.get(f"/sessions/{first['id']}")
        refused_send = http.post(f"/sessions/{first['id']}/events", json={"type": "user.message", "text": "x"})
    client.interrupt(second["id"])
    wait_for_turn_end(server, second["id"], busy["id"])
    client.resume(second["id"])
    reloaded = client.get(first["id"])
    # then
    assert loaded["status"] == "idle"
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
    assert refused.json()["error"]["code"] == "overloaded"
    assert refused_send.status_code == 429
    assert reloaded["status"] == "idle"
    assert [e["type"] for e in history(server, first["id"])] == [
        "user.message",
        "session.status",
        "assistant.message",
        "session.status",
    ]


def test_a_turn_beyond_limits_active_waits_for_a_slot_instead_of_failing(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory(limits={"active": 1})
    first, second = create_session(server), create_session(server)
    holding = send_ok(server, first["id"], "sleep:30")
    # when
    waiting = send_ok(server, second["id"], "waited")
    while_waiting = history(server, second["id"])
    status_while_waiting = server.sdk().get(second["id"])["status"]
    server.sdk().interrupt(first["id"])
    events = wait_for_turn_end(server, second["id"], waiting["id"])
    # then
    assert status_while_waiting == "running"
    assert outline(while_waiting) == [
        ("user.message", None, {"type": "user.message", "text": "waited", "delivery": "queue"}),
        ("session.status", waiting["id"], {"status": "running"}),
    ]
    assert outline(events[2:]) == [
        (
            "assistant.message",
            waiting["id"],
            {"text": "echo: waited", "usage": {"input": 6, "output": 12}, "stop_reason": "stop"},
        ),
        ("session.status", waiting["id"], {"status": "idle"}),
    ]
    assert wait_for_turn_end(server, first["id"], holding["id"])[-1]["data"] == {"status": "interrupted"}


def test_sessions_take_turns_on_one_active_slot(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory(limits={"active": 1, "loaded": 2})
    sessions = [create_session(server) for _ in range(2)]
    # when
    messages = [send_ok(server, session["id"], f"turn {index}") for index, session in enumerate(sessions)]
    # then
    for session, message in zip(sessions, messages, strict=True):
        assert wait_for_turn_end(server, session["id"], message["id"])[-1]["data"] == {"status": "idle"}
        assert wait_for_status(server, session["id"], "idle")["status"] == "idle"


def test_an_interrupt_of_a_turn_still_waiting_for_a_slot_stops_it(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory(limits={"active": 1})
    holder, waiter = create_session(server), create_session(server)
    holding = send_ok(server, holder["id"], "sleep:30")
    waiting = send_ok(server, waiter["id"], "never runs")
    # when
    server.sdk().interrupt(waiter["id"])
    events = wait_for_turn_end(server, waiter["id"], waiting["id"])
    # then
    assert outline(events[2:]) == [
        ("session.error", waiting["id"], {"code": "conflict", "message": "turn interrupted"}),
        ("session.status", waiting["id"], {"status": "interrupted"}),
    ]
    assert server.sdk().get(holder["id"])["status"] == "running"
    server.sdk().interrupt(holder["id"])
    wait_for_turn_end(server, holder["id"], holding["id"])
    server.sdk().resume(waiter["id"])
    again = send_ok(server, waiter["id"], "runs now")
    assert wait_for_turn_end(server, waiter["id"], again["id"])[-1]["data"] == {"status": "idle"}


def test_a_session_near_session_bytes_answers_429(brain_factory: Callable[..., BrainServer]) -> None:
    # given: the smallest log allowed and the largest messages
    server = brain_factory(limits={"session_bytes": 16 << 20, "input_bytes": 1 << 20})
    session = create_session(server)
    text = "x" * (1 << 20)
    # when
    statuses = []
    for _ in range(12):
        response = send(server, session["id"], text)
        statuses.append(response.status_code)
        if response.status_code != 202:
            break
        wait_for_turn_end(server, session["id"], response.json()["id"])
    before = history(server, session["id"])
    refused = send(server, session["id"], text)
    # then
    assert statuses[-1] == 429
    assert set(statuses[:-1]) == {202}
    assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
    assert refused.json()["error"]["code"] == "overloaded"
    assert history(server, session["id"]) == before
    assert server.sdk().get(session["id"])["status"] == "idle"
