"""POST /sessions/{id}/events: the Event a send returns, input rules, interrupts, idempotency keys."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator

import pytest
from brain import BrainError

from tests.fixtures.server import (
    BrainServer,
    create_session,
    history,
    make_server,
    send,
    send_ok,
    wait_for_status,
    wait_for_turn_end,
)

pytestmark = pytest.mark.client  # run under 2.3.0 and again under 2.0.0

HEX32 = re.compile(r"^[0-9a-f]{32}$")
INPUT_BYTES = 1024


@pytest.fixture(scope="module")
def small_brain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    server = make_server(tmp_path_factory.mktemp("brain"), limits={"input_bytes": INPUT_BYTES})
    server.start()
    yield server
    server.stop()


def _user_messages(server: BrainServer, session_id: str) -> list[str]:
    return [event["id"] for event in history(server, session_id) if event["type"] == "user.message"]


def test_a_send_returns_202_with_the_saved_event(small_brain: BrainServer) -> None:
    # given
    session = create_session(small_brain)
    # when
    response = send(small_brain, session["id"], "hello", key="msg-0001", delivery="queue")
    # then
    assert response.status_code == 202
    event = response.json()
    assert set(event) == {"id", "type", "time", "data", "cursor"}
    assert HEX32.match(event["id"])
    assert event["type"] == "user.message"
    assert event["data"] == {"type": "user.message", "text": "hello", "delivery": "queue", "key": "msg-0001"}
    cursor = json.loads(base64.urlsafe_b64decode(event["cursor"] + "=" * (-len(event["cursor"]) % 4)))
    assert cursor == {"o": 0, "i": event["id"]}
    assert history(small_brain, session["id"])[0] == event


def test_the_sdk_send_defaults_delivery_to_queue_and_omits_an_absent_key(small_brain: BrainServer) -> None:
    # given
    client = small_brain.sdk("bob")
    session = create_session(small_brain)
    # when
    event = client.send(session["id"], {"type": "user.message", "text": "no key"})
    # then
    assert event["data"] == {"type": "user.message", "text": "no key", "delivery": "queue"}
    assert "input_id" not in event


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        pytest.param({"text": ""}, 400, "invalid_request", id="empty_text_case"),
        pytest.param({"text": " \n\t "}, 400, "invalid_request", id="blank_text_case"),
        pytest.param({"text": None}, 400, "invalid_request", id="null_text_case"),
        pytest.param({"text": "x" * (INPUT_BYTES + 1)}, 400, "invalid_request", id="oversized_text_case"),
        pytest.param({"text": "é" * (INPUT_BYTES // 2 + 1)}, 400, "invalid_request", id="oversized_bytes_case"),
        pytest.param({"text": "hi", "key": "k" * 129}, 400, "invalid_request", id="key_over_128_case"),
        pytest.param({"text": "hi", "key": "é" * 65}, 400, "invalid_request", id="key_over_128_bytes_case"),
        pytest.param({"text": "hi", "delivery": "steer"}, 422, "unsupported", id="steer_case"),
        pytest.param({"text": "hi", "delivery": "now"}, 400, "invalid_request", id="unknown_delivery_case"),
        pytest.param({"text": "hi", "delivery": ""}, 400, "invalid_request", id="empty_delivery_case"),
        pytest.param({"type": "user.shout", "text": "hi"}, 400, "invalid_request", id="unknown_type_case"),
        pytest.param({"type": "user.interrupt", "text": "hi"}, 400, "invalid_request", id="interrupt_text_case"),
        pytest.param({"type": "user.interrupt", "key": "k"}, 400, "invalid_request", id="interrupt_key_case"),
        pytest.param({"type": "user.interrupt", "delivery": None}, 400, "invalid_request", id="interrupt_null_case"),
    ],
)
def test_an_invalid_input_is_refused_and_appends_nothing(
    small_brain: BrainServer, fields: dict[str, object], status: int, code: str
) -> None:
    # given
    session = create_session(small_brain)
    body = {"type": "user.message", **fields}
    # when
    with small_brain.client() as client:
        response = client.post(f"/sessions/{session['id']}/events", json=body)
    # then
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert history(small_brain, session["id"]) == []
    assert small_brain.sdk().get(session["id"])["status"] == "idle"


def test_text_and_key_at_their_limits_are_accepted(small_brain: BrainServer) -> None:
    # given
    session = create_session(small_brain)
    # when
    response = send(small_brain, session["id"], "é" * (INPUT_BYTES // 2), key="é" * 64)
    # then
    assert response.status_code == 202
    wait_for_turn_end(small_brain, session["id"], response.json()["id"])


def test_an_interrupt_without_a_running_turn_is_a_no_op(small_brain: BrainServer) -> None:
    # given
    session = create_session(small_brain)
    message = send_ok(small_brain, session["id"], "done")
    before = wait_for_turn_end(small_brain, session["id"], message["id"])
    # when
    with small_brain.client("bob") as client:
        response = client.post(f"/sessions/{session['id']}/events", json={"type": "user.interrupt"})
    # then
    assert (response.status_code, response.json()) == (202, {"status": "interrupt_requested"})
    assert history(small_brain, session["id"]) == before
    assert small_brain.sdk().get(session["id"])["status"] == "idle"


def test_the_same_key_and_text_returns_the_original_event_without_a_second_turn(small_brain: BrainServer) -> None:
    # given
    client = small_brain.sdk()
    session = create_session(small_brain)
    first = client.send(session["id"], {"type": "user.message", "text": "once", "key": "k-1"})
    # when
    again_running = client.send(session["id"], {"type": "user.message", "text": "once", "key": "k-1"})
    wait_for_turn_end(small_brain, session["id"], first["id"])
    again_idle = client.send(session["id"], {"type": "user.message", "text": "once", "key": "k-1"})
    # then
    assert again_running == first
    assert again_idle == first
    events = history(small_brain, session["id"])
    assert [event["type"] for event in events] == [
        "user.message",
        "session.status",
        "assistant.message",
        "session.status",
    ]
    assert client.get(session["id"])["status"] == "idle"


def test_the_same_key_with_different_text_is_409_and_appends_nothing(small_brain: BrainServer) -> None:
    # given
    client = small_brain.sdk()
    session = create_session(small_brain)
    first = client.send(session["id"], {"type": "user.message", "text": "original", "key": "k-2"})
    before = wait_for_turn_end(small_brain, session["id"], first["id"])
    # when
    with pytest.raises(BrainError) as caught:
        client.send(session["id"], {"type": "user.message", "text": "changed", "key": "k-2"})
    # then
    assert (caught.value.status, caught.value.code) == (409, "conflict")
    assert history(small_brain, session["id"]) == before


def test_keys_belong_to_one_session(small_brain: BrainServer) -> None:
    # given
    one, two = create_session(small_brain), create_session(small_brain)
    first = send_ok(small_brain, one["id"], "same", key="shared-key")
    # when
    second = send_ok(small_brain, two["id"], "other", key="shared-key")
    # then
    assert second["id"] != first["id"]
    assert second["data"]["text"] == "other"


def test_a_key_rejected_with_429_is_not_consumed(brain_factory: Callable[..., BrainServer]) -> None:
    # given: a running turn and a full queue of one
    server = brain_factory(limits={"queue": 1})
    session = create_session(server)
    running = send_ok(server, session["id"], "sleep:30")
    queued = send_ok(server, session["id"], "queued")
    # when
    rejected = send(server, session["id"], "retry me", key="k-429")
    after_rejection = history(server, session["id"])
    server.sdk().interrupt(session["id"])
    wait_for_turn_end(server, session["id"], running["id"])
    server.sdk().resume(session["id"])
    accepted = send(server, session["id"], "retry me", key="k-429")
    # then
    assert rejected.status_code == 429
    assert rejected.headers["retry-after"] == "1"
    assert rejected.json()["error"]["code"] == "overloaded"
    assert [event["id"] for event in after_rejection if event["type"] == "user.message"] == [
        running["id"],
        queued["id"],
    ]
    assert accepted.status_code == 202
    assert accepted.json()["data"] == {"type": "user.message", "text": "retry me", "delivery": "queue", "key": "k-429"}
    assert _user_messages(server, session["id"]) == [running["id"], queued["id"], accepted.json()["id"]]


def test_keys_still_apply_after_a_restart(brain_factory: Callable[..., BrainServer]) -> None:
    # given
    server = brain_factory()
    session = create_session(server)
    first = send_ok(server, session["id"], "before restart", key="durable")
    wait_for_turn_end(server, session["id"], first["id"])
    server.restart()
    # when
    same = send(server, session["id"], "before restart", key="durable")
    different = send(server, session["id"], "after restart", key="durable")
    # then
    assert (same.status_code, same.json()) == (202, first)
    assert (different.status_code, different.json()["error"]["code"]) == (409, "conflict")
    assert _user_messages(server, session["id"]) == [first["id"]]
    assert wait_for_status(server, session["id"], "idle")["status"] == "idle"


def test_a_send_to_a_closed_session_is_409_even_with_a_known_key(small_brain: BrainServer) -> None:
    # given
    client = small_brain.sdk()
    session = create_session(small_brain)
    first = client.send(session["id"], {"type": "user.message", "text": "hi", "key": "closed-key"})
    wait_for_turn_end(small_brain, session["id"], first["id"])
    client.close(session["id"])
    before = history(small_brain, session["id"])
    # when
    outcomes = []
    for body in ({"text": "hi", "key": "closed-key"}, {"text": "new"}):
        with pytest.raises(BrainError) as caught:
            client.send(session["id"], {"type": "user.message", **body})  # type: ignore[typeddict-item]
        outcomes.append((caught.value.status, caught.value.code))
    # then
    assert outcomes == [(409, "conflict"), (409, "conflict")]
    assert history(small_brain, session["id"]) == before


def test_a_retry_with_a_known_key_while_the_queue_is_full_returns_the_original(
    brain_factory: Callable[..., BrainServer],
) -> None:
    # given
    server = brain_factory(limits={"queue": 1})
    session = create_session(server)
    running = send_ok(server, session["id"], "sleep:30")
    queued = send_ok(server, session["id"], "queued", key="retry-me")
    # when
    retried = send(server, session["id"], "queued", key="retry-me")
    # then
    assert (retried.status_code, retried.json()) == (202, queued)
    assert _user_messages(server, session["id"]) == [running["id"], queued["id"]]
    server.sdk().interrupt(session["id"])
    wait_for_turn_end(server, session["id"], running["id"])
