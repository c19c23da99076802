"""DELETE /sessions/{id} through the published client (Brain.delete; raw HTTP under 2.0.0) against
a real server with local files: the session is gone from every route, its files and its rows,
a running turn is stopped, and only a manage token of its tenant may delete it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from brain import BrainError

from tests.fixtures.server import (
    BrainServer,
    create_session,
    open_stream,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)
from tests.support.client import delete_session

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

CLIENT_TIMEOUT_SECONDS = 15.0


def _error(call: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises(BrainError) as caught:
        call()
    return caught.value.status, caught.value.code


def _gone(server: BrainServer, session_id: str) -> None:
    """Every session route answers 404 not_found, and the session is listed nowhere."""
    with server.client() as client:
        answers = [
            client.get(f"/sessions/{session_id}"),
            client.post(f"/sessions/{session_id}/events", json={"type": "user.message", "text": "hello"}),
            client.post(f"/sessions/{session_id}/resume"),
            client.post(f"/sessions/{session_id}/close"),
            client.get(f"/sessions/{session_id}/events"),
            client.delete(f"/sessions/{session_id}"),
        ]
        listed = client.get("/sessions", params={"limit": 1000}).json()["sessions"]
    assert [answer.status_code for answer in answers] == [404] * 6
    assert {answer.json()["error"]["code"] for answer in answers} == {"not_found"}
    assert session_id not in {session["id"] for session in listed}


def test_a_deleted_session_is_gone_from_every_route_its_files_and_a_restart(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given: a session with a completed turn
    server = brain_factory()
    session = create_session(server)
    accepted = send_ok(server, session["id"], "hello")
    wait_for_turn_end(server, session["id"], accepted["id"])
    directory = server.data_dir / "sessions" / session["id"]
    assert directory.is_dir()

    # when
    delete_session(server.sdk(), session["id"])

    # then
    _gone(server, session["id"])
    assert not directory.exists()
    assert [entry.name for entry in (server.data_dir / "sessions").iterdir()] == []
    # and: a second delete is 404 in the spec's envelope, through the client too
    assert _error(lambda: delete_session(server.sdk(), session["id"])) == (404, "not_found")
    # and: nothing revives it after a restart
    server.restart()
    _gone(server, session["id"])


def test_a_session_whose_log_is_damaged_can_still_be_deleted(brain_factory: Callable[..., BrainServer]) -> None:
    # given: a session whose event log no longer decodes (it cannot load: GET is 500)
    server = brain_factory()
    session = create_session(server)
    accepted = send_ok(server, session["id"], "hello")
    wait_for_turn_end(server, session["id"], accepted["id"])
    server.stop()
    log = server.data_dir / "sessions" / session["id"] / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[1] = b'{"id":"' + b"0" * 10 + b"not json"
    log.write_bytes(b"\n".join(lines))
    server.start()
    with server.client() as client:
        assert client.get(f"/sessions/{session['id']}").status_code == 500

    # when
    delete_session(server.sdk(), session["id"])

    # then
    _gone(server, session["id"])
    assert not log.parent.exists()


def test_the_answer_names_the_deleted_session(module_brain: BrainServer) -> None:
    # given
    session = create_session(module_brain)

    # when
    with module_brain.client() as client:
        response = client.delete(f"/sessions/{session['id'].upper()}")

    # then
    assert response.status_code == 200
    assert response.json() == {"id": session["id"], "deleted": True}


def test_a_delete_stops_a_running_turn_and_cancels_its_queued_input(module_brain: BrainServer) -> None:
    # given: a turn that would run for 30 s, one input queued behind it, a stream open
    session = create_session(module_brain)
    running = send_ok(module_brain, session["id"], "sleep:30")
    queued = send_ok(module_brain, session["id"], "after")
    wait_for_status(module_brain, session["id"], "running")
    stream = open_stream(module_brain, session["id"])

    # when
    started = time.monotonic()
    delete_session(module_brain.sdk(), session["id"])
    took = time.monotonic() - started

    # then: the stream saw the turn stop and the queued input cancelled, then ended
    assert stream.wait_ended()
    retained = [(e["type"], e.get("input_id"), e["data"]) for e in stream.retained()]
    assert retained[-3:] == [
        ("session.error", running["id"], {"code": "conflict", "message": "turn interrupted: session closed"}),
        ("session.error", queued["id"], {"code": "conflict", "message": "queued input interrupted before execution"}),
        ("session.status", None, {"status": "closed"}),
    ]
    assert took < CLIENT_TIMEOUT_SECONDS, f"the delete took {took:.1f}s"
    print(f"delete of a running session answered in {took:.2f}s")
    _gone(module_brain, session["id"])


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        pytest.param("charlie", 404, "not_found", id="other_tenant_case"),
        pytest.param("reader", 403, "forbidden", id="read_only_case"),
        pytest.param("bob", 403, "forbidden", id="no_manage_case"),
    ],
)
def test_only_a_manage_token_of_its_tenant_deletes_a_session(
    module_brain: BrainServer, name: str, status: int, code: str
) -> None:
    # given
    session = create_session(module_brain)

    # when
    refused = _error(lambda: delete_session(module_brain.sdk(name), session["id"]))

    # then: refused, and nothing happened
    assert refused == (status, code)
    assert module_brain.sdk().get(session["id"])["status"] == "idle"
    assert (module_brain.data_dir / "sessions" / session["id"]).is_dir()
